// Process-wide state that is never destroyed.
//
// Note [Immortal statics]:
// Chorus may be called from another library's exit-time destructors: torch keeps its process groups in a static
// registry of libtorch, whose destructor (run by exit()) destroys the "chorus" backend, which destroys its
// communicator. exit() runs static destructors in the reverse order of construction, so those of a library loaded
// later (libchorus.so, which Python imports after libtorch) have already run by then, and a communicator torn
// down from there would use a destroyed registry (the SIGSEGV torch 2.6 showed in every process that exited
// without destroy_process_group). So no static of libchorus or of its plugins has a destructor that runs at exit:
// each is an Immortal (its storage outlives every caller; what it owns is returned to the system with the
// process), and per-thread text is kept in fixed buffers (thread-local destructors run even before exit()'s
// handlers). test/test_exit.cc calls the API from exit handlers registered before any Chorus state was made.
#pragma once

#include <new>
#include <utility>

namespace chorus {

template <class T>
class Immortal {
 public:
  template <class... Args>
  explicit Immortal(Args&&... args) {
    ::new (static_cast<void*>(storage_)) T(std::forward<Args>(args)...);
  }
  Immortal(const Immortal&) = delete;
  Immortal& operator=(const Immortal&) = delete;

  T& operator*() { return *std::launder(reinterpret_cast<T*>(storage_)); }
  const T& operator*() const { return *std::launder(reinterpret_cast<const T*>(storage_)); }
  T* operator->() { return &**this; }
  const T* operator->() const { return &**this; }

 private:
  alignas(T) unsigned char storage_[sizeof(T)];
};

}  // namespace chorus
