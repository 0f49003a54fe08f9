// Where a call's buffers live, and the data work done on them there.
//
// Note [Memory spaces]:
// A call's buffers are classified once, at the API (mem::classify: the classifier a device plugin registers, or
// host memory when none is), and the Space travels in CollArgs. The algorithms copy, reduce, scale and allocate
// scratch through it (Context::scratch takes the Space), never with memcpy or the CPU kernels, so each is
// written once for host and device memory, as UCC's memory and execution components make it. Host memory is
// served inline by lib/kernels: a test of one pointer, no virtual call, so host calls keep their speed.
// Transports only move bytes; the one that reduces while receiving (shm) does it on the CPU, so irecvReduce is
// offered host memory only and device memory is received into device scratch and reduced by the device.
// A communicator works on the device current at its creation (as NCCL's does); the API accepts host memory and
// that device's, both buffers of a call in one space, and refuses the rest naming the argument.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "lib/kernels/copy.h"
#include "lib/kernels/reduce.h"

namespace chorus::mem {

constexpr size_t kIpcHandleBytes = 128;  // CHORUS_IPC_HANDLE_BYTES of transports/plugin.h

// One device's memory (a GPU), implemented where that device's runtime is linked (a plugin), never in
// libchorus.so itself. Each call runs after the calls before it and has finished when it returns: the
// algorithms hand the bytes to a transport next.
class Device {
 public:
  virtual const char* name() const = 0;  // "cuda:0"
  // dst and src may each be this device's memory or host memory; they do not overlap unless equal.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void reduce(void* dst, const void* a, const void* b, size_t count, chorusDataType_t dt,
                      chorusRedOp_t op) = 0;
  // dst = srcs[0] op srcs[1] op ... op srcs[n-1], combined left to right (the order host memory uses); dst may
  // be srcs[0], no other source.
  virtual void reduceN(void* dst, const void* const* srcs, int n, size_t count, chorusDataType_t dt,
                       chorusRedOp_t op) = 0;
  virtual void scaleDivide(void* buf, size_t count, chorusDataType_t dt, int divisor) = 0;
  virtual void* allocate(size_t bytes) = 0;  // throws chorus::Error when it cannot
  virtual void release(void* p) = 0;
  // The CPU may read and write this memory, so a transport moves it as it moves host memory. Otherwise only a
  // transport of the device (or staging through host memory) can.
  virtual bool hostAccessible() const = 0;
  // Staging (Note [Staging device memory] in lib/comm/comm.cc): host memory the device copies to and from fastest
  // (pinned), and copies that run while the host goes on, finishing in the order started. copyDone never blocks.
  virtual void* allocateHost(size_t bytes) = 0;  // throws chorus::Error when it cannot
  virtual void releaseHost(void* p) = 0;
  virtual uint64_t copyStart(void* dst, const void* src, size_t bytes) = 0;
  virtual bool copyDone(uint64_t ticket) = 0;
  // IPC between the ranks of one host (Note [Device IPC] in transports/ipc/ipc_transport.cc), where hasIpc():
  // ipcExport describes the allocation holding p in kIpcHandleBytes bytes (equal bytes: the same live allocation)
  // and returns p's offset in it; ipcOpen maps one exported by any process of the host and returns its start;
  // reduceStart runs dst = a op b as a copyStart (the same tickets, in order). Each throws chorus::Error.
  virtual bool hasIpc() const = 0;
  virtual size_t ipcExport(const void* p, uint8_t* handle) = 0;
  virtual void* ipcOpen(const uint8_t* handle) = 0;
  virtual void ipcClose(const uint8_t* handle, void* base) = 0;  // from destructors: never throws
  virtual bool hasReduceStart() const = 0;
  virtual uint64_t reduceStart(void* dst, const void* a, const void* b, size_t count, chorusDataType_t dt,
                               chorusRedOp_t op) = 0;
  // Peer access (Note [Peer access] in lib/comm/comm.cc): a name of this device that every process of the host gives
  // it alike ("" when the runtime has none), and the names of the devices this process sees whose memory this one
  // cannot map and copy directly. Throw chorus::Error.
  virtual std::string hostWideId() { return {}; }
  virtual std::vector<std::string> unreachablePeers() { return {}; }
  // Why this process cannot use this memory at all (its runtime's plugin is missing or cannot run), with the code
  // to refuse it with; nullptr when it can.
  virtual const char* unusable(chorusResult_t* /*code*/) const { return nullptr; }

 protected:
  ~Device() = default;
};

// Host memory (no device: the CPU kernels, inline, as fast as calling them) or one device's memory. A value:
// two Spaces are equal when they are the same memory.
class Space {
 public:
  constexpr Space() = default;
  constexpr explicit Space(Device* device) : dev_(device) {}
  bool isHost() const { return dev_ == nullptr; }
  Device* device() const { return dev_; }
  std::string name() const { return dev_ == nullptr ? "host" : dev_->name(); }
  bool operator==(const Space&) const = default;

  void copy(void* dst, const void* src, size_t bytes) const {
    if (dst == src || bytes == 0) return;
    if (dev_ == nullptr) hostCopy(dst, src, bytes);
    else dev_->copy(dst, src, bytes);
  }
  void reduce(void* dst, const void* a, const void* b, size_t count, chorusDataType_t dt, chorusRedOp_t op) const {
    if (dev_ == nullptr) kernels::reduce(dst, a, b, count, dt, op);
    else dev_->reduce(dst, a, b, count, dt, op);
  }
  void reduceN(void* dst, const void* const* srcs, int n, size_t count, chorusDataType_t dt,
               chorusRedOp_t op) const;
  void scaleDivide(void* buf, size_t count, chorusDataType_t dt, int divisor) const {
    if (dev_ == nullptr) kernels::scaleDivide(buf, count, dt, divisor);
    else dev_->scaleDivide(buf, count, dt, divisor);
  }

 private:
  // Space::copy's callers may pass overlapping ranges (memmove's contract); kernels::copy takes disjoint ones.
  static void hostCopy(void* dst, const void* src, size_t bytes) {
    const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
    if (d + bytes <= s || s + bytes <= d) kernels::copy(dst, src, bytes);
    else std::memmove(dst, src, bytes);
  }

  Device* dev_ = nullptr;
};

// Bounce buffers (staging's pinned host memory, device IPC's device memory) are pooled by power-of-two size class:
// class c holds 4 KiB << c bytes.
inline int bounceSizeClass(size_t len) { return len <= 4096 ? 0 : static_cast<int>(std::bit_width(len - 1)) - 12; }
inline size_t bounceBytes(int sizeClass) { return size_t{4096} << sizeClass; }

// A device runtime's own stream (a cudaStream_t), which the calls on a chorusStream made from it follow (Note
// [Device streams] in lib/comm/stream.cc). Every call but reached() may throw chorus::Error.
class DeviceStream {
 public:
  virtual ~DeviceStream() = default;  // after every fence was released
  virtual Device* device() const = 0;
  // Queues a fence on the stream: the host can see when the work queued before it is done (reached), and the work
  // queued after it waits until release. Fences are released in the order they were made.
  virtual uint64_t fence() = 0;
  virtual bool reached(uint64_t fence) = 0;  // never blocks; throws the device's error
  virtual void release(uint64_t fence) = 0;
  virtual void synchronize() = 0;  // until all work queued on the stream is done
};

// A device runtime's view of pointers and streams, registered by the plugin that links it. Without one every
// pointer is host memory, and classifying costs one load.
class Runtime {
 public:
  virtual Device* deviceOf(const void* p) = 0;  // nullptr: host memory
  virtual Device* current() = 0;                // this thread's device now (nullptr: none); a communicator
                                                // created now works on it
  virtual const char* name() const = 0;         // "cuda"
  // As Device::unusable, for a runtime that only recognises its memory (Note [A driver without its plugin]).
  virtual const char* unusable(chorusResult_t* /*code*/) const { return nullptr; }
  // Wraps the runtime's stream `native` (nullptr: the current device's default stream); throws chorusInvalidUsage
  // when the runtime has no streams.
  virtual std::unique_ptr<DeviceStream> openStream(void* native) = 0;
  virtual bool hasStreams() const { return false; }
 protected:
  ~Runtime() = default;
};
void setRuntime(Runtime* c);  // nullptr unregisters; c outlives every communicator that used it
Space currentSpace();               // the space of this thread's current device, host without one
Runtime* runtime();                 // the registered one, or nullptr
bool readable(const void* p);       // this process may read the byte at p (a system call; never faults)

namespace detail {
inline std::atomic<Runtime*> gRuntime{nullptr};
}
// True when a device runtime is registered; without one every pointer is host memory.
inline bool anyDevices() { return detail::gRuntime.load(std::memory_order_acquire) != nullptr; }
inline Space classify(const void* p) {  // host for nullptr
  Runtime* c = detail::gRuntime.load(std::memory_order_acquire);
  return Space(c != nullptr && p != nullptr ? c->deviceOf(p) : nullptr);
}

}  // namespace chorus::mem
