// Note [ibverbs protocol]:
//  One Channel per peer drives that peer's reliable-connected queue pairs (QPs). Every message belongs to a class
//  (Note [Message classes] in lib/base/ops.h) and gets the next number of its class between the pair on both
//  sides; a receive takes the message with its own number, so messages are matched by number, not by arrival.
//
//  Eager. A payload of up to eagerBytes goes as one SEND on QP 0, header first, copied into a registered send
//  slot (inline when the device takes it), and the send is done at once. The receiver copies it into the posted
//  receive and reposts the slot; a message whose receive is not posted yet stays in its slot until it is, so no
//  peer can make this rank allocate (as with TCP, where it stays in the kernel).
//
//  Rendezvous. Larger payloads are written into the receiver's buffer. The sender announces the message (RTS: its
//  OpTag and length), so that a receiver that expects a shorter message or another call fails naming both
//  instead of waiting for a message that will not come; the receiver does not wait for it. The receiver
//  advertises a posted receive with a clear-to-send (CTS: its OpTag, length, address, rkey, from the registration
//  cache); the sender checks the CTS against its call (a mismatch names both calls, as on every transport) and
//  RDMA-WRITEs the payload, split over queue pairs by planPieces() (protocol.h), the last piece on each QP WITH
//  IMMEDIATE (class and number): a QP's writes land in order, so when the receiver has seen one immediate per QP
//  used, the payload is in place. At most `advertised` receives of each class are advertised at once, which bounds the receive
//  work requests the immediates consume; per class, so that a standing receive waiting for a message that comes
//  much later never holds up the other class.
//
//  Credits. A SEND consumes a receive the peer posted, so a sender never overruns a receiver: eager messages, RTSs
//  and CTSs each take a credit of their class (the peer posted `credits` slots for each class, so a class whose
//  receives lag, its messages held in their slots, never holds up the other), and every header returns credits
//  by carrying how many messages of each class its sender has taken (`freed`; SENDs on QP 0 arrive in order, so
//  the latest value is the count). A sender whose credits of a class fall to half asks for more (one request per
//  class at a time); the receiver answers with a Credit message into a spare slot as soon as it has taken
//  something it has not reported yet, saying which classes it answers. Traffic in one direction alone thus never
//  waits for traffic in the other, and a sender at zero credits of a class always has a request out: it asked
//  when it crossed half, an answer brings at least one credit, and the next send that leaves it at half or less
//  asks again. At most one answer per class and one goodbye or abort are in flight: the three spare slots.
//
//  Leaving. A goodbye follows this side's last send and says how many messages of each class it sent: a
//  receive numbered beyond them will never be served, and fails naming its call; one below may still be
//  completing on another QP.
#include "transports/ibverbs/engine.h"

#include <algorithm>
#include <cstring>

#include "lib/base/error.h"
#include "transports/mismatch.h"

namespace chorus::transport::ibverbs {

namespace {

// A work request's id: what it is in the top byte, which slot or operation below.
constexpr uint64_t kWrRecv = 1, kWrSend = 2, kWrWrite = 3;
constexpr uint64_t wrId(uint64_t kind, uint64_t v) { return kind << 56 | v; }
constexpr uint64_t wrKind(uint64_t id) { return id >> 56; }
constexpr uint64_t wrValue(uint64_t id) { return id & ((uint64_t(1) << 56) - 1); }
constexpr uint64_t recvValue(int qp, int slot) { return uint64_t(qp) << 24 | uint64_t(slot); }

// What a work request was, by its id (a failed completion's opcode is undefined).
const char* requestName(uint64_t id) {
  switch (wrKind(id)) {
    case kWrRecv: return "receive";
    case kWrSend: return "send";
    case kWrWrite: return "RDMA write";
    default: return "work request";
  }
}

}  // namespace

std::string describe(const ChannelConfig& c) {
  return fmt::format("{} queue pairs, eager up to {} B, {} credits, {} advertised receives, stripes of {} B, writes of "
                     "at most {} B, send queues of {}",
                     c.qps, c.eagerBytes, c.credits, c.advertised, c.stripeBytes, c.maxWriteBytes, c.sendQueueDepth);
}

int queuePairsUsed(const ChannelConfig& c, size_t len) {
  return int(std::clamp<size_t>(len / std::max<size_t>(c.stripeBytes, 1), 1, size_t(c.qps)));
}

std::vector<Piece> planPieces(const ChannelConfig& c, size_t len) {
  std::vector<Piece> pieces;
  const size_t k = size_t(queuePairsUsed(c, len));
  const size_t share = len / k, extra = len % k;
  size_t begin = 0;
  for (size_t i = 0; i < k; ++i) {
    const size_t end = begin + share + (i < extra ? 1 : 0);
    size_t at = begin;
    do {
      const size_t n = std::min(end - at, c.maxWriteBytes);
      pieces.push_back({int(i), at, n, at + n == end});
      at += n;
    } while (at < end);
    begin = end;
  }
  return pieces;
}

struct Channel::SendOp {
  SendOp(const uint8_t* b, size_t l, const OpTag& t, Request* r, uint64_t s, int c, bool rv)
      : buf(b), len(l), tag(t), req(r), msgSeq(s), cls(c), rendezvous(rv) {}
  const uint8_t* buf;
  size_t len;
  OpTag tag;
  Request* req;
  uint64_t msgSeq;
  int cls;
  bool rendezvous;
  bool announced = false;  // eager: sent; rendezvous: its RTS sent
  uint64_t id = 0;
  std::optional<WireHeader> cts;
  std::optional<RegCache::Lease> lease;
  std::vector<Piece> pieces;
  size_t nextPiece = 0;
  int inFlight = 0;
};

struct Channel::RecvOp {
  RecvOp(uint8_t* b, size_t l, const OpTag& t, Request* r, uint64_t s, int c, bool rv)
      : buf(b), len(l), tag(t), req(r), msgSeq(s), cls(c), rendezvous(rv) {}
  uint8_t* buf;
  size_t len;
  OpTag tag;
  Request* req;
  uint64_t msgSeq;
  int cls;
  bool rendezvous;
  bool advertised = false;
  int immsLeft = 0;
  std::optional<RegCache::Lease> lease;
};

Channel::Channel(const ChannelConfig& config, Fabric& fabric, Registrar& owned, RegCache& cache, std::string self,
                 std::string peer)
    : config_(config), fabric_(fabric), owned_(owned), cache_(cache), self_(std::move(self)), peer_(std::move(peer)),
      sqOut_(size_t(config.qps), 0) {
  const size_t slotBytes = kHeaderBytes + config_.eagerBytes;
  for (int i = 0; i < recvSlots(config_, 0); ++i) recvSlots_.push_back(makeSlot(slotBytes));
  // Enough for every credit plus the spare messages; more only while completions lag behind.
  const int sendSlots = 2 * config_.credits + kSpareSlots;
  for (int i = 0; i < sendSlots; ++i) {
    sendSlots_.push_back(makeSlot(slotBytes));
    freeSendSlots_.push_back(sendSlots - 1 - i);
  }
}

Channel::~Channel() {
  for (auto& c : classes_) {
    c.sends.clear();
    c.recvs.clear();
  }
  for (Slot& s : recvSlots_) owned_.deregister(s.reg);
  for (Slot& s : sendSlots_) owned_.deregister(s.reg);
}

Channel::Slot Channel::makeSlot(size_t bytes) {
  Slot s;
  s.mem.reset(new uint8_t[bytes]());
  s.reg = owned_.registerMemory(reinterpret_cast<uintptr_t>(s.mem.get()), bytes, Access::Write);
  return s;
}

void Channel::start() {
  for (int qp = 0; qp < config_.qps; ++qp)
    for (int i = 0; i < recvSlots(config_, qp); ++i) {
      if (qp == 0)
        fabric_.postRecv(0, wrId(kWrRecv, recvValue(0, i)), recvSlots_[size_t(i)].mem.get(),
                         kHeaderBytes + config_.eagerBytes, recvSlots_[size_t(i)].reg.lkey);
      else
        fabric_.postRecv(qp, wrId(kWrRecv, recvValue(qp, i)), nullptr, 0, 0);
    }
}

void Channel::failPeer(const std::string& what) const {
  fail(chorusRemoteError, "{}: connection to {} {}", self_, peer_, what);
}

void Channel::mismatch(const OpTag& mine, size_t myLen, const WireHeader& theirs) const {
  throw mismatchedMessage(self_, peer_, mine, myLen, tagOf(theirs), theirs.len);
}

int Channel::credits(int cls) const {
  const Class& c = classes_[cls];
  return config_.credits - int(c.sent - c.peerFreed);
}

void Channel::repost(int slot) {
  fabric_.postRecv(0, wrId(kWrRecv, recvValue(0, slot)), recvSlots_[size_t(slot)].mem.get(),
                   kHeaderBytes + config_.eagerBytes, recvSlots_[size_t(slot)].reg.lkey);
}

bool Channel::postControl(MsgType type, const WireHeader* proto, const void* payload, size_t len, bool spare) {
  if (freeSendSlots_.empty() || sqOut_[0] >= config_.sendQueueDepth) return false;
  WireHeader h{};
  if (proto != nullptr) h = *proto;
  if (!spare && credits(h.cls) < 1) {
    ++stats_.creditStalls;
    return false;
  }
  const int idx = freeSendSlots_.back();
  Slot& slot = sendSlots_[size_t(idx)];
  h.type = type;
  for (int i = 0; i < 2; ++i) h.freed[i] = classes_[i].reported = classes_[i].freed;
  if (!spare) {
    Class& c = classes_[h.cls];
    ++c.sent;
    h.flags = 0;
    if (!c.asked && credits(h.cls) <= config_.credits / 2) {
      h.flags |= classBit(h.cls);
      c.asked = true;
      ++stats_.creditRequests;
    }
  }
  std::memcpy(slot.mem.get(), &h, kHeaderBytes);
  if (len > 0) std::memcpy(slot.mem.get() + kHeaderBytes, payload, len);
  freeSendSlots_.pop_back();
  ++sqOut_[0];
  fabric_.postSend(0, wrId(kWrSend, uint64_t(idx)), slot.mem.get(), kHeaderBytes + len, slot.reg.lkey,
                   kHeaderBytes + len <= fabric_.maxInline());
  return true;
}

void Channel::isend(const void* buf, size_t len, const OpTag& tag, Request* req) {
  if (peerSaidBye_) failPeer(fmt::format("has said goodbye, but this rank sends it {}", describe(tag)));
  Class& c = classes_[messageClass(tag)];
  req->done = false;
  auto op = std::make_unique<SendOp>(static_cast<const uint8_t*>(buf), len, tag, req, c.nextSend++,
                                     messageClass(tag), len > config_.eagerBytes);
  if (auto it = c.earlyCts.find(op->msgSeq); it != c.earlyCts.end()) {
    op->cts = it->second;
    c.earlyCts.erase(it);
    expect(op->tag, op->len, op->rendezvous, *op->cts);
  }
  c.sends.push_back(std::move(op));
  advance();
}

void Channel::irecv(void* buf, size_t len, const OpTag& tag, Request* req) {
  Class& c = classes_[messageClass(tag)];
  req->done = false;
  auto op = std::make_unique<RecvOp>(static_cast<uint8_t*>(buf), len, tag, req, c.nextRecv++, messageClass(tag),
                                     len > config_.eagerBytes);
  if (auto it = c.early.find(op->msgSeq); it != c.early.end()) {
    const Held held = it->second;
    c.early.erase(it);
    const bool done = take(*op, held.header, recvSlots_[size_t(held.slot)].mem.get() + kHeaderBytes);
    repost(held.slot);
    if (done) {
      advance();  // the freed credit may answer a request
      return;
    }
  }
  unserved(*op);
  c.recvs.emplace(op->msgSeq, std::move(op));
  advance();
}

bool Channel::take(RecvOp& op, const WireHeader& h, const uint8_t* payload) {
  expect(op.tag, op.len, op.rendezvous, h);
  ++classes_[op.cls].freed;
  if (op.rendezvous) return false;
  if (op.len > 0) std::memcpy(op.buf, payload, op.len);
  op.req->done = true;
  return true;
}

void Channel::unserved(const RecvOp& op) const {
  if (peerSaidBye_ && op.msgSeq >= peerSent_[op.cls] && !optional(op.tag, op.req))
    failPeer(fmt::format("closed (said goodbye) without sending the message of {} this rank waits for",
                         describe(op.tag)));
}

void Channel::expect(const OpTag& tag, size_t len, bool rendezvous, const WireHeader& theirs) const {
  if ((theirs.type != MsgType::Eager) != rendezvous || tagOf(theirs) != tag || theirs.len != len)
    mismatch(tag, len, theirs);
}

bool Channel::tryAnnounce(SendOp& op) {
  const WireHeader h = headerFor(op.tag, op.cls, op.msgSeq, op.len);
  if (op.rendezvous) return op.announced = postControl(MsgType::Rts, &h, nullptr, 0, false);
  if (!postControl(MsgType::Eager, &h, op.buf, op.len, false)) return false;
  ++stats_.eagerSent;
  op.req->done = true;
  return true;
}

bool Channel::tryAdvertise(RecvOp& op) {
  Class& c = classes_[op.cls];
  if (int(c.advertised.size()) >= config_.advertised || credits(op.cls) < 1 || freeSendSlots_.empty()) return false;
  if (!op.lease) op.lease.emplace(cache_.acquire(op.buf, op.len, Access::Write));
  WireHeader h = headerFor(op.tag, op.cls, op.msgSeq, op.len);
  h.raddr = reinterpret_cast<uintptr_t>(op.buf);
  h.rkey = op.lease->get().rkey;
  if (!postControl(MsgType::Cts, &h, nullptr, 0, false)) return false;
  op.advertised = true;
  op.immsLeft = queuePairsUsed(config_, op.len);
  c.advertised.emplace(seqBits(op.msgSeq), &op);
  return true;
}

bool Channel::tryWrite(SendOp& op) {
  if (op.pieces.empty()) {
    op.lease.emplace(cache_.acquire(op.buf, op.len, Access::Read));
    op.pieces = planPieces(config_, op.len);
    op.id = nextOpId_++;
    writing_.emplace(op.id, &op);
  }
  bool moved = false;
  const Registration& reg = op.lease->get();
  while (op.nextPiece < op.pieces.size()) {
    const Piece& p = op.pieces[op.nextPiece];
    if (sqOut_[size_t(p.qp)] >= config_.sendQueueDepth) break;
    ++sqOut_[size_t(p.qp)];
    ++op.inFlight;
    ++op.nextPiece;
    fabric_.postWrite(p.qp, wrId(kWrWrite, op.id), op.buf + p.offset, p.len, reg.lkey, op.cts->raddr + p.offset,
                      op.cts->rkey, p.last, immFor(op.cls, op.msgSeq));
    moved = true;
  }
  return moved;
}

bool Channel::advance() {
  bool moved = false;
  // Credits owed, once there is something new to give: an answer that gave nothing would leave a sender at zero
  // without a request out.
  uint8_t answers = 0;
  for (int i = 0; i < 2; ++i)
    if (classes_[i].owes && classes_[i].freed != classes_[i].reported) answers |= classBit(i);
  if (answers != 0) {
    WireHeader h{};
    h.flags = answers;
    if (postControl(MsgType::Credit, &h, nullptr, 0, true)) {
      for (int i = 0; i < 2; ++i)
        if (answers & classBit(i)) classes_[i].owes = false;
      moved = true;
    }
  }
  for (Class& c : classes_) {
    for (auto it = c.sends.begin(); it != c.sends.end();) {
      SendOp& op = **it;
      if (!op.announced) {
        if (!tryAnnounce(op)) break;
        moved = true;
        if (!op.rendezvous) {
          it = c.sends.erase(it);
          continue;
        }
      }
      if (op.cts && op.nextPiece < std::max<size_t>(op.pieces.size(), 1) && tryWrite(op)) moved = true;
      ++it;
    }
    for (auto& [seq, op] : c.recvs)
      if (op->rendezvous && !op->advertised) {
        if (!tryAdvertise(*op)) break;
        moved = true;
      }
  }
  if (!finalPosted_ && abortQueued_) {
    const std::string& text = abortQueued_->second;
    WireHeader h{};
    h.root = abortQueued_->first;
    h.len = std::min(text.size(), config_.eagerBytes);
    if (postControl(MsgType::Abort, &h, text.data(), h.len, true)) finalPosted_ = moved = true;
  } else if (!finalPosted_ && byeQueued_ && classes_[0].sends.empty() && classes_[1].sends.empty()) {
    WireHeader h{};
    h.msgSeq = classes_[0].nextSend;
    h.seq = classes_[1].nextSend;
    if (postControl(MsgType::Bye, &h, nullptr, 0, true)) finalPosted_ = moved = true;
  }
  return moved;
}

void Channel::onCompletion(const Completion& c) {
  if (!c.ok)
    failPeer(fmt::format("failed: a {} on queue pair {} completed with {}", requestName(c.wrId), c.qp, c.status));
  const uint64_t v = wrValue(c.wrId);
  switch (c.kind) {
    case Completion::Kind::Send: {
      if (wrKind(c.wrId) != kWrSend || v >= sendSlots_.size()) failPeer("completed an unknown send (internal error)");
      --sqOut_[0];
      freeSendSlots_.push_back(int(v));
      return;
    }
    case Completion::Kind::Write: {
      auto it = writing_.find(v);
      if (wrKind(c.wrId) != kWrWrite || it == writing_.end()) failPeer("completed an unknown write (internal error)");
      SendOp& op = *it->second;
      --sqOut_[size_t(c.qp)];
      if (--op.inFlight > 0 || op.nextPiece < op.pieces.size()) return;
      ++stats_.rendezvousSent;
      op.req->done = true;
      writing_.erase(it);
      auto& sends = classes_[op.cls].sends;
      sends.erase(std::find_if(sends.begin(), sends.end(), [&](const auto& p) { return p.get() == &op; }));
      return;
    }
    case Completion::Kind::Recv:
    case Completion::Kind::RecvImm: {
      const int qp = int(v >> 24), slot = int(v & 0xffffff);
      if (wrKind(c.wrId) != kWrRecv || qp != c.qp || slot >= recvSlots(config_, qp))
        failPeer("completed an unknown receive (internal error)");
      if (c.kind == Completion::Kind::RecvImm) {
        onImm(c.imm);
      } else {
        if (qp != 0 || c.bytes < kHeaderBytes)
          failPeer(fmt::format("sent a message of {} bytes on queue pair {}: not this protocol", c.bytes, qp));
        const uint8_t* mem = recvSlots_[size_t(slot)].mem.get();
        WireHeader h;
        std::memcpy(&h, mem, kHeaderBytes);
        if (onMessage(h, mem + kHeaderBytes, c.bytes - kHeaderBytes, slot)) return;
      }
      if (qp == 0)
        repost(slot);
      else
        fabric_.postRecv(qp, c.wrId, nullptr, 0, 0);
      return;
    }
  }
}

bool Channel::onMessage(const WireHeader& h, const uint8_t* payload, size_t bytes, int slot) {
  if (h.cls > 1) failPeer(fmt::format("sent a message of class {}: not this protocol", h.cls));
  if (peerSaidBye_) failPeer("sent a message after saying goodbye");
  for (int i = 0; i < 2; ++i) classes_[i].peerFreed = h.freed[i];
  const bool credited = h.type == MsgType::Eager || h.type == MsgType::Rts || h.type == MsgType::Cts;
  if (credited && (h.flags & classBit(h.cls))) classes_[h.cls].owes = true;
  switch (h.type) {
    case MsgType::Eager:
      if (bytes != h.len || h.len > config_.eagerBytes)
        failPeer(fmt::format("sent {} bytes for an eager message of {}: not this protocol", bytes, h.len));
      return onArrival(h, payload, slot);
    case MsgType::Rts:
      return onArrival(h, nullptr, slot);
    case MsgType::Cts:
      onCts(h);
      ++classes_[h.cls].freed;
      return false;
    case MsgType::Credit:
      for (int i = 0; i < 2; ++i)
        if (h.flags & classBit(i)) classes_[i].asked = false;
      return false;
    case MsgType::Bye: {
      peerSaidBye_ = true;
      peerSent_[0] = h.msgSeq;
      peerSent_[1] = h.seq;
      for (auto& c : classes_)
        for (auto& [seq, op] : c.recvs) unserved(*op);
      return false;
    }
    case MsgType::Abort: {
      const std::string text(reinterpret_cast<const char*>(payload), std::min<size_t>(bytes, h.len));
      throw peerAborted(peer_, h.root == chorusInvalidUsage, text);
    }
  }
  failPeer(fmt::format("sent a message of type {}: not this protocol", int(h.type)));
}

bool Channel::onArrival(const WireHeader& h, const uint8_t* payload, int slot) {
  Class& c = classes_[h.cls];
  auto it = c.recvs.find(h.msgSeq);
  if (it == c.recvs.end()) {
    if (h.msgSeq < c.nextRecv || c.early.count(h.msgSeq) != 0)
      failPeer(fmt::format("sent message #{} of its class twice: not this protocol", h.msgSeq));
    c.early.emplace(h.msgSeq, Held{h, slot});
    if (h.type == MsgType::Eager) ++stats_.unexpected;
    return true;
  }
  if (take(*it->second, h, payload)) c.recvs.erase(it);
  return false;
}

void Channel::onCts(const WireHeader& h) {
  Class& c = classes_[h.cls];
  auto it = std::find_if(c.sends.begin(), c.sends.end(), [&](const auto& op) { return op->msgSeq == h.msgSeq; });
  if (it == c.sends.end()) {
    if (h.msgSeq < c.nextSend)
      fail(chorusInvalidUsage, "mismatched calls: {} expects message #{} from {} to be {} of {} bytes, but {} sent it "
           "as a shorter message", peer_, h.msgSeq, self_, describe(tagOf(h)), h.len, self_);
    if (!c.earlyCts.emplace(h.msgSeq, h).second)
      failPeer(fmt::format("advertised message #{} of its class twice: not this protocol", h.msgSeq));
    return;
  }
  SendOp& op = **it;
  if (op.cts) failPeer(fmt::format("advertised message #{} of its class twice: not this protocol", h.msgSeq));
  expect(op.tag, op.len, op.rendezvous, h);
  op.cts = h;
}

void Channel::onImm(uint32_t imm) {
  Class& c = classes_[immClass(imm)];
  auto it = c.advertised.find(immSeq(imm));
  if (it == c.advertised.end())
    failPeer(fmt::format("wrote message #{} of class {}, which this rank did not advertise: not this protocol",
                         immSeq(imm), immClass(imm)));
  RecvOp& op = *it->second;
  if (--op.immsLeft > 0) return;
  op.req->done = true;
  c.advertised.erase(it);
  c.recvs.erase(op.msgSeq);
}

void Channel::abort(chorusResult_t code, const std::string& text) {
  if (!abortQueued_) abortQueued_.emplace(code, text);
}

void Channel::bye() { byeQueued_ = true; }

bool Channel::closed() const { return finalPosted_ && outstanding() == 0; }

bool Channel::busy() const {
  for (const Class& c : classes_) {
    if (!c.sends.empty()) return true;
    for (const auto& [seq, op] : c.recvs)
      if (!optional(op->tag, op->req)) return true;
  }
  return false;
}

int Channel::outstanding() const {
  int n = 0;
  for (int q : sqOut_) n += q;
  return n;
}

}  // namespace chorus::transport::ibverbs
