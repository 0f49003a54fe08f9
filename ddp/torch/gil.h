// Scopes that hold or release Python's GIL, for threads of chorus_torch that meet Python objects (a tensor's last
// reference, a Future's Python callbacks, the frame that took a Future).
#pragma once

#include <Python.h>

namespace chorus::torchpg {

// Whether Python is being finalized: no thread may take the GIL then.
inline bool pythonFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// Releases the GIL for a scope where this thread holds it (a process group destroyed from Python): the threads
// joined there may need it, to drop the last reference to a tensor that has a Python object.
class WithoutGil {
 public:
  WithoutGil() : state_(Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr) {}
  ~WithoutGil() {
    if (state_ != nullptr) PyEval_RestoreThread(state_);
  }
  WithoutGil(const WithoutGil&) = delete;
  WithoutGil& operator=(const WithoutGil&) = delete;

 private:
  PyThreadState* state_;
};

// Holds the GIL for a scope, where Python runs (the interpreter is not being finalized): held() says which.
class WithGil {
 public:
  WithGil() : held_(Py_IsInitialized() && !pythonFinalizing()) {
    if (held_) state_ = PyGILState_Ensure();
  }
  ~WithGil() {
    if (held_) PyGILState_Release(state_);
  }
  WithGil(const WithGil&) = delete;
  WithGil& operator=(const WithGil&) = delete;
  bool held() const { return held_; }

 private:
  bool held_;
  PyGILState_STATE state_{};
};

}  // namespace chorus::torchpg
