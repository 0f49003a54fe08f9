// The memory two ranks share: one segment per pair of ranks, holding one FIFO per direction and message class.
//
// Each FIFO is single-producer/single-consumer and lock-free. A slot's first cache line is its header; its
// `ready` word is written last (release) with the slot's FIFO index + 1, so a consumer polls exactly the line
// it will read next, and a small message travels inline right after the header: one slot, no other shared
// write on the way. The consumer's `tail` (slots released) sits on a cache line of its own, read by the
// producer only when its cached copy says the FIFO is full. Nothing on the data path takes a lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "lib/base/socket.h"

namespace chorus::transport::shm {

constexpr size_t kLine = 64;
constexpr uint32_t kSlots = 16;           // per direction and class: 1 MiB (see Note [Shared-memory data path])
constexpr size_t kSlotBytes = 64 * 1024;  // one header line + payload
constexpr size_t kSlotPayload = kSlotBytes - kLine;
constexpr uint64_t kSegmentMagic = 0x43484f5255534d33;  // "CHORUSM3": fence requests beside the sleep flags

// Small: the whole message sits in the header line itself (one cache line from producer to consumer).
// Inline: bytes [offset, offset + len) of the message follow the header. Rendezvous: they are at `addr` in
// the sender's address space, for the receiver to copy.
enum class SlotType : uint8_t { Small = 1, Inline = 2, Rendezvous = 3 };
constexpr size_t kSmallBytes = 24;

struct SlotHeader {
  std::atomic<uint64_t> ready;  // FIFO index + 1 once the slot is filled; written last
  uint64_t seq, count;          // the message's OpTag...
  int32_t root;
  uint8_t kind, dtype, redop;
  SlotType type;
  uint64_t msgLen;              // ...and its length
  union {
    struct {
      uint64_t offset, len, addr;
    } part;                       // Inline, Rendezvous
    uint8_t small[kSmallBytes];  // Small
  };
};
static_assert(sizeof(SlotHeader) == kLine);
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory atomics must be lock-free");

struct alignas(kLine) Line {
  std::atomic<uint64_t> v;
};

struct alignas(kLine) Slot {
  SlotHeader h;
  uint8_t payload[kSlotPayload];
};
static_assert(sizeof(Slot) == kSlotBytes);
static_assert(kSlotPayload % 8 == 0, "a slot must hold whole elements of every datatype");

// What a side that sleeps in poll() shares with the side that must wake it: the peer reads this line after every
// batch it publishes (ShmTransport's wake()), so the request travels on a line that is read anyway.
struct alignas(kLine) SleepLine {
  std::atomic<uint64_t> asleep;  // about to sleep in poll(): wake it with a byte on the pair's socket
  std::atomic<uint64_t> fences;  // Note [Fenced publishes]: odd: publish to this side with a full fence
};

struct Fifo {
  Line tail;  // slots released by the consumer; written by the consumer only
  Slot slots[kSlots];
};

// Side 0 is the lower rank of the pair (it creates the segment), side 1 the higher.
struct PairSegment {
  Line magic;
  SleepLine sleep[2];  // written by side s
  Line following[2];   // the other side's `fences` value that side s publishes by (Note [Fenced publishes])
  Line canRead[2];  // side s can copy straight out of the other side's memory: 0 unknown, 1 yes, 2 no
  Line membarrier[2];  // side s runs in a process registered for membarrier(GLOBAL_EXPEDITED): 1 yes
  Fifo fifo[2][2];  // fifo[c][s]: message class c (lib/base/ops.h); side s produces, side 1 - s consumes
};

// A shared mapping of a PairSegment, backed by a memfd that never has a name in any file system (so a killed
// rank leaves nothing behind). The owner creates it; the peer maps the descriptor it receives. Within one
// process (ranks as threads) both ends share a single mapping: the synchronisation then happens on one
// address, which is what ThreadSanitizer (and any reader of a core dump) can follow.
class Segment {
 public:
  Segment() = default;
  static Segment create(const std::string& name);  // zero-filled
  static Segment map(int fd);                      // throws if the size is not a PairSegment's
  PairSegment* get() const { return mapping_ ? mapping_->seg : nullptr; }
  int fd() const { return fd_.get(); }

 private:
  struct Mapping {
    PairSegment* seg = nullptr;
    uint64_t key = 0;  // the memfd's inode
    ~Mapping();
  };
  static std::shared_ptr<Mapping> shared(int fd);
  Fd fd_;
  std::shared_ptr<Mapping> mapping_;
};

}  // namespace chorus::transport::shm
