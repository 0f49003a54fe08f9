// The host memory two ranks of one host share for device IPC (transports/ipc/ipc_transport.h): per direction, a
// ring of descriptors of device buffers the sender offers and the count of those the receiver has finished with.
// Single producer, single consumer, lock-free: an entry's `ready` word is written last (release) with its index
// + 1; `consumed` is written by the receiver only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "lib/mem/space.h"

namespace chorus::transport::ipc {

constexpr uint32_t kEntries = 64;  // messages in flight per direction; more wait in the sender's queue
constexpr uint64_t kPageMagic = 0x4348524950435031;  // "CHRIPCP1"

struct alignas(64) Entry {
  std::atomic<uint64_t> ready;  // index + 1 once filled; written last
  uint64_t seq, count;          // the message's OpTag...
  int32_t root;
  uint8_t kind, dtype, redop, pad;
  uint64_t len;                 // ...its length
  uint64_t offset;              // of the bytes in the exported allocation
  uint8_t handle[mem::kIpcHandleBytes];
};

struct alignas(64) Counter {
  std::atomic<uint64_t> v;
};

struct Direction {
  Counter consumed;  // entries the receiver has finished with: their bytes are copied, the entry may be reused
  Entry ring[kEntries];
};

// Side 0 is the lower rank of the pair (it creates the page), side 1 the higher.
struct Page {
  Counter magic;
  Counter attached;  // 1 once the higher rank has mapped it (the creator may not leave before: it unlinks it)
  Direction dir[2];  // dir[s]: side s sends
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory atomics must be lock-free");

// A shared mapping of a Page, named in /dev/shm until both ends have it (the higher rank unlinks it once mapped;
// the creator again at close, for a peer that never came). Ranks of one process share one mapping, so that their
// synchronisation is on one address, which ThreadSanitizer can follow.
class PageMapping {
 public:
  static std::shared_ptr<PageMapping> create(const std::string& name);  // zero-filled; throws chorus::Error
  // Waits for the creator (`peer`, process `pid`) until the deadline, then says it is attached; throws
  // chorus::Error naming the peer when it does not come, or its process is gone.
  static std::shared_ptr<PageMapping> open(const std::string& name, const std::string& peer, int pid,
                                           std::chrono::steady_clock::time_point deadline);
  // The creator's side: waits until the peer has attached (open), as open does.
  void awaitAttached(const std::string& peer, int pid, std::chrono::steady_clock::time_point deadline) const;
  ~PageMapping();
  Page* get() const { return page_; }
  const std::string& name() const { return name_; }

 private:
  Page* page_ = nullptr;
  std::string name_;
};

}  // namespace chorus::transport::ipc
