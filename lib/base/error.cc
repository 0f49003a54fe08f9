#include "lib/base/error.h"

#include <cerrno>
#include <cstring>
#include <vector>

namespace chorus {

namespace {
thread_local std::string* tLastError = nullptr;

// Frees this thread's kept texts when it ends (Note [Immortal statics]).
struct Reclaim {
  std::vector<std::string**> slots;
  ~Reclaim();
};
thread_local bool tReclaimed = false;
thread_local Reclaim tReclaim;
Reclaim::~Reclaim() {
  tReclaimed = true;
  for (std::string** s : slots) {
    delete *s;
    *s = nullptr;
  }
}
}  // namespace

void failErrno(const std::string& what) {
  int e = errno;
  throw Error(chorusSystemError, fmt::format("{}: {}", what, std::strerror(e)), e);
}

Error peerAborted(const std::string& peer, bool wrongCall, const std::string& reason) {
  return Error(wrongCall ? chorusInvalidUsage : chorusRemoteError,
               fmt::format("{} failed and aborted the communicator: {}", peer, reason), 0, Error::Kind::kPeerAborted);
}

const char* keepThreadText(std::string*& slot, const std::string& text) {
  if (slot == nullptr) {
    slot = new std::string;
    if (!tReclaimed) tReclaim.slots.push_back(&slot);
  }
  *slot = text;
  return slot->c_str();
}

void setThreadLastError(const std::string& text) { keepThreadText(tLastError, text); }
const char* threadLastError() { return tLastError != nullptr ? tLastError->c_str() : ""; }

}  // namespace chorus
