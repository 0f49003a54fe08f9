// Note [Flight recorder]: each communicator keeps its last CHORUS_FLIGHT_RECORDER operations (calls, or groups of
// calls by their first) in a ring: sequence number, kind, count, datatype, op, root, algorithm, state (running, done,
// failed), when it started and how long it took, and the last receive it posted (peer and bytes: what a stuck
// operation most likely waits for). The executing thread writes; any thread may read (a dump on a signal, from the
// liveness thread, or chorusCommDump), so each slot is a seqlock without fences (GCC's TSan has none): the fields are
// release-stored and acquire-loaded, plain moves on x86; a reader retries a slot being rewritten and never blocks
// the writer. Writing costs a few plain stores and one coarse clock read (the kernel's
// tick, a few ns) per operation; `posted` two stores per receive. A dump is one JSON line per rank, merged by
// scripts/chorus_hang.py into who is stuck where.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "lib/base/ops.h"

namespace chorus {

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity);  // 0: records nothing
  bool on() const { return capacity_ != 0; }

  // Executing thread only. An operation starts (a group of `calls` by its first call's tag) and ends.
  void begin(const OpTag& tag, uint32_t calls) noexcept;
  void end(bool ok) noexcept;
  // The running operation's algorithm (algo::AllReduceAlgo + 1; 0: the kind's only one), once chosen.
  void algorithm(uint8_t code) noexcept {
    if (cur_ != nullptr) cur_->algo.store(code, std::memory_order_relaxed);
  }
  // A receive the running operation posted.
  void posted(int peer, uint64_t bytes) noexcept {
    if (cur_ == nullptr) [[unlikely]] return;
    cur_->recvPeer.store(peer, std::memory_order_relaxed);
    cur_->recvBytes.store(bytes, std::memory_order_relaxed);
  }

  // Any thread: the recorded operations, oldest first, as a JSON array.
  std::string json() const;

 private:
  enum State : uint8_t { kRunning = 1, kDone = 2, kFailed = 3 };
  struct Slot {
    std::atomic<uint64_t> version{0};  // odd while being rewritten
    std::atomic<uint64_t> seq{0}, count{0}, recvBytes{0};
    std::atomic<int64_t> startNs{0}, endNs{0};
    std::atomic<int32_t> root{-1}, recvPeer{-1};
    std::atomic<uint32_t> calls{0};
    std::atomic<uint8_t> kind{0}, dtype{0}, redop{0}, algo{0}, state{0};
  };
  const size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> next_{0};  // operations recorded so far; the writer's, read by dumps
  Slot* cur_ = nullptr;            // the running operation's slot (executing thread)
};

}  // namespace chorus
