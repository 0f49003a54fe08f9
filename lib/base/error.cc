#include "lib/base/error.h"

#include <cerrno>
#include <cstring>

namespace chorus {

namespace {
thread_local std::string tLastError;
}

void failErrno(const std::string& what) {
  int e = errno;
  throw Error(chorusSystemError, fmt::format("{}: {}", what, std::strerror(e)));
}

void setThreadLastError(const std::string& text) { tLastError = text; }
const char* threadLastError() { return tLastError.c_str(); }

}  // namespace chorus
