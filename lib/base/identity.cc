#include "lib/base/identity.h"

#include <sys/random.h>
#include <unistd.h>

#include <fstream>

#include "lib/base/error.h"

namespace chorus {

uint64_t randomU64() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != sizeof v) failErrno("getrandom");
  return v;
}

std::string hostIdentity(const std::string& overrideId) {
  if (!overrideId.empty()) return overrideId;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(f, boot);
  return std::string(host) + ":" + boot;
}

}  // namespace chorus
