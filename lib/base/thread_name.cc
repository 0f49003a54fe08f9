#include "lib/base/thread_name.h"

#include <pthread.h>

namespace chorus {

void nameThisThread(const char* name) {
  char shortName[16] = {};
  for (int i = 0; i < 15 && name[i] != '\0'; ++i) shortName[i] = name[i];
  (void)pthread_setname_np(pthread_self(), shortName);
}

}  // namespace chorus
