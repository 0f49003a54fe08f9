#include "transports/shm/shm_transport.h"

#include <poll.h>
#include <linux/membarrier.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>

#include "lib/base/identity.h"
#include "lib/base/env.h"
#include "lib/base/error.h"
#include "lib/kernels/copy.h"
#include "lib/kernels/reduce.h"
#include "lib/base/log.h"
#include "transports/handshake.h"
#include "transports/mismatch.h"
#include "transports/shm/control.h"
#include "transports/shm/segment.h"

namespace chorus::transport::shm {

namespace {


constexpr EnvSpec kEnv[] = {
    {"CHORUS_SHM_DISABLE", "int", "0", "1: ranks on the same host use the next transport instead (as ^shm)"},
    {"CHORUS_SHM_DIRECT_BYTES", "bytes", "0",
     "shm messages from this size up are read straight from the sender's memory (process_vm_readv) instead of "
     "streamed through the FIFO; 0 = never (the measured default, transports/shm/shm_transport.h)"},
};
constexpr size_t kCopyPiece = 1024 * 1024;      // a direct copy yields to other peers' traffic this often
constexpr unsigned kControlEvery = 1024;        // progress() calls between looks at the control sockets

// Registers this process once for MEMBARRIER_CMD_GLOBAL_EXPEDITED (see wake()); false if the kernel refuses.
bool registerMembarrier() {
  static const bool ok = ::syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
  return ok;
}

uint64_t processNonce() {
  static const uint64_t nonce = randomU64() | 1;
  return nonce;
}

// What address() publishes through the bootstrap.
struct Address {
  char name[48];
  int32_t pid;
  uint32_t reserved;
  uint64_t processNonce, probeAddr, probeValue;
};
static_assert(sizeof(Address) <= kMaxAddressBytes);

void complete(Request* req) {
  req->pendingParts = 0;
  req->done = true;
}

// True if this process can read `len` bytes at `addr` in process `pid` and finds `expect` there.
bool probeRead(int pid, uint64_t addr, uint64_t expect) {
  uint64_t got = 0;
  iovec local{&got, sizeof got}, remote{reinterpret_cast<void*>(addr), sizeof got};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof got) && got == expect;
}

struct SendMsg {
  const uint8_t* buf;
  size_t len, sent;
  OpTag tag;
  Request* req;
};

struct RecvMsg {
  uint8_t* buf;
  size_t len, got;
  OpTag tag;
  Request* req;
  const uint8_t* src = nullptr;  // irecvReduce: buf = src op payload
  chorusDataType_t dtype = chorusFloat32;
  chorusRedOp_t op = chorusSum;
};

// One FIFO per direction for each message class (Note [Message classes] in lib/base/ops.h): collectives' messages
// and tagged point-to-point's travel apart, so that neither waits behind the other.
struct Lane {
  // producer
  Fifo* out = nullptr;
  uint64_t head = 0, tailSeen = 0;
  std::deque<SendMsg> sendq;  // not yet (wholly) in the FIFO
  struct DirectSend {
    uint64_t doneAt;  // complete once the consumer's tail reaches this
    Request* req;
    OpTag tag;
  };
  std::deque<DirectSend> direct;  // direct-copy sends the peer has not finished reading
  // consumer
  Fifo* in = nullptr;
  uint64_t next = 0;
  uint64_t directDone = 0;  // bytes of the current direct-copy slot already copied
  std::deque<RecvMsg> recvq;
};

struct Peer {
  int rank = -1;
  const PeerInfo* info = nullptr;
  int side = 0;  // this rank's side of the pair segment
  Fd sock;
  Segment seg;
  int pid = 0;
  bool sameProcess = false;
  FrameReader control;
  bool gone = false;
  Lane lanes[kMessageClasses];
  Lane& lane(const OpTag& t) { return lanes[messageClass(t)]; }

  PairSegment* s() const { return seg.get(); }
  bool peerReadsUs() const { return s()->canRead[1 - side].v.load(std::memory_order_relaxed) == 1; }
  // Both processes are membarrier targets, so a sleeper's membarrier() fences this rank too (see wake()).
  bool lightWake() {
    if (!light)
      light = s()->membarrier[0].v.load(std::memory_order_relaxed) == 1 &&
              s()->membarrier[1].v.load(std::memory_order_relaxed) == 1;
    return light;
  }
  bool light = false;
  // The peer's `fences` request this rank last answered; odd: it asks for fences (Note [Fenced publishes]).
  uint64_t following = 0;
  bool fenced() const { return (following & 1) != 0; }
};

struct Arrived {
  Fd fd;
  Fd segment;
  Hello hello;
};

class ShmTransport final : public Transport {
 public:
  ShmTransport(const Setup& setup, uint64_t directBytes)
      : setup_(setup), directBytes_(directBytes), probe_(randomU64()),
        acceptor_("shm", setup, sizeof(Hello), [this](const uint8_t* h, const Fd& segment) {
          Hello hello;
          std::memcpy(&hello, h, sizeof hello);
          return check(hello, segment);
        }) {
    listener_ = listenAbstract(&name_);
    epoll_ = Fd(epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_) failErrno("epoll_create1");
  }

  ~ShmTransport() override = default;

  const char* name() const override { return "shm"; }

  std::vector<uint8_t> address() const override {
    Address a{};
    std::memcpy(a.name, name_.data(), std::min(name_.size(), sizeof a.name - 1));
    a.pid = getpid();
    a.processNonce = processNonce();
    a.probeAddr = reinterpret_cast<uint64_t>(&probe_);
    a.probeValue = probe_;
    std::vector<uint8_t> out(sizeof a);
    std::memcpy(out.data(), &a, sizeof a);
    return out;
  }

  void connect(int peer, const std::vector<uint8_t>& address, Deadline deadline) override {
    Address a{};
    if (address.size() != sizeof a) fail(chorusInternalError, "shm address of rank {} is malformed", peer);
    std::memcpy(&a, address.data(), sizeof a);
    a.name[sizeof a.name - 1] = '\0';
    auto p = std::make_unique<Peer>();
    p->side = 0;
    p->seg = Segment::create(fmt::format("chorus-{}-{}", setup_.rank, peer));
    p->sock = connectAbstract(a.name, deadline);
    p->pid = setup_.peers[peer].pid;
    p->sameProcess = a.processNonce == processNonce();
    bool canRead = p->sameProcess || probeRead(p->pid, a.probeAddr, a.probeValue);
    p->s()->canRead[0].v.store(canRead ? 1 : 2, std::memory_order_relaxed);
    p->s()->membarrier[0].v.store(registerMembarrier() ? 1 : 0, std::memory_order_relaxed);
    Hello h{kHelloMagic, kWireVersion, setup_.commId, setup_.rank, peer, processNonce(),
            reinterpret_cast<uint64_t>(&probe_), probe_, {}};
    seal(h, setup_);
    sendHello(p->sock.get(), &h, sizeof h, p->seg.fd(), setup_.peers[peer].name());
    addPeer(peer, std::move(p));
  }

  void stopListening() override {
    listener_.reset();
    acceptor_.dropPending();
    arrived_.clear();  // none is left for a peer: every accept() has returned
  }

  void accept(int peer, const std::vector<uint8_t>&, Deadline deadline) override {
    while (arrived_.find(peer) == arrived_.end()) {
      if (Clock::now() >= deadline)
        fail(chorusTimeout, "{}: {} did not connect over shared memory before the init deadline", self().name(),
             setup_.peers[peer].name());
      acceptor_.poll(listener_.get(), deadline, [&](HelloAcceptor::Arrival&& a) {
        const Hello h = helloOf<Hello>(a);
        arrived_[h.fromRank] = Arrived{std::move(a.fd), std::move(a.passed), h};
      });
    }
    Arrived a = std::move(arrived_.at(peer));
    arrived_.erase(peer);
    auto p = std::make_unique<Peer>();
    p->side = 1;
    p->sock = std::move(a.fd);
    p->seg = Segment::map(a.segment.release());
    p->pid = setup_.peers[peer].pid;
    p->sameProcess = a.hello.processNonce == processNonce();
    bool canRead = p->sameProcess || probeRead(p->pid, a.hello.probeAddr, a.hello.probeValue);
    p->s()->canRead[1].v.store(canRead ? 1 : 2, std::memory_order_relaxed);
    p->s()->membarrier[1].v.store(registerMembarrier() ? 1 : 0, std::memory_order_relaxed);
    addPeer(peer, std::move(p));
  }

  void isend(int peer, const void* buf, size_t len, const OpTag& tag, Request* req) override {
    Peer& p = *peers_.at(peer);
    req->done = false;
    req->pendingParts = 1;
    Lane& l = p.lane(tag);
    l.sendq.push_back(SendMsg{static_cast<const uint8_t*>(buf), len, 0, tag, req});
    pumpSends(p, l);
  }

  void irecv(int peer, void* buf, size_t len, const OpTag& tag, Request* req) override {
    Peer& p = *peers_.at(peer);
    req->done = false;
    req->pendingParts = 1;
    Lane& l = p.lane(tag);
    l.recvq.push_back(RecvMsg{static_cast<uint8_t*>(buf), len, 0, tag, req});
    pumpRecvs(p, l);
  }

  // Inline slots hold whole elements (kSlotPayload is a multiple of every element size), so each slot is
  // reduced straight out of the FIFO into dst.
  bool irecvReduce(int peer, void* dst, const void* src, size_t len, chorusDataType_t dtype, chorusRedOp_t op,
                   const OpTag& tag, Request* req) override {
    Peer& p = *peers_.at(peer);
    req->done = false;
    req->pendingParts = 1;
    Lane& l = p.lane(tag);
    l.recvq.push_back(RecvMsg{static_cast<uint8_t*>(dst), len, 0, tag, req, static_cast<const uint8_t*>(src), dtype, op});
    pumpRecvs(p, l);
    return true;
  }

  bool progress() override {
    if (armed_) disarm();
    if (++calls_ % kControlEvery == 0) pollControl();
    bool moved = false;
    for (Peer* p : active_) {
      for (Lane& l : p->lanes) {
        // The tagged lane, while only its optional standing receive is there, now and then (Comm::progress).
        if (&l != p->lanes && l.sendq.empty() && l.direct.empty() &&
            (l.recvq.empty() || l.recvq.front().req->optional) && (calls_ & 15) != 0)
          continue;
        moved |= pumpRecvs(*p, l);
        moved |= pumpSends(*p, l);
        moved |= completeDirect(l);
      }
      if (p->gone) failIfStuck(*p);
    }
    return moved;
  }

  int waitFd() const override { return epoll_.get(); }

  bool armWake() override {
    // Wake frames already here are read first: a peer clears our flag when it sends one, so reading a frame
    // that arrives after the flag is raised (say for a released slot, while we wait for data) and then
    // sleeping would leave the flag down and the next publish would not wake us (a 100 ms stall).
    pollControl();
    askForFences(received_ - receivedAtSleep_ < kFencesBelow);
    receivedAtSleep_ = received_;
    for (Peer* p : active_) p->s()->sleep[p->side].asleep.store(1, std::memory_order_seq_cst);
    // The slow half of the asymmetric barrier in wake(): a full barrier on every CPU running a peer, unless
    // every peer that publishes without a fence has said it now fences (Note [Fenced publishes]).
    if (needsBarrier() && ::syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) != 0)
      CHORUS_DEBUG(kNet, "membarrier failed ({}); a wake-up may be late by one poll timeout", std::strerror(errno));
    armed_ = true;
    for (Peer* p : active_)
      if (hasWork(p->lanes[0]) || hasWork(p->lanes[1]) || p->gone) {
        disarm();
        return false;
      }
    return true;
  }

  void sendAbort(chorusResult_t code, const std::string& text, Deadline deadline) override {
    for (Peer* p : active_)
      if (!p->gone && !writeFrame(p->sock.get(), FrameType::Abort, static_cast<uint32_t>(code), text, deadline))
        CHORUS_DEBUG(kNet, "could not tell {} why this rank failed", p->info->name());
  }

  void close(Deadline deadline) override {
    for (Peer* p : active_)
      if (!p->gone) writeFrame(p->sock.get(), FrameType::Bye, 0, "", deadline);
    active_.clear();
    peers_.clear();
  }

 private:
  const PeerInfo& self() const { return setup_.peers[setup_.rank]; }

  void addPeer(int peer, std::unique_ptr<Peer> p) {
    p->rank = peer;
    p->info = &setup_.peers[peer];
    for (int c = 0; c < kMessageClasses; ++c) {
      p->lanes[c].out = &p->s()->fifo[c][p->side];
      p->lanes[c].in = &p->s()->fifo[c][1 - p->side];
    }
    p->s()->sleep[p->side].fences.store(fences_, std::memory_order_relaxed);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = static_cast<uint64_t>(peer);
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, p->sock.get(), &ev) != 0) failErrno("epoll_ctl");
    CHORUS_INFO(kNet, "{} <-> {} over shm ({}; large messages {})", self().name(), p->info->name(),
                p->sameProcess ? "same process" : "another process",
                p->sameProcess ? "copied directly with memcpy"
                : p->s()->canRead[p->side].v.load() == 1 ? "read directly with process_vm_readv"
                                                          : "staged through the FIFO (this rank cannot read its memory)");
    active_.push_back(p.get());
    peers_[peer] = std::move(p);
  }

  void disarm() {
    for (Peer* p : active_) p->s()->sleep[p->side].asleep.store(0, std::memory_order_relaxed);
    armed_ = false;
  }

  // Stores a FIFO word (a slot's `ready`, or `tail`) that a sleeping peer may be waiting for. Dekker with
  // wake(): we store the word then load the peer's flag; the sleeper stores its flag then loads the word, and
  // one of the two must see the other's store. A seq_cst store (a full barrier) would stall every send until
  // the slot's cache line is ours, so when both processes are membarrier targets the sleeper pays instead
  // (armWake's membarrier() runs a barrier on this CPU) and we only keep the compiler from reordering --
  // unless the peer sleeps so often that it asked us to fence after all (Note [Fenced publishes]).
  static void publish(Peer& p, std::atomic<uint64_t>& word, uint64_t value) {
    if (p.lightWake() && !p.fenced()) {
      word.store(value, std::memory_order_release);
      std::atomic_signal_fence(std::memory_order_seq_cst);
    } else {
      word.store(value, std::memory_order_seq_cst);
    }
  }

  // After publishing: answer a changed fence request, and if the peer announced it is going to sleep, wake it
  // (once).
  void wake(Peer& p) {
    SleepLine& line = p.s()->sleep[1 - p.side];
    if (const uint64_t want = line.fences.load(std::memory_order_relaxed); want != p.following) follow(p, want);
    std::atomic<uint64_t>& flag = line.asleep;
    if (flag.load(std::memory_order_seq_cst) == 0 || flag.exchange(0) == 0 || p.gone) return;
    Frame f{kFrameMagic, FrameType::Wake, {}, 0, 0};
    // Best effort: a full socket already holds wake-ups, and a dead peer is noticed on the control socket.
    if (::send(p.sock.get(), &f, sizeof f, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) { /* see above */ }
  }

  // Note [Fenced publishes]: the membarrier() that lets publish() go without a fence costs the sleeper an
  // inter-processor interrupt on every CPU that runs a registered process, serialised by a kernel mutex. That
  // pays while sleeping is rare (ranks that spin), and costs far more than it saves when ranks sleep on every
  // wait: with more ranks than cores, or a rank that waits on TCP peers too, the ranks of this 2-core VM spent
  // most of their time in membarrier's IPIs (docs/results/2026-12-07-fenced-publishes.md). So a rank that
  // sleeps again after fewer than kFencesBelow slots received asks its peers to fence every publish to it,
  // and drops the request once it sleeps after more. The request is a counter, odd while asked for, in the
  // sleeper's SleepLine, which the peer reads after each batch it publishes; the peer answers by storing the
  // counter in its `following` line (a release), and fences every later publish. The sleeper skips its
  // membarrier() only while every peer that could publish without a fence has answered the current odd
  // counter: the answer orders all of that peer's unfenced publishes before it, and later publishes
  // are seq_cst stores followed by the seq_cst load of `asleep`, a Dekker pair without help. Any other state
  // (no answer yet, a withdrawn request the peer has not seen) keeps the membarrier(), which is always enough.
  void askForFences(bool ask) {
    if (ask == ((fences_ & 1) != 0)) return;
    ++fences_;
    for (Peer* p : active_) p->s()->sleep[p->side].fences.store(fences_, std::memory_order_relaxed);
    CHORUS_DEBUG(kNet, "{} {} its shared-memory peers to fence their publishes ({} slots received since it last "
                 "slept)", self().name(), ask ? "asks" : "no longer asks", received_ - receivedAtSleep_);
  }

  bool needsBarrier() const {
    if (!registerMembarrier()) return false;  // then no peer publishes without a fence (lightWake())
    for (Peer* p : active_)
      if (p->lightWake() && ((fences_ & 1) == 0 ||
                             p->s()->following[1 - p->side].v.load(std::memory_order_acquire) != fences_))
        return true;
    return false;
  }

  static void follow(Peer& p, uint64_t want) {
    p.following = want;
    // Every publish so far happens before a sleeper's acquire of the answer (a seq_cst store: a full barrier on
    // x86 besides; ThreadSanitizer cannot follow atomic_thread_fence).
    p.s()->following[p.side].v.store(want, std::memory_order_seq_cst);
  }

  static bool hasWork(const Lane& l) {
    if (!l.recvq.empty() && l.in->slots[l.next % kSlots].h.ready.load(std::memory_order_seq_cst) == l.next + 1)
      return true;
    uint64_t tail = l.out->tail.v.load(std::memory_order_seq_cst);
    if (!l.sendq.empty() && l.head - tail < kSlots) return true;
    return !l.direct.empty() && tail >= l.direct.front().doneAt;
  }

  bool pumpSends(Peer& p, Lane& l) {
    bool published = false;
    while (!l.sendq.empty()) {
      if (l.head - l.tailSeen >= kSlots) {
        l.tailSeen = l.out->tail.v.load(std::memory_order_acquire);
        if (l.head - l.tailSeen >= kSlots) break;
      }
      SendMsg& m = l.sendq.front();
      Slot& slot = l.out->slots[l.head % kSlots];
      SlotHeader& h = slot.h;
      h.seq = m.tag.seq;
      h.count = m.tag.count;
      h.root = m.tag.root;
      h.kind = static_cast<uint8_t>(m.tag.kind);
      h.dtype = m.tag.dtype;
      h.redop = m.tag.redop;
      h.msgLen = m.len;
      const bool direct = m.sent == 0 && directBytes_ > 0 && m.len >= directBytes_ &&
                          m.len > kSmallBytes && p.peerReadsUs();
      if (m.len <= kSmallBytes) {
        h.type = SlotType::Small;
        if (m.len > 0) std::memcpy(h.small, m.buf, m.len);
        m.sent = m.len;
      } else if (direct) {
        h.type = SlotType::Rendezvous;
        h.part = {0, m.len, reinterpret_cast<uint64_t>(m.buf)};
        m.sent = m.len;
      } else {
        size_t n = std::min(kSlotPayload, m.len - m.sent);
        kernels::copy(slot.payload, m.buf + m.sent, n);
        h.type = SlotType::Inline;
        h.part = {m.sent, n, 0};
        m.sent += n;
      }
      publish(p, h.ready, l.head + 1);
      ++l.head;
      published = true;
      if (m.sent == m.len) {
        if (direct) l.direct.push_back({l.head, m.req, m.tag});
        else complete(m.req);
        l.sendq.pop_front();
      }
    }
    if (published) wake(p);
    return published;
  }

  static bool completeDirect(Lane& l) {
    bool moved = false;
    while (!l.direct.empty()) {
      if (l.tailSeen < l.direct.front().doneAt) l.tailSeen = l.out->tail.v.load(std::memory_order_acquire);
      if (l.tailSeen < l.direct.front().doneAt) break;
      complete(l.direct.front().req);
      l.direct.pop_front();
      moved = true;
    }
    return moved;
  }

  bool pumpRecvs(Peer& p, Lane& l) {
    bool released = false, moved = false;
    while (!l.recvq.empty()) {
      Slot& slot = l.in->slots[l.next % kSlots];
      const SlotHeader& h = slot.h;
      if (h.ready.load(std::memory_order_acquire) != l.next + 1) break;
      RecvMsg& m = l.recvq.front();
      if (!(tagOf(h) == m.tag) || h.msgLen != m.len) mismatch(p, h, m);
      if (h.type == SlotType::Small) {
        if (m.len > kSmallBytes) corrupt(p, h);
        deliver(m, 0, h.small, m.len);
        m.got = m.len;
      } else {
        const uint64_t off = h.part.offset, len = h.part.len;
        if (off != m.got || len > m.len - m.got || (h.type != SlotType::Inline && h.type != SlotType::Rendezvous))
          corrupt(p, h);
        if (h.type == SlotType::Rendezvous) {
          size_t n = std::min<size_t>(kCopyPiece, len - l.directDone);
          if (m.src == nullptr) {
            copyFromPeer(p, m.buf + off + l.directDone, h.part.addr + l.directDone, n, m.tag);
          } else if (p.sameProcess) {
            deliver(m, off + l.directDone, reinterpret_cast<const uint8_t*>(h.part.addr + l.directDone), n);
          } else {  // the payload must be local before it can be reduced
            if (bounce_.size() < n) bounce_.resize(kCopyPiece);
            copyFromPeer(p, bounce_.data(), h.part.addr + l.directDone, n, m.tag);
            deliver(m, off + l.directDone, bounce_.data(), n);
          }
          l.directDone += n;
          moved = true;
          if (l.directDone < len) break;  // let the caller serve other peers between pieces
          l.directDone = 0;
        } else {
          deliver(m, off, slot.payload, len);
        }
        m.got += len;
      }
      publish(p, l.in->tail.v, ++l.next);
      ++received_;
      released = true;
      if (m.got == m.len) {
        complete(m.req);
        l.recvq.pop_front();
      }
    }
    if (released) wake(p);
    return moved || released;
  }

  // Stores (or, for irecvReduce, reduces) n payload bytes at offset `at` of the message.
  static void deliver(RecvMsg& m, size_t at, const uint8_t* payload, size_t n) {
    if (n == 0) return;
    if (m.src == nullptr) kernels::copy(m.buf + at, payload, n);
    else kernels::reduce(m.buf + at, m.src + at, payload, n / kernels::dataTypeSize(m.dtype), m.dtype, m.op);
  }

  void copyFromPeer(Peer& p, uint8_t* dst, uint64_t src, size_t n, const OpTag& tag) {
    if (p.sameProcess) {
      kernels::copy(dst, reinterpret_cast<const void*>(src), n);
      return;
    }
    size_t done = 0;
    while (done < n) {
      iovec local{dst + done, n - done}, remote{reinterpret_cast<void*>(src + done), n - done};
      ssize_t r = ::process_vm_readv(p.pid, &local, 1, &remote, 1, 0);
      if (r > 0) { done += static_cast<size_t>(r); continue; }
      if (r < 0 && errno == EINTR) continue;
      int e = r < 0 ? errno : EIO;
      if (e == ESRCH)
        fail(chorusRemoteError, "{}: {} died during {} (its process is gone)", self().name(), p.info->name(),
             describe(tag));
      fail(chorusSystemError, "{}: reading {}'s buffer for {} failed: {}", self().name(), p.info->name(),
           describe(tag), std::strerror(e));
    }
  }

  [[noreturn]] void corrupt(const Peer& p, const SlotHeader& h) const {
    fail(chorusInternalError, "{}: corrupt shared-memory slot from {} (type {}, offset {}, length {} of a {}-byte "
         "message)", self().name(), p.info->name(), static_cast<int>(h.type), h.part.offset, h.part.len, h.msgLen);
  }

  [[noreturn]] void mismatch(const Peer& p, const SlotHeader& h, const RecvMsg& want) const {
    throw mismatchedMessage(self().name(), p.info->name(), want.tag, want.len, tagOf(h), h.msgLen);
  }

  // Reads the control sockets that have something: Wake frames, goodbyes, abort reasons, hang-ups.
  void pollControl() {
    epoll_event evs[64];
    int n = epoll_wait(epoll_.get(), evs, 64, 0);
    for (int i = 0; i < n; ++i) {
      Peer& p = *peers_.at(static_cast<int>(evs[i].data.u64));
      if (p.control.poll(p.sock.get(), p.info->name()) == FrameReader::Status::Closed) {
        p.gone = true;
        epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, p.sock.get(), nullptr);  // else poll() would never sleep again
        CHORUS_DEBUG(kNet, "{}: {} closed its shm connection ({})", self().name(), p.info->name(),
                     p.control.saidBye() ? "after goodbye" : "without goodbye");
      }
    }
  }

  // A gone peer's published data has been delivered by now; anything still waiting on it never completes.
  void failIfStuck(Peer& p) {
    const OpTag* tag = nullptr;
    for (const Lane& l : p.lanes) {
      const bool owed = !l.recvq.empty() && !optional(l.recvq.front().tag, l.recvq.front().req);
      tag = owed               ? &l.recvq.front().tag
            : !l.sendq.empty()  ? &l.sendq.front().tag
            : !l.direct.empty() ? &l.direct.front().tag
                                : nullptr;
      if (tag != nullptr) break;
    }
    if (tag == nullptr) return;
    if (p.control.saidBye())
      fail(chorusRemoteError, "{}: {} destroyed the communicator while {} still needed it", self().name(),
           p.info->name(), describe(*tag));
    fail(chorusRemoteError, "{}: {} died during {} (its shared-memory connection closed without a goodbye)",
         self().name(), p.info->name(), describe(*tag));
  }

  // The shm checks of a complete Hello (Note [Handshake], transports/handshake.cc): "" to keep it.
  std::string check(const Hello& h, const Fd& segment) {
    if (std::string problem = helloProblem(h, kHelloMagic, kWireVersion, setup_); !problem.empty()) return problem;
    if (arrived_.count(h.fromRank) || peers_.count(h.fromRank)) return fmt::format("duplicate connection from rank {}", h.fromRank);
    if (!segment) return "it did not pass its shared-memory segment";
    return "";
  }

  const Setup& setup_;
  const uint64_t directBytes_;  // CHORUS_SHM_DIRECT_BYTES; 0: never
  const uint64_t probe_;  // peers read this word to test whether they can copy straight from our memory
  std::string name_;
  Fd listener_;
  Fd epoll_;
  std::map<int, std::unique_ptr<Peer>> peers_;
  std::vector<Peer*> active_;
  HelloAcceptor acceptor_;
  std::map<int, Arrived> arrived_;
  unsigned calls_ = 0;
  bool armed_ = false;
  // This rank's request to its peers, and slots received in all and at the last sleep (Note [Fenced publishes]).
  static constexpr uint64_t kFencesBelow = 256;
  uint64_t fences_ = 0;
  uint64_t received_ = 0, receivedAtSleep_ = 0;
  std::vector<uint8_t> bounce_;  // irecvReduce of a direct copy between processes
};

}  // namespace

Descriptor descriptor() {
  Descriptor d;
  d.name = "shm";
  d.preference = 10;
  d.origin = "built-in";
  d.env = kEnv;
  // Measured on this project's 2-core machines (all_reduce_perf, 2 and 4 ranks; docs/performance.md): large
  // chunks cost nothing here (the FIFO pipelines slot by slot) and 1M measured best, except with more ranks than
  // cores from 32 MiB touched on the host, where ranks take turns on a core and a chunk still cached when the
  // next one runs wins (4 ranks, 8-64 MiB: +39-49 % with 64K; 2 ranks lose 9-15 % with it from 16 MiB).
  d.traits = {0.3, 12.0, 5.0, 6.0, true, {{0, 1024 * 1024}}, {{0, 1024 * 1024}, {32 << 20, 64 << 10}}};
  d.disabledByEnv = [] { return envInt("CHORUS_SHM_DISABLE", 0, 1, kEnv) == 1; };
  d.canConnect = [](const PeerInfo& a, const PeerInfo& b) { return a.hostId == b.hostId; };
  d.create = [](const Setup& setup) -> std::unique_ptr<Transport> {
    return std::make_unique<ShmTransport>(
        setup, envBytes("CHORUS_SHM_DIRECT_BYTES", "a size such as 1M, or 0", kEnv));
  };
  return d;
}

}  // namespace chorus::transport::shm
