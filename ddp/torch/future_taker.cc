#include "ddp/torch/future_taker.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "ddp/torch/gil.h"

namespace chorus::torchpg {

namespace {

// Reads a small /proc file whole into buf (NUL-terminated); false when it is not there (the thread ended).
bool readProc(const std::string& path, char* buf, std::size_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, buf, size - 1);
  ::close(fd);
  if (n < 0) return false;
  buf[n] = '\0';
  return true;
}

std::string taskFile(pid_t tid, const char* name) {
  return "/proc/self/task/" + std::to_string(tid) + "/" + name;
}

}  // namespace

std::shared_ptr<FutureTaker> FutureTaker::here(const void* future, std::size_t bytes) {
  if (!Py_IsInitialized() || !PyGILState_Check()) return nullptr;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  if (frame == nullptr) return nullptr;
  Py_INCREF(frame);
  return std::shared_ptr<FutureTaker>(
      new FutureTaker(PyThreadState_Get(), reinterpret_cast<PyObject*>(frame), future, bytes));
}

FutureTaker::FutureTaker(PyThreadState* tstate, PyObject* frame, const void* future, std::size_t bytes)
    : tstate_(tstate),
      threadId_(PyThreadState_GetID(tstate)),
      tid_(static_cast<pid_t>(::syscall(SYS_gettid))),
      frame_(frame),
      future_(reinterpret_cast<uintptr_t>(future)),
      bytes_(bytes),
      takenAt_(std::chrono::steady_clock::now()),
      quietSince_(takenAt_) {}

FutureTaker::~FutureTaker() {
  WithGil gil;
  if (gil.held()) Py_DECREF(frame_);  // once Python is finalizing, the frame is left to it
}

// The frame is looked at first: it has usually left by the first look (a hook returns right after then()), and
// the /proc reads are needed only while it has not.
bool FutureTaker::settled() {
  if (std::chrono::steady_clock::now() - takenAt_ >= kLongest) return true;
  if (static_cast<pid_t>(::syscall(SYS_gettid)) == tid_) return true;  // the taker itself, in C++ (closing)
  {
    WithGil gil;
    if (!gil.held() || !frameOnStack()) return true;
  }
  bool gone = false;
  if (waitsOnFuture(&gone) || gone) return true;
  return offCpuTooLong(&gone) || gone;
}

bool FutureTaker::frameOnStack() {
  PyInterpreterState* interp = PyThreadState_GetInterpreter(PyThreadState_Get());
  PyThreadState* t = PyInterpreterState_ThreadHead(interp);
  while (t != nullptr && !(t == tstate_ && PyThreadState_GetID(t) == threadId_)) t = PyThreadState_Next(t);
  if (t == nullptr) return false;  // the thread is gone
  PyFrameObject* f = PyThreadState_GetFrame(t);
  while (f != nullptr) {
    if (reinterpret_cast<PyObject*>(f) == frame_) {
      Py_DECREF(f);
      return true;
    }
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  return false;
}

// /proc/self/task/<tid>/syscall: the number of the system call the thread is blocked in and its arguments, in hex.
// A thread in Future::wait sleeps in futex() on a word of the Future's mutex or condition variable.
bool FutureTaker::waitsOnFuture(bool* gone) const {
  char buf[256];
  if (!readProc(taskFile(tid_, "syscall"), buf, sizeof buf)) {
    *gone = true;
    return false;
  }
  char* end = nullptr;
  const long nr = std::strtol(buf, &end, 10);
  if (end == buf || nr != SYS_futex) return false;
  const auto word = static_cast<uintptr_t>(std::strtoull(end, nullptr, 16));
  return word >= future_ && word < future_ + bytes_;
}

// Time on the CPU from /proc/self/task/<tid>/schedstat (ns), or from stat's utime + stime where the kernel keeps
// no schedstat (clock ticks: coarse, but kBlocked spans several).
bool FutureTaker::offCpuTooLong(bool* gone) {
  char buf[512];
  uint64_t cpu = 0;
  if (readProc(taskFile(tid_, "schedstat"), buf, sizeof buf)) {
    cpu = std::strtoull(buf, nullptr, 10);
  } else if (readProc(taskFile(tid_, "stat"), buf, sizeof buf)) {
    const char* p = std::strrchr(buf, ')');  // the name may hold spaces; fields 3.. follow it
    for (int field = 2; p != nullptr && field < 14; ++field) p = std::strchr(p + 1, ' ');
    if (p == nullptr) return false;
    char* next = nullptr;
    cpu = std::strtoull(p + 1, &next, 10);
    cpu += std::strtoull(next, nullptr, 10);
  } else {
    *gone = true;
    return false;
  }
  const auto now = std::chrono::steady_clock::now();
  if (cpu != lastCpuNs_) {
    lastCpuNs_ = cpu;
    quietSince_ = now;
    return false;
  }
  return now - quietSince_ >= kBlocked;
}

}  // namespace chorus::torchpg
