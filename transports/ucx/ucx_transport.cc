// Note [UCX transport]:
//  Vocabulary. The transport owns one UCP context, one worker (thread mode SERIALIZED: one thread at a time, not
//  always the same one) and one endpoint per peer. An Op is one isend/irecv or control message; its Parts are
//  the UCP operations it posted, each a UCP request freed exactly once, after it completed. A UCP tag holds the
//  message class in bits 63..62 (data, control, tagged: Note [Message classes] in lib/base/ops.h) and the
//  sender's rank in bits 31..0; receives match all 64 bits, so UCX matches one sender's messages of one class
//  in the order they were sent.
//
//  Data. Every message opens with a WireHeader repeating its OpTag and length, which the receiver compares with
//  what it posted (Note [Message tags] in transports/transport.h). Up to kCopyBytes, header and payload travel as
//  one message copied through a pooled bounce buffer (up to kInlineBytes first through a stack buffer, sent only
//  if UCX can send it before returning, so that no Op or completion is needed: 6 % of an 8-byte allreduce over
//  sm); larger messages as two with the same tag, the header and then the payload, sent from and received into
//  the caller's buffer. Not one UCP_DATATYPE_IOV message: UCX 1.13 delivers it, but its rendezvous does not
//  zero-copy an IOV (64 MiB at 1.2 GB/s over tcp vs 3.5 contiguous, 64 KiB at 1.0 GB/s over sm vs 8). Every
//  Op's first receive takes header + kCopyBytes, so whatever comes first (a copied message or a large one's
//  header) arrives whole and a mismatch names the other side's call.
//  kCopyBytes = 16 KiB: one-way latency at 12/16 KiB over tcp 8.6/9.8 us copied vs 12.0/12.9 us as two messages
//  (UCX sends up to 20 KB eagerly there); over sm no difference beyond noise (UCX's eager limit is 8 KB).
//
//  Handshake. Both sides create an endpoint to the other's worker address, post the peer's control receive and
//  send a Hello. accept() waits for the peer's Hello; connect() waits for nothing, or ranks 0, 1, 2 deadlock
//  (0 in connect(1) waits for 1 in connect(2), and 2 says nothing before its accept(0) returns). Over tcp a
//  Hello leaves only after the sending worker answered the wire-up, so connect() progresses for a bounded head
//  start, later accept() calls may finish it, and settle() after the last accept() does (a rank that went on to
//  block in the device IPC setup with its Hello still waiting left the peer's accept() to time out, in CI). The
//  higher rank's Hello is checked in progress(); it precedes that peer's data. All control messages (Hello, Bye, Abort) carry the handshake fields and are checked.
//
//  Failure. By default (CHORUS_UCX_ERROR_MODE=none) endpoints are made without UCX's peer error handling: in
//  UCX 1.13 mode PEER leaves tcp without its zero-copy rendezvous lanes (no rma_bw lane; the data is copied out
//  of UCX's receive buffers: 1 MiB allreduce busbw 1.8 against 3.0 GB/s in mode NONE, 2 ranks, interleaved), and
//  over shared memory UCX refuses it anyway (UCX_TLS=sm: "no peer failure handler", UCS_ERR_UNREACHABLE; with
//  tcp,sm or the default it quietly takes tcp for same-host pairs too). A peer on this host is then watched by
//  its pid: every ~100 ms progress() asks kill(pid, 0), counting a zombie as dead; a peer on another host fails
//  the transfers in flight with it when its connection breaks (the failures suite passes in both modes). That
//  holds over tcp only because its eager messages are copied (createContext): UCX 1.13 aborts the process when a
//  connection breaks under a part-sent zero-copy active message, whatever the error mode.
//  CHORUS_UCX_ERROR_MODE=peer asks for mode PEER (UCX's keepalive too) and falls back as above where refused; the
//  UCX ERROR line about the refusal is caught and the choice logged at INFO. A peer's failure is an error only while
//  something is in flight with it (as in shm): it died, or it left cleanly if it said Bye first. Errors found in
//  callbacks or completions are recorded and thrown by progress(), never from a UCX callback; the first one
//  sticks, since after a mismatch or a death the message streams no longer line up. Completions are processed
//  in the order UCX reported them, so a peer's Abort or Bye is seen after the data it sent before it.
//
//  Progress. A rendezvous ends with an acknowledgement (get: from the receiver; put: from the sender) that can be
//  left pending after the rank's own request completed, when the shared-memory FIFO is full; the peer's request
//  then completes only at this rank's next progress(). Seen with 300-message bursts on 2 cores under both
//  schemes: a rank must not block elsewhere (a bootstrap barrier) while its peers may still wait. close() flushes.
#include "transports/ucx/ucx_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lib/base/error.h"
#include "lib/base/identity.h"
#include "lib/base/log.h"
#include "lib/base/socket.h"
#include "transports/mismatch.h"
#include "transports/ucx/ops.h"
#include "transports/ucx/ucp_handles.h"
#include "transports/ucx/wire.h"

namespace chorus::transport::ucx {

namespace {

constexpr unsigned kMaxProgressRounds = 64;
constexpr auto kWatchEvery = std::chrono::milliseconds(100);
constexpr unsigned kWatchSteps = 64;
constexpr auto kTeardownWait = std::chrono::milliseconds(500);
constexpr auto kLossGrace = std::chrono::milliseconds(100);
constexpr auto kConnectHeadStart = std::chrono::milliseconds(20);

class UcxTransport final : public Transport {
 public:
  UcxTransport(const Setup& setup, bool peerErrorMode)
      : setup_(setup),
        peerErrorMode_(peerErrorMode),
        context_(createContext(self())),
        worker_(createWorker(context_.get(), self())),
        address_(workerAddress(worker_.get(), self())) {
    if (address_.size() > kMaxAddressBytes)
      fail(chorusInternalError, "{}: the ucx worker address is {} bytes, more than the {} a transport may publish "
           "(narrow UCX_TLS or UCX_NET_DEVICES)", self(), address_.size(), kMaxAddressBytes);
    ucs_status_t s = ucp_worker_get_efd(worker_.get(), &efd_);
    if (s != UCS_OK) fail(chorusSystemError, "{}: ucp_worker_get_efd failed: {}", self(), ucs_status_string(s));
    CHORUS_DEBUG(kNet, "{}: ucx worker ready, address {} bytes", self(), address_.size());
  }

  ~UcxTransport() override {
    // What UCX says while a worker with abandoned transfers goes away (requests not returned, callbacks left in
    // its queue) is expected after an error: logged at DEBUG, not printed.
    std::string ucxSaid;
    QuietUcx quiet(&ucxSaid);
    tearingDown_ = true;
    const bool dataLeft = orphanData();
    std::vector<void*> closing;
    for (Peer* p : connected_)
      if (void* r = p->ep.close(true)) closing.push_back(r);
    for (auto& op : ops_)
      for (Part& part : op->parts)
        if (part.req != nullptr && !part.done && op->role == Role::ControlRecv) ucp_request_cancel(worker_.get(), part.req);
    // Let the cancellations and closes run their course, briefly; ucp_request_free is safe either way. Not while
    // a data transfer is still under way: its buffers belong to a call that has returned (with an error), and
    // progress would move bytes into or out of memory the caller may have freed.
    if (!dataLeft)
      for (Deadline until = Clock::now() + kTeardownWait; Clock::now() < until && busy(closing);) pump();
    for (void* r : closing) ucp_request_free(r);
    for (auto& op : ops_)
      for (Part& part : op->parts)
        if (part.req != nullptr) ucp_request_free(std::exchange(part.req, nullptr));
    peers_.clear();
    worker_.reset();
    context_.reset();
    if (!ucxSaid.empty()) CHORUS_DEBUG(kNet, "{}: while the ucx worker closed, ucx said: {}", self(), ucxSaid);
  }

  const char* name() const override { return "ucx"; }
  std::vector<uint8_t> address() const override { return address_; }

  void connect(int peer, const std::vector<uint8_t>& address, Deadline deadline) override {
    Peer& p = open(peer, address);
    // Never waits for the peer: a short head start for the wire-up, then progress() finishes it.
    for (Deadline until = std::min(deadline, Clock::now() + kConnectHeadStart); !p.helloSent && !p.failed() &&
                                                                              Clock::now() < until;)
      if (!step()) waitBriefly(until);
    CHORUS_INFO(kNet, "{} connected to {} over ucx{}", self(), p.name, modeText(p));
  }

  void accept(int peer, const std::vector<uint8_t>& address, Deadline deadline) override {
    Peer& p = open(peer, address);
    handshake(p, deadline, "did not connect over ucx", [&] { return p.hello; });
    CHORUS_INFO(kNet, "{} accepted {} over ucx{}", self(), p.name, modeText(p));
  }

  // A Hello that connect()'s head start did not see leave waits on this worker's progress, so this rank must not
  // block elsewhere before it left: its peer's accept() would wait for it until the init deadline.
  void settle(Deadline deadline) override {
    for (Peer* p : connected_)
      if (p->rank > setup_.rank && !p->helloSent)
        handshake(*p, deadline, "did not take this rank's ucx hello", [p] { return p->helloSent; });
  }

  void isend(int peer, const void* buf, size_t len, const OpTag& tag, Request* req) override {
    Peer& p = connected(peer);
    WireHeader h{tag.seq, tag.count, tag.root, static_cast<uint8_t>(tag.kind), tag.dtype, tag.redop, 0, len};
    const uint64_t t = tagFor(classOf(tag), setup_.rank);
    if (len <= kInlineBytes) {  // UCX copies it out at once, or says it cannot: then it takes the path below
      alignas(8) uint8_t stage[kHeaderBytes + kInlineBytes];
      if (sendAtOnce(p.ep.get(), stage, packCopied(stage, h, buf, len), t) == UCS_OK) {
        req->done = true;
        return;
      }
    }
    req->done = false;
    Op& op = takeOp(Role::Send, &p, req, static_cast<uint8_t*>(const_cast<void*>(buf)), len, tag);
    if (len <= kCopyBytes) {
      postSend(op.parts[0], p.ep.get(), op.bounce.get(), packCopied(op.bounce.get(), h, buf, len), t);
    } else {
      op.header = h;
      postSend(op.parts[0], p.ep.get(), &op.header, kHeaderBytes, t);
      postSend(op.parts[1], p.ep.get(), buf, len, t);
    }
    processDone();  // sends that completed at once
  }

  void irecv(int peer, void* buf, size_t len, const OpTag& tag, Request* req) override {
    Peer& p = connected(peer);
    req->done = false;
    Op& op = takeOp(Role::Recv, &p, req, static_cast<uint8_t*>(buf), len, tag);
    const uint64_t t = tagFor(classOf(tag), peer);
    postRecv(op.parts[0], worker_.get(), op.bounce.get(), kFirstBytes, t);
    if (len > kCopyBytes) postRecv(op.parts[1], worker_.get(), buf, len, t);
    processDone();
  }

  bool progress() override {
    throwIfFailed();
    bool moved = step();
    throwIfFailed();
    return moved;
  }

  int waitFd() const override { return efd_; }

  bool armWake() override {
    if (done_.head != nullptr || pendingLoss_) return false;  // completions, or a loss, wait to be processed
    ucs_status_t s = ucp_worker_arm(worker_.get());
    watchTick_ = kWatchSteps;
    if (s == UCS_OK) return true;
    if (s != UCS_ERR_BUSY) CHORUS_DEBUG(kNet, "{}: ucp_worker_arm failed: {}", self(), ucs_status_string(s));
    return false;
  }

  void sendAbort(chorusResult_t code, const std::string& text, Deadline deadline) override {
    orphanData();  // this rank failed: the operations in flight unwound, or are unwinding, with their Requests
    try {
      std::string t = text.substr(0, kMaxAbortText);
      for (Peer* p : connected_)
        if (p->ep && !p->failed()) sendControl(*p, ControlType::Abort, static_cast<uint32_t>(code), t);
      while (controlSends_ > 0 && Clock::now() < deadline)
        if (!step()) waitBriefly(deadline);
      if (controlSends_ > 0) CHORUS_DEBUG(kNet, "{}: could not tell every peer why this rank failed", self());
    } catch (const std::exception& e) {
      CHORUS_DEBUG(kNet, "{}: sending the abort failed: {}", self(), e.what());
    }
  }

  void close(Deadline deadline) override {
    try {
      closeAll(deadline);
    } catch (const std::exception& e) {
      CHORUS_DEBUG(kNet, "{}: closing the ucx endpoints failed: {}", self(), e.what());
    }
  }

 private:
  std::string self() const {
    if (setup_.rank >= 0 && static_cast<size_t>(setup_.rank) < setup_.peers.size())
      return setup_.peers[setup_.rank].name();
    return fmt::format("rank {}", setup_.rank);
  }

  // Progresses until done(); throws naming p if it dies first, or saying it `late` at the deadline. done() is asked
  // right after each step, before any error: what came with it (the peer's Abort, say) is left for progress().
  template <typename Done>
  void handshake(Peer& p, Deadline deadline, const char* late, Done done) {
    while (true) {
      bool moved = step();
      if (done()) return;
      throwIfFailed();
      if (p.failed())
        fail(chorusRemoteError, "{}: {} died during the ucx handshake ({})", self(), p.name,
             p.processGone ? "its process is gone" : ucs_status_string(p.epStatus));
      if (Clock::now() >= deadline) fail(chorusTimeout, "{}: {} {} before the init deadline", self(), p.name, late);
      if (!moved) waitBriefly(deadline);
    }
  }

  Peer& connected(int peer) {
    if (peer < 0 || static_cast<size_t>(peer) >= peers_.size() || !peers_[peer] || !peers_[peer]->ep)
      fail(chorusInternalError, "{}: ucx has no connection to rank {}", self(), peer);
    return *peers_[peer];
  }

  // Both sides of a pair create an endpoint and send a Hello; only accept() waits for the peer's.
  Peer& open(int peer, const std::vector<uint8_t>& address) {
    if (peer < 0 || peer >= setup_.nranks || peer == setup_.rank || static_cast<size_t>(peer) >= setup_.peers.size())
      fail(chorusInternalError, "{}: ucx cannot connect to rank {}", self(), peer);
    if (peers_.size() < static_cast<size_t>(setup_.nranks)) peers_.resize(setup_.nranks);
    if (peers_[peer]) fail(chorusInternalError, "{}: ucx is already connected to rank {}", self(), peer);
    const PeerInfo& info = setup_.peers[peer];
    std::vector<uint8_t> workerAddr;
    if (std::string why = unsealAddress(address, &workerAddr); !why.empty())
      fail(chorusInternalError, "{}: the ucx address that {} published does not unpack: {}", self(), info.name(), why);
    auto owned = std::make_unique<Peer>();
    Peer& p = *owned;
    p.rank = peer;
    p.pid = info.pid;
    p.name = info.name();
    std::string ucxSaid;
    ucs_status_t s = UCS_ERR_UNSUPPORTED;
    if (peerErrorMode_) {
      s = createEndpoint(worker_.get(), workerAddr, UCP_ERR_HANDLING_MODE_PEER, onEndpointError, &p, &p.ep, &ucxSaid);
      if (s == UCS_ERR_UNREACHABLE || s == UCS_ERR_UNSUPPORTED) {
        p.modeWhy = fmt::format("ucx refused it: {}: {}", ucs_status_string(s), ucxSaid);
        ucxSaid.clear();
      }
    } else {
      p.modeWhy = "CHORUS_UCX_ERROR_MODE=none";
    }
    if (!p.modeWhy.empty()) {
      s = createEndpoint(worker_.get(), workerAddr, UCP_ERR_HANDLING_MODE_NONE, onEndpointError, &p, &p.ep, &ucxSaid);
      const bool sameHost = !info.hostId.empty() && info.hostId == setup_.peers[setup_.rank].hostId;
      p.watched = s == UCS_OK && sameHost && info.pid > 0 && info.pid != ::getpid();
      if (s == UCS_OK && !sameHost && peerErrorMode_)
        CHORUS_WARN(kNet, "{}: ucx reaches {} only without peer error handling; if it dies, only a failed transfer "
                    "tells this rank", self(), p.name);
    }
    if (s != UCS_OK)
      fail(chorusSystemError, "{}: ucx cannot reach {}: {}{}{}", self(), p.name, ucs_status_string(s),
           ucxSaid.empty() ? "" : " - ", ucxSaid);
    peers_[peer] = std::move(owned);
    connected_.push_back(&p);
    if (p.watched) watched_.push_back(&p);
    postControlRecv(p);
    sendControl(p, ControlType::Hello, 0, "");
    return p;
  }

  static std::string modeText(const Peer& p) {
    if (p.peerMode()) return "";
    return fmt::format(" without peer error handling, {} ({})",
                       p.watched ? "watching its pid" : "its failed transfers tell", p.modeWhy);
  }

  void waitBriefly(Deadline deadline) {
    if (!armWake()) return;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd pfd{efd_, POLLIN, 0};
    ::poll(&pfd, 1, static_cast<int>(std::clamp<long>(left, 0, 10)));
  }

  // One round of work that never throws: UCX progress, the pid watch, completions, peers gone.
  bool step() {
    bool moved = ucp_worker_progress(worker_.get()) > 0;  // once: the caller loops, and an idle poll costs
    if (!watched_.empty()) moved |= watch();
    moved |= processDone();
    checkPeers();
    reportLoss();
    return moved;
  }

  unsigned pump() {
    unsigned total = 0;
    for (unsigned i = 0; i < kMaxProgressRounds; ++i) {
      unsigned n = ucp_worker_progress(worker_.get());
      if (n == 0) break;
      total += n;
    }
    return total;
  }

  // The clock is read every kWatchSteps steps, and at the first step after armWake() (the rank may have slept):
  // reading it every step cost 8 % of an 8-byte allreduce over sm.
  bool watch() {
    if (++watchTick_ < kWatchSteps) return false;
    watchTick_ = 0;
    Deadline now = Clock::now();
    if (now < nextWatch_) return false;
    nextWatch_ = now + kWatchEvery;
    bool found = false;
    for (Peer* p : watched_)
      if (!p->processGone && chorus::processGone(p->pid)) {
        pump();  // deliver what it left in shared memory (its Abort, say) first
        p->processGone = found = true;
      }
    return found;
  }

  bool processDone() {
    bool any = false;
    while (Part* part = done_.pop()) {
      complete(*part);
      any = true;
    }
    return any;
  }

  void checkPeers() {
    for (Peer* p : connected_) {
      if (!p->failed() && !p->bye) continue;
      // The oldest operation in flight with p that something waits for. Only a standing receive may be optional,
      // and only its Request is sure to be alive: another Op may outlive its caller's (a send's acknowledgement).
      const Op* owed = p->first;
      while (owed != nullptr && owed->role == Role::Recv && optional(owed->tag, owed->req)) owed = owed->next;
      if (owed != nullptr) {
        lost(peerLost(*p, owed->tag));
      } else if (p->failed() && !p->reported) {
        p->reported = true;
        CHORUS_DEBUG(kNet, "{}: {} is gone ({}), with nothing in flight", self(), p->name,
                     p->bye ? "after goodbye" : "without goodbye");
      }
    }
  }

  Error peerLost(const Peer& p, const OpTag& tag) const {
    if (p.bye)
      return Error(chorusRemoteError, fmt::format("{}: {} left cleanly (it closed the communicator) while {} still "
                                                  "needed it", self(), p.name, describe(tag)));
    return Error(chorusRemoteError, fmt::format("{}: {} died during {} ({})", self(), p.name, describe(tag),
                                                p.processGone ? std::string("its process is gone")
                                                              : fmt::format("its UCX endpoint failed: {}",
                                                                            ucs_status_string(p.epStatus))));
  }

  void fault(Error e) {
    if (!error_) error_ = std::move(e);
  }
  // A peer's death is reported kLossGrace after it is seen: a peer that failed for a reason of its own sends an
  // Abort before it exits, and UCX may report the broken endpoint before delivering it (seen over tcp: "rank 1
  // died" instead of rank 1's words naming the rank that really died).
  void lost(Error e) {
    if (!pendingLoss_) {
      pendingLoss_ = std::move(e);
      lossAt_ = Clock::now();
    }
  }
  void reportLoss() {
    if (pendingLoss_ && !error_ && Clock::now() - lossAt_ >= kLossGrace) fault(*pendingLoss_);
  }
  template <typename... Args>
  void fault(chorusResult_t code, fmt::format_string<Args...> f, Args&&... args) {
    if (!error_) error_.emplace(code, fmt::format(f, std::forward<Args>(args)...));
  }
  // The error is about to reach the caller, whose call then unwinds: the Requests of its operations go away,
  // and so, once it returns, may their buffers.
  void throwIfFailed() {
    if (!error_) return;
    orphanData();
    throw *error_;
  }

  // Detaches every data operation in flight from its caller: its Request is never written again, and its
  // receives that UCX has not matched yet are cancelled. True if some transfer is still under way in UCX.
  bool orphanData() {
    bool left = false;
    for (auto& op : ops_) {
      if (op->pending == 0 || (op->role != Role::Send && op->role != Role::Recv)) continue;
      op->failed = true;
      for (Part& part : op->parts) {
        if (part.req == nullptr || part.done) continue;
        if (op->role == Role::Recv) ucp_request_cancel(worker_.get(), part.req);
        left = left || (!part.done && !standing(op->tag));  // that one's buffer outlives the transport
      }
    }
    return left;
  }

  Op& takeOp(Role role, Peer* peer, Request* req, uint8_t* buf = nullptr, size_t len = 0, const OpTag& tag = {}) {
    Op* op;
    if (free_.empty()) {
      ops_.push_back(std::make_unique<Op>());
      op = ops_.back().get();
      op->doneList = &done_;
    } else {
      op = free_.back();
      free_.pop_back();
    }
    op->role = role;
    op->peer = peer;
    op->req = req;
    op->buf = buf;
    op->len = len;
    op->tag = tag;
    op->pending = 0;
    op->failed = false;
    op->hello = false;
    for (Part& part : op->parts) part = Part{op};
    if (role == Role::Send || role == Role::Recv) {
      op->prev = peer->last;
      op->next = nullptr;
      (peer->last ? peer->last->next : peer->first) = op;
      peer->last = op;
    }
    return *op;
  }

  void releaseOp(Op& op) {
    if (op.role == Role::Send || op.role == Role::Recv) {
      (op.prev ? op.prev->next : op.peer->first) = op.next;
      (op.next ? op.next->prev : op.peer->last) = op.prev;
    }
    free_.push_back(&op);
  }

  void sendControl(Peer& p, ControlType type, uint32_t code, const std::string& text) {
    Op& op = takeOp(Role::ControlSend, &p, nullptr);
    op.hello = type == ControlType::Hello;
    Control c{kControlMagic, kWireVersion, setup_.commId, setup_.rank, p.rank, type, code,
              static_cast<uint32_t>(text.size()), 0, {}};
    seal(c, setup_, text.data(), text.size());
    std::memcpy(op.bounce.get(), &c, sizeof c);
    std::memcpy(op.bounce.get() + sizeof c, text.data(), text.size());
    ++controlSends_;
    postSend(op.parts[0], p.ep.get(), op.bounce.get(), sizeof c + text.size(), tagFor(kControlClass, setup_.rank));
  }

  void postControlRecv(Peer& p) {
    Op& op = takeOp(Role::ControlRecv, &p, nullptr);
    p.control = &op;
    postRecv(op.parts[0], worker_.get(), op.bounce.get(), sizeof(Control) + kMaxAbortText,
             tagFor(kControlClass, p.rank));
  }

  void complete(Part& part) {
    Op& op = *part.op;
    if (part.req != nullptr) ucp_request_free(std::exchange(part.req, nullptr));
    --op.pending;
    switch (op.role) {
      case Role::Send:
        if (part.status != UCS_OK) failOp(op, part.status);
        break;
      case Role::Recv:
        if (&part == &op.parts[0]) checkFirst(op, part);  // the payload is checked once the Op is whole
        break;
      case Role::ControlSend:
        if (part.status != UCS_OK)
          CHORUS_DEBUG(kNet, "{}: a control message to {} failed: {}", self(), op.peer->name,
                       ucs_status_string(part.status));
        break;
      case Role::ControlRecv:
        onControl(op, part);
        break;
    }
    if (op.pending == 0) finish(op);
  }

  void finish(Op& op) {
    switch (op.role) {
      case Role::Recv:
        if (!op.failed && op.len > kCopyBytes) checkPayload(op);
        [[fallthrough]];
      case Role::Send:
        if (!op.failed) op.req->done = true;
        break;
      case Role::ControlSend:
        --controlSends_;
        if (op.hello && op.parts[0].status == UCS_OK) op.peer->helloSent = true;
        break;
      case Role::ControlRecv:
        if (!tearingDown_ && !op.failed && !op.peer->bye) {  // the same Op, posted again
          op.parts[0] = Part{&op};
          postRecv(op.parts[0], worker_.get(), op.bounce.get(), sizeof(Control) + kMaxAbortText,
                   tagFor(kControlClass, op.peer->rank));
          return;
        }
        op.peer->control = nullptr;
        break;
    }
    releaseOp(op);
  }

  void failOp(Op& op, ucs_status_t status) {
    op.failed = true;
    if (status == UCS_ERR_CANCELED && tearingDown_) return;
    if (op.peer->epStatus == UCS_OK && !op.peer->processGone) op.peer->epStatus = status;
    lost(peerLost(*op.peer, op.tag));
  }

  void checkFirst(Op& op, const Part& part) {
    if (part.status == UCS_ERR_CANCELED) {
      op.failed = true;
      return;
    }
    if (part.status != UCS_OK && part.status != UCS_ERR_MESSAGE_TRUNCATED) return failOp(op, part.status);
    WireHeader h{};
    if (part.status == UCS_ERR_MESSAGE_TRUNCATED || part.length < kHeaderBytes) return garbled(op, part.length);
    std::memcpy(&h, op.bounce.get(), kHeaderBytes);
    OpTag got = tagOf(h);
    if (!(got == op.tag) || h.len != op.len) {
      op.failed = true;
      return fault(mismatchedMessage(self(), op.peer->name, op.tag, op.len, got, h.len));
    }
    const bool small = op.len <= kCopyBytes;
    if (part.length != kHeaderBytes + (small ? op.len : 0)) return garbled(op, part.length);
    if (small && op.len > 0) std::memcpy(op.buf, op.bounce.get() + kHeaderBytes, op.len);
  }

  void checkPayload(Op& op) {
    const Part& part = op.parts[1];
    if (part.status == UCS_ERR_CANCELED) op.failed = true;
    else if (part.status == UCS_OK && part.length == op.len) return;
    else if (part.status != UCS_OK && part.status != UCS_ERR_MESSAGE_TRUNCATED) failOp(op, part.status);
    else garbled(op, part.length);
  }

  // A message whose framing is wrong although its header matched (or that has no header): not a user error.
  void garbled(Op& op, size_t length) {
    op.failed = true;
    fault(chorusInternalError, "{}: receiving {} from {}, a {}-byte ucx message broke the framing (do both ranks "
          "run the same Chorus build?)", self(), describe(op.tag), op.peer->name, length);
  }

  std::set<auth::Nonce> seenControl_;

  void onControl(Op& op, const Part& part) {
    Peer& p = *op.peer;
    if (part.status == UCS_ERR_CANCELED) {
      op.failed = true;
      return;
    }
    Control c{};
    if (part.status != UCS_OK || part.length < sizeof c) {
      op.failed = true;
      return fault(chorusRemoteError, "{}: {} sent a malformed ucx control message ({} bytes, {})", self(), p.name,
                   part.length, ucs_status_string(part.status));
    }
    std::memcpy(&c, op.bounce.get(), sizeof c);
    const std::string text(reinterpret_cast<const char*>(op.bounce.get() + sizeof c),
                           std::min<size_t>({c.textLen, part.length - sizeof c, kMaxAbortText}));
    std::string problem = ucx::controlProblem(c, p.rank, text, setup_);
    if (problem.empty() && !seenControl_.insert(c.seal.nonce).second)
      problem = "a replayed control message (its nonce was seen before)";
    if (!problem.empty()) {
      op.failed = true;
      return fault(c.magic == kControlMagic ? chorusInvalidUsage : chorusRemoteError,
                   "{}: the ucx connection with {} is not one of this communicator's: {}", self(), p.name, problem);
    }
    switch (c.type) {
      case ControlType::Hello:
        p.hello = true;
        break;
      case ControlType::Bye:
        p.bye = true;
        CHORUS_DEBUG(kNet, "{}: {} said goodbye", self(), p.name);
        break;
      case ControlType::Abort: {
        fault(peerAborted(p.name, c.code == chorusInvalidUsage, text));
        break;
      }
      default:
        op.failed = true;
        fault(chorusRemoteError, "{}: {} sent an unknown ucx control message (type {})", self(), p.name,
              static_cast<uint32_t>(c.type));
    }
  }

  // A flush to a peer that closed first fails with UCX's ERROR line "error during flush: Endpoint timeout":
  // expected (the endpoint is then closed by force), so what UCX says here goes to DEBUG.
  void closeAll(Deadline deadline) {
    std::string ucxSaid;
    QuietUcx quiet(&ucxSaid);
    closeEndpoints(deadline);
    if (!ucxSaid.empty()) CHORUS_DEBUG(kNet, "{}: while closing, ucx said: {}", self(), ucxSaid);
  }

  // Goodbyes, then a flush (bounded by the deadline) and a graceful close; whatever did not flush in time is
  // closed by force.
  void closeEndpoints(Deadline deadline) {
    for (Peer* p : connected_)
      if (p->ep && !p->failed()) sendControl(*p, ControlType::Bye, 0, "");
    std::vector<std::pair<Peer*, void*>> flushes;
    for (Peer* p : connected_) {
      if (!p->ep || p->failed()) continue;
      ucp_request_param_t param{};
      ucs_status_ptr_t r = ucp_ep_flush_nbx(p->ep.get(), &param);
      if (UCS_PTR_IS_PTR(r)) flushes.emplace_back(p, r);
      else if (UCS_PTR_IS_ERR(r))
        CHORUS_DEBUG(kNet, "{}: flushing to {} failed: {}", self(), p->name, ucs_status_string(UCS_PTR_STATUS(r)));
    }
    std::vector<void*> waiting;
    for (auto& [p, r] : flushes) waiting.push_back(r);
    while (busy(waiting) && Clock::now() < deadline)
      if (!step()) waitBriefly(deadline);
    std::vector<void*> closing;
    for (Peer* p : connected_) {
      auto it = std::find_if(flushes.begin(), flushes.end(), [p](auto& f) { return f.first == p; });
      bool flushed = !p->failed() && (it == flushes.end() || ucp_request_check_status(it->second) == UCS_OK);
      if (!flushed)  // a tcp flush needs the peer to progress: it may be late, busy or gone
        CHORUS_DEBUG(kNet, "{}: closing the ucx endpoint to {} by force ({})", self(), p->name,
                     p->failed() ? "it failed" : ucs_status_string(ucp_request_check_status(it->second)));
      if (void* r = p->ep.close(!flushed)) closing.push_back(r);
    }
    for (auto& [p, r] : flushes) ucp_request_free(r);
    while (busy(closing) && Clock::now() < deadline)
      if (!step()) waitBriefly(deadline);
    for (void* r : closing) ucp_request_free(r);
    watched_.clear();
  }

  // True while a request in `reqs` (or, tearing down, any operation) has not completed.
  bool busy(const std::vector<void*>& reqs) const {
    for (void* r : reqs)
      if (ucp_request_check_status(r) == UCS_INPROGRESS) return true;
    if (!tearingDown_) return false;
    for (auto& op : ops_)
      for (const Part& part : op->parts)
        if (part.req != nullptr && !part.done && (op->role == Role::Recv || op->role == Role::ControlRecv ||
                                                  op->peer->peerMode()))  // mode NONE never purges sends
          return true;
    return false;
  }

  const Setup& setup_;
  const bool peerErrorMode_;
  std::vector<std::unique_ptr<Op>> ops_;  // every Op ever made; free_ lists the idle ones
  std::vector<Op*> free_;
  DoneList done_;
  Context context_;
  Worker worker_;
  std::vector<uint8_t> address_;
  int efd_ = -1;
  std::vector<std::unique_ptr<Peer>> peers_;  // by rank
  std::vector<Peer*> connected_;
  std::vector<Peer*> watched_;
  Deadline nextWatch_{};
  unsigned watchTick_ = 0;
  int controlSends_ = 0;
  bool tearingDown_ = false;
  std::optional<Error> error_;
  std::optional<Error> pendingLoss_;  // a peer's death, until kLossGrace has passed (lost())
  Deadline lossAt_;
};

}  // namespace

std::unique_ptr<Transport> create(const Setup& setup, bool peerErrorMode) {
  return std::make_unique<UcxTransport>(setup, peerErrorMode);
}

}  // namespace chorus::transport::ucx
