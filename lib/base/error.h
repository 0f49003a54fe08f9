// One error model inside the library: chorus::Error carries a chorusResult_t and a sentence naming the argument,
// rank or peer at fault. Exported functions catch it at the C boundary (lib/api/api_guard.h) and turn it into a
// result code plus chorusGetLastError() text.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "chorus/chorus.h"

namespace chorus {

class Error : public std::runtime_error {
 public:
  // What a caller may act on beyond the code. Control flow reads this, never the message.
  enum class Kind : uint8_t {
    kOther,
    kPeerAborted,  // a peer said it failed and aborted the communicator (peerAborted)
  };
  Error(chorusResult_t code, std::string message, int sysErrno = 0, Kind kind = Kind::kOther)
      : std::runtime_error(std::move(message)), code_(code), sysErrno_(sysErrno), kind_(kind) {}
  chorusResult_t code() const { return code_; }
  // The errno of the failed system call (failErrno), 0 for other errors: callers that handle one errno test this,
  // never the message.
  int sysErrno() const { return sysErrno_; }
  Kind kind() const { return kind_; }

 private:
  chorusResult_t code_;
  int sysErrno_;
  Kind kind_;
};

template <typename... Args>
[[noreturn]] void fail(chorusResult_t code, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(code, fmt::format(f, std::forward<Args>(args)...));
}

// Throws chorusSystemError with strerror(errno) appended.
[[noreturn]] void failErrno(const std::string& what);

// What a transport raises on `peer`'s Abort (it failed and aborted the communicator, for `reason`): Kind::kPeerAborted,
// with chorusInvalidUsage when the peer's failure was a wrong call there, else chorusRemoteError.
Error peerAborted(const std::string& peer, bool wrongCall, const std::string& reason);

// Thread-local text returned by chorusGetLastError(NULL).
void setThreadLastError(const std::string& text);
const char* threadLastError();

// Keeps a thread's copy of `text` in `slot`, a thread_local pointer, and returns it. Usable even from exit handlers,
// after the thread's destructors ran (Note [Immortal statics] in lib/base/immortal.h): the copy is freed when the
// thread ends and the slot cleared, so a call after that makes a new copy, which the process's end reclaims. (Not
// a buffer in thread-local storage: libchorus.so's TLS must stay small, as its initial-exec rank variable puts it
// in the static TLS that glibc reserves for libraries loaded with dlopen.)
const char* keepThreadText(std::string*& slot, const std::string& text);

}  // namespace chorus
