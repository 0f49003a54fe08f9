#include "transports/ipc/ipc_transport.h"

#include <sys/timerfd.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <vector>

#include "lib/base/auth.h"
#include "lib/base/error.h"
#include "lib/base/identity.h"
#include "lib/base/log.h"
#include "lib/base/socket.h"
#include "lib/kernels/reduce.h"
#include "transports/ipc/ipc_page.h"
#include "transports/mismatch.h"

namespace chorus::transport::ipc {

// Note [Device IPC]:
// A pair of ranks of one host shares a page of host memory (ipc_page.h) with a ring of descriptors per direction. A
// send exports the allocation that holds its buffer (mem::Device::ipcExport: cudaIpcGetMemHandle for CUDA) and
// publishes a descriptor: the message's tag and length, the handle and the offset. The receiver, in order, checks the
// tag (Note [Message tags]), maps the allocation once (ipcOpen: cudaIpcOpenMemHandle, or the pointer itself between
// threads of one process, which CUDA cannot open its own handles for) and starts the device's copy from the sender's
// buffer straight into its destination (copyStart: the copy engine); a receive that reduces starts the reduce kernel
// reading the peer's buffer directly (reduceStart: dst = src op peer), saving the copy to scratch and its second
// pass. Once that copy or kernel has finished it counts the descriptor consumed, which completes the sender's
// request: its buffer is free again. So every byte crosses once, device to device, and the host only moves
// descriptors. (NCCL stages through a FIFO in device memory because its kernels, running for the whole operation,
// cannot wait for the host to map user buffers; here the host drives every step, so a FIFO would only add a second
// device pass per byte, and a new buffer costs one mapping, cached.) Copies finish in order, so descriptors are
// consumed in order and each side's counters are single-writer. Mapped allocations are cached by their handle's bytes
// (an allocation freed and made again has new ones), at most kMaxOpened, least recently used closed first. A buffer
// the runtime cannot export (CUDA: memory of cudaMallocAsync pools or cuMemCreate) is copied device to device into a
// pooled bounce buffer of ours first, and that is published instead: one more pass over device memory, at the
// device's copy rate.
//
// Waiting: a device copy ends without waking anyone and a peer's descriptor comes without a signal, so before a
// waiter sleeps, armWake arms a timer (50 us while a copy runs here, 1 ms otherwise) that waitFd() reports. A waiter
// only sleeps after spinning and yielding (Comm::waitUntil), so the timer costs latency only when the peer is late
// anyway. Peer failures: its host transport reports an abort; a process that has exited (a zombie
// counting as gone: processGone) is found before each sleep.
namespace {

constexpr size_t kMaxOpened = 128;
using Handle = std::array<uint8_t, mem::kIpcHandleBytes>;

class IpcTransport final : public DeviceTransport {
 public:
  IpcTransport(const Setup& setup, mem::Device* device, bool reduceOnReceive)
      : setup_(setup),
        device_(device),
        peers_(setup.nranks),
        reduceOnReceive_(reduceOnReceive && device->hasReduceStart()) {
    timer_ = Fd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (!timer_) failErrno("timerfd_create");
  }
  ~IpcTransport() override {
    // Copies still running (an operation failed) must end before their memory is unmapped.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (Peer& p : peers_) {
      for (Send& q : p.queued)
        try {
          while (q.bounce != nullptr && !device_->copyDone(q.ticket) && std::chrono::steady_clock::now() < until)
            std::this_thread::yield();
        } catch (const Error&) {
          break;
        }
      for (Recv& r : p.copying)
        try {
          while (r.ticket != 0 && !device_->copyDone(r.ticket) && std::chrono::steady_clock::now() < until)
            std::this_thread::yield();
        } catch (const Error&) {
          break;
        }
    }
    for (auto& [handle, o] : opened_) device_->ipcClose(handle.data(), o.base);
    for (uint8_t* b : bounces_) device_->release(b);  // a peer may still map one: CUDA keeps it until it unmaps
  }
  const char* name() const override { return kName; }
  std::vector<uint8_t> address() const override { return {}; }

  void connect(int peer, const std::vector<uint8_t>&, std::chrono::steady_clock::time_point) override {
    attach(peer, PageMapping::create(pageName(setup_.rank, peer)), 0);
  }
  void accept(int peer, const std::vector<uint8_t>&, std::chrono::steady_clock::time_point deadline) override {
    attach(peer, PageMapping::open(pageName(peer, setup_.rank), setup_.peers[peer].name(), setup_.peers[peer].pid,
                                   deadline), 1);
  }
  void awaitPeers(std::chrono::steady_clock::time_point deadline) override {
    for (int r : connected_)
      if (r > setup_.rank) peers_[r].page->awaitAttached(setup_.peers[r].name(), setup_.peers[r].pid, deadline);
  }

  void isend(int peer, const void* buf, size_t len, const OpTag& tag, Request* req) override {
    Peer& p = peers_[peer];
    p.queued.push_back({buf, len, tag, req, 0});
    publish(p);
  }
  void irecv(int peer, void* buf, size_t len, const OpTag& tag, Request* req) override {
    peers_[peer].waiting.push_back({static_cast<uint8_t*>(buf), nullptr, len, tag, req, false, {}, {}, 0, nullptr});
  }
  bool irecvReduce(int peer, void* dst, const void* src, size_t len, chorusDataType_t dtype, chorusRedOp_t op,
                   const OpTag& tag, Request* req) override {
    if (!reduceOnReceive_) return false;
    peers_[peer].waiting.push_back(
        {static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), len, tag, req, true, dtype, op, 0, nullptr});
    return true;
  }

  bool progress() override {
    if (deadPeer_ >= 0) [[unlikely]]
      fail(chorusRemoteError, "{}: {} died (its process is gone) while a device transfer with it was pending",
           self().name(), setup_.peers[deadPeer_].name());
    bool moved = false;
    for (int r : connected_) {
      Peer& p = peers_[r];
      if (!p.published.empty() || !p.queued.empty()) moved |= completeSends(p);
      if (!p.waiting.empty() || !p.copying.empty()) moved |= pumpRecvs(r, p);
    }
    return moved;
  }

  int waitFd() const override { return timer_.get(); }

  bool armWake() override {
    uint64_t ticks;
    while (::read(timer_.get(), &ticks, sizeof ticks) > 0) {}
    bool pending = false, copying = false;
    for (int r : connected_) {
      Peer& p = peers_[r];
      if (!p.waiting.empty()) {
        if (p.in->ring[p.taken % kEntries].ready.load(std::memory_order_acquire) == p.taken + 1) return false;
        pending = true;
      }
      if (!p.published.empty()) {
        if (p.out->consumed.v.load(std::memory_order_acquire) > p.published.front().index) return false;
        pending = true;
      }
      copying |= !p.copying.empty() || (!p.queued.empty() && p.queued.front().bounce != nullptr);
      if ((pending || copying) && p.watchable && processGone(setup_.peers[r].pid)) {
        deadPeer_ = r;
        return false;
      }
    }
    itimerspec t{};
    if (copying) t.it_value.tv_nsec = 50'000;
    else if (pending) t.it_value.tv_nsec = 1'000'000;
    ::timerfd_settime(timer_.get(), 0, &t, nullptr);  // all zero: disarmed, nothing here to wait for
    return true;
  }

  void sendAbort(chorusResult_t, const std::string&, std::chrono::steady_clock::time_point) override {}
  void close(std::chrono::steady_clock::time_point) override {}

 private:
  struct Send {
    const void* buf;
    size_t len;
    OpTag tag;
    Request* req;
    uint64_t index;  // in the ring, once published
    // A buffer that cannot be exported goes from a device bounce buffer of ours (copied there first).
    uint8_t* bounce = nullptr;
    int sizeClass = -1;
    uint64_t ticket = 0;  // of the copy to the bounce buffer
  };
  struct Opened {
    void* base;
    int users;  // copies running from it
    uint64_t lastUse;
  };
  struct Recv {
    uint8_t* dst;
    const uint8_t* src;  // irecvReduce: dst = src op payload
    size_t len;
    OpTag tag;
    Request* req;
    bool reduce;
    chorusDataType_t dtype;
    chorusRedOp_t op;
    uint64_t ticket;  // of the copy or reduction running; 0: none (an empty message)
    Opened* from;     // the mapping it reads, for the cache's use count
  };
  struct Peer {
    std::shared_ptr<PageMapping> page;
    Direction* out = nullptr;  // we send
    Direction* in = nullptr;   // we receive
    uint64_t next = 0;         // entries published on out
    uint64_t finishedSeen = 0; // out's consumed count, as last read
    std::deque<Send> queued, published;
    uint64_t taken = 0, finished = 0;  // entries of in started, and finished (consumed)
    std::deque<Recv> waiting, copying;
    bool watchable = false;  // its pid is another process's that this one can see (not another pid namespace's)
  };

  const PeerInfo& self() const { return setup_.peers[setup_.rank]; }

  // Unpredictable without the secret (a local stranger cannot take the name first), and revealing nothing of it:
  // /dev/shm's names are visible to every local user.
  std::string pageName(int lo, int hi) const {
    const auth::Key k = auth::derive(setup_.secret, "chorus ipc page name", setup_.commId);
    uint64_t tag;
    std::memcpy(&tag, k.data(), sizeof tag);
    return fmt::format("/chorus-ipc-{:016x}-{:016x}-{}-{}", tag, setup_.commId, lo, hi);
  }

  void attach(int peer, std::shared_ptr<PageMapping> page, int side) {
    Peer& p = peers_[peer];
    p.out = &page->get()->dir[side];
    p.in = &page->get()->dir[1 - side];
    p.page = std::move(page);
    const int pid = setup_.peers[peer].pid;
    p.watchable = pid != getpid() && !processGone(pid);
    connected_.push_back(peer);
  }

  // Publishes queued sends while the ring has room.
  void publish(Peer& p) {
    while (!p.queued.empty()) {
      if (p.next - p.finishedSeen >= kEntries) {
        p.finishedSeen = p.out->consumed.v.load(std::memory_order_acquire);
        if (p.next - p.finishedSeen >= kEntries) return;
      }
      Send& s = p.queued.front();
      Entry& e = p.out->ring[p.next % kEntries];
      if (s.len > 0 && !exportInto(s, e)) return;  // its bounce copy is still running
      e.seq = s.tag.seq;
      e.count = s.tag.count;
      e.root = s.tag.root;
      e.kind = static_cast<uint8_t>(s.tag.kind);
      e.dtype = s.tag.dtype;
      e.redop = s.tag.redop;
      e.len = s.len;
      s.index = p.next;
      e.ready.store(++p.next, std::memory_order_release);
      p.published.push_back(s);
      p.queued.pop_front();
    }
  }

  // Fills e's handle and offset for s's bytes; false while they are still being copied to a bounce buffer. Memory
  // the runtime cannot export (CUDA: cudaMallocAsync pools, cuMemCreate) is first copied, device to device, into a
  // bounce buffer of ours (device scratch, which can be), pooled by power-of-two size class.
  bool exportInto(Send& s, Entry& e) {
    if (s.bounce == nullptr) {
      try {
        e.offset = device_->ipcExport(s.buf, e.handle);
        return true;
      } catch (const Error& err) {
        if (!warnedBounce_)
          CHORUS_INFO(kNet, "{}: a buffer cannot be exported for IPC ({}); such buffers are copied to a device "
                      "buffer that can be first", self().name(), err.what());
        warnedBounce_ = true;
      }
      s.sizeClass = mem::bounceSizeClass(s.len);
      if (bounceFree_.size() <= static_cast<size_t>(s.sizeClass)) bounceFree_.resize(s.sizeClass + 1);
      auto& free = bounceFree_[s.sizeClass];
      if (free.empty()) {
        s.bounce = static_cast<uint8_t*>(device_->allocate(mem::bounceBytes(s.sizeClass)));
        bounces_.push_back(s.bounce);
      } else {
        s.bounce = free.back();
        free.pop_back();
      }
      s.ticket = device_->copyStart(s.bounce, s.buf, s.len);
    }
    if (!device_->copyDone(s.ticket)) return false;
    e.offset = device_->ipcExport(s.bounce, e.handle);
    return true;
  }

  bool completeSends(Peer& p) {
    bool moved = false;
    if (!p.published.empty()) {
      p.finishedSeen = p.out->consumed.v.load(std::memory_order_acquire);
      while (!p.published.empty() && p.published.front().index < p.finishedSeen) {
        Send& s = p.published.front();
        if (s.bounce != nullptr) bounceFree_[s.sizeClass].push_back(s.bounce);
        s.req->done = true;
        p.published.pop_front();
        moved = true;
      }
    }
    if (!p.queued.empty()) {
      const uint64_t before = p.next;
      publish(p);
      moved |= p.next != before;
    }
    return moved;
  }

  bool pumpRecvs(int peer, Peer& p) {
    bool moved = false;
    while (!p.waiting.empty()) {
      const Entry& e = p.in->ring[p.taken % kEntries];
      if (e.ready.load(std::memory_order_acquire) != p.taken + 1) break;
      Recv r = p.waiting.front();
      if (!(tagOf(e) == r.tag) || e.len != r.len) mismatch(peer, e, r);
      if (r.len > 0) start(peer, e, r);
      ++p.taken;
      p.waiting.pop_front();
      p.copying.push_back(r);
      moved = true;
    }
    while (!p.copying.empty()) {
      Recv& r = p.copying.front();
      if (r.ticket != 0 && !device_->copyDone(r.ticket)) break;
      if (r.from != nullptr) --r.from->users;
      p.in->consumed.v.store(++p.finished, std::memory_order_release);
      r.req->done = true;
      p.copying.pop_front();
      moved = true;
    }
    return moved;
  }

  // Starts the device work of a receive whose descriptor has come: a copy from the peer's buffer, or a reduction
  // reading it.
  void start(int peer, const Entry& e, Recv& r) {
    try {
      Handle h;
      std::memcpy(h.data(), e.handle, h.size());
      r.from = &open(h);
      const uint8_t* payload = static_cast<const uint8_t*>(r.from->base) + e.offset;
      r.ticket = r.reduce ? device_->reduceStart(r.dst, r.src, payload, r.len / kernels::dataTypeSize(r.dtype),
                                                 r.dtype, r.op)
                          : device_->copyStart(r.dst, payload, r.len);
      ++r.from->users;
    } catch (const Error& err) {
      fail(err.code(), "{}: receiving {} from {} over device IPC: {}", self().name(), describe(r.tag),
           setup_.peers[peer].name(), err.what());
    }
  }

  Opened& open(const Handle& h) {
    ++uses_;
    if (last_ != nullptr && last_->first == h) {
      last_->second.lastUse = uses_;
      return last_->second;
    }
    auto it = opened_.find(h);
    if (it == opened_.end()) {
      if (opened_.size() >= kMaxOpened) evict();
      it = opened_.emplace(h, Opened{device_->ipcOpen(h.data()), 0, 0}).first;
    }
    it->second.lastUse = uses_;
    last_ = &*it;
    return it->second;
  }

  void evict() {
    auto victim = opened_.end();
    for (auto it = opened_.begin(); it != opened_.end(); ++it)
      if (it->second.users == 0 && (victim == opened_.end() || it->second.lastUse < victim->second.lastUse))
        victim = it;
    if (victim == opened_.end()) return;  // all in use: the cache grows past its bound for a while
    if (last_ == &*victim) last_ = nullptr;
    device_->ipcClose(victim->first.data(), victim->second.base);
    opened_.erase(victim);
  }

  [[noreturn]] void mismatch(int peer, const Entry& e, const Recv& want) const {
    throw mismatchedMessage(self().name(), setup_.peers[peer].name(), want.tag, want.len, tagOf(e), e.len);
  }

  const Setup& setup_;
  mem::Device* device_;
  std::vector<Peer> peers_;
  std::vector<int> connected_;
  bool reduceOnReceive_ = false;
  Fd timer_;
  int deadPeer_ = -1;
  std::map<Handle, Opened> opened_;
  std::pair<const Handle, Opened>* last_ = nullptr;  // the mapping used last: most messages reuse it
  uint64_t uses_ = 0;
  std::vector<std::vector<uint8_t*>> bounceFree_;  // device bounce buffers by size class (exportInto)
  std::vector<uint8_t*> bounces_;                  // all of them, released by the destructor
  bool warnedBounce_ = false;
};

}  // namespace

std::unique_ptr<DeviceTransport> create(const Setup& setup, mem::Device* device, bool reduceOnReceive) {
  return std::make_unique<IpcTransport>(setup, device, reduceOnReceive);
}

}  // namespace chorus::transport::ipc
