// The Python frame that took a Work's Future, watched until the callbacks it attaches cannot run on its thread
// (Note [Callback order] in work.cc).
#pragma once

#include <Python.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace chorus::torchpg {

class FutureTaker {
 public:
  // The calling thread's innermost Python frame, taking the Future at [future, future + bytes), when the thread
  // holds the GIL and runs Python; null for a C++ caller (DDP's reducer with its built-in hooks), which attaches
  // its callbacks before it returns.
  static std::shared_ptr<FutureTaker> here(const void* future, std::size_t bytes);
  ~FutureTaker();  // drops the frame, with the GIL
  FutureTaker(const FutureTaker&) = delete;
  FutureTaker& operator=(const FutureTaker&) = delete;

  // Whether the Future may be marked now without its callbacks running on the taker's thread: the frame has left
  // that thread's stack (or the thread is gone), the thread is blocked waiting on the Future, it has been off the
  // CPU for kBlocked with the frame still there (waiting on something else, such as torch.futures.wait_all), or
  // kLongest has passed (polling done(), say). Called repeatedly by one thread, without the GIL (takes it for the
  // frame check).
  bool settled();

  // How long the taker's thread may sit off the CPU, the frame on its stack, before it is taken to be waiting.
  static constexpr std::chrono::milliseconds kBlocked{50};
  // How long a frame may hold a Future before its callbacks are taken to be attached, whatever it does.
  static constexpr std::chrono::milliseconds kLongest{1000};

 private:
  FutureTaker(PyThreadState* tstate, PyObject* frame, const void* future, std::size_t bytes);
  bool frameOnStack();                   // with the GIL
  bool waitsOnFuture(bool* gone) const;  // from /proc: blocked in a futex on a word of the Future
  bool offCpuTooLong(bool* gone);

  PyThreadState* tstate_;  // compared, never dereferenced, until found among the interpreter's threads
  uint64_t threadId_;      // PyThreadState_GetID: tells a reused PyThreadState address from the taker's
  pid_t tid_;              // the kernel's id of the taker's thread, for /proc/self/task
  PyObject* frame_;        // a strong reference
  uintptr_t future_;       // the Future's address range, [future_, future_ + bytes_)
  std::size_t bytes_;
  std::chrono::steady_clock::time_point takenAt_;
  uint64_t lastCpuNs_ = 0;
  std::chrono::steady_clock::time_point quietSince_;
};

}  // namespace chorus::torchpg
