#include "lib/base/identity.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "lib/base/error.h"
#include "lib/base/socket.h"

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

bool processGone(int pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  // kill(pid, 0) still succeeds for a process that exited but was not reaped yet: look at its state too.
  char path[64], stat[512];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  Fd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd) return errno == ENOENT;
  ssize_t n = ::read(fd.get(), stat, sizeof stat - 1);
  if (n <= 0) return false;
  stat[n] = '\0';
  const char* paren = std::strrchr(stat, ')');  // "pid (comm) S ...": comm may contain anything
  return paren != nullptr && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

}  // namespace chorus
