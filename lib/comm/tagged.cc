#include "lib/comm/tagged.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <iterator>

#include "lib/comm/comm.h"

namespace chorus {

namespace {
std::string from(int peer) { return peer == CHORUS_ANY_SOURCE ? "any source" : fmt::format("rank {}", peer); }
}  // namespace

std::string describe(const TaggedOp& op) {
  if (op.isRecv) return fmt::format("tagged receive (tag {} from {}, {} bytes)", op.tag, from(op.peer), op.bytes);
  return fmt::format("tagged send (tag {} to rank {}, {} bytes)", op.tag, op.peer, op.bytes);
}

Tagged::Tagged(Comm& comm) : comm_(comm) {}
Tagged::~Tagged() = default;

void Tagged::start() {
  const int n = comm_.nranks();
  sendSeq_.assign(n, 0);
  recvSeq_.assign(n, 0);
  in_ = std::vector<Incoming>(n);
  postedFrom_.assign(n, 0);
  for (int p = 0; p < n; ++p)
    if (p != comm_.rank()) postEnvelope(p);
  started_ = true;
  updateDriving();
}

OpTag Tagged::envelopeTag(uint64_t seq) const {
  OpTag t;
  t.seq = seq;
  t.kind = OpKind::Tagged;
  t.root = kEnvelopeRoot;
  return t;
}

OpTag Tagged::payloadTag(uint64_t seq, uint64_t bytes) const {
  OpTag t;
  t.seq = seq;
  t.count = bytes;
  t.kind = OpKind::Tagged;
  return t;
}

void Tagged::postEnvelope(int peer) {
  Incoming& in = in_[peer];
  comm_.hostIrecv(peer, &in.env, sizeof in.env, envelopeTag(recvSeq_[peer]++), &in.envReq);
}

bool Tagged::fits(const TaggedOp& recv, int peer, int tag) {
  return (recv.peer == CHORUS_ANY_SOURCE || recv.peer == peer) && recv.tag == tag;
}

std::string Tagged::sizeMismatch(const TaggedOp& recv, int sender, size_t bytes) const {
  return fmt::format("{}: its {} matched a message of {} bytes from {} (sizes must be equal); the message is "
                     "dropped", comm_.name(), describe(recv), bytes, comm_.peer(sender).name());
}

void Tagged::finish(std::unique_ptr<TaggedOp> op, chorusResult_t rc, const std::string& text) {
  auto done = std::move(op->onDone);
  op.reset();
  done(rc, text);
}

void Tagged::finishRecv(std::unique_ptr<TaggedOp> op, int sender, const void* data, size_t bytes) {
  if (bytes > 0) std::memcpy(op->buf, data, bytes);
  if (op->source != nullptr) *op->source = sender;
  finish(std::move(op), chorusSuccess, {});
}

Tagged::Block Tagged::takeBlock(size_t bytes) {
  auto best = blocks_.end();  // the smallest free block that holds bytes
  for (auto it = blocks_.begin(); it != blocks_.end(); ++it)
    if (it->cap >= bytes && (best == blocks_.end() || it->cap < best->cap)) best = it;
  if (best == blocks_.end()) return Block{std::unique_ptr<uint8_t[]>(new uint8_t[bytes]), bytes};
  Block b = std::move(*best);
  blocks_.erase(best);
  return b;
}

void Tagged::giveBlock(Block b) {
  if (b.cap == 0) return;
  if (blocks_.size() == kKeptBlocks) {  // keep the largest ones
    auto smallest = std::min_element(blocks_.begin(), blocks_.end(),
                                     [](const Block& x, const Block& y) { return x.cap < y.cap; });
    if (smallest->cap >= b.cap) return;
    blocks_.erase(smallest);
  }
  blocks_.push_back(std::move(b));
}

void Tagged::drop(std::list<Unexpected>::iterator u) {
  giveBlock(std::move(u->data));
  unexpected_.erase(u);
}

// Also marks which peers a receive waits for: their envelope receive is then not optional, and the transport
// reports such a peer leaving or dying.
void Tagged::updateDriving() {
  needsDriving_.store(!posted_.empty() || !out_.empty() || reading_ > 0, std::memory_order_relaxed);
  for (size_t p = 0; p < in_.size(); ++p) in_[p].envReq.optional = postedAny_ == 0 && postedFrom_[p] == 0;
}

void Tagged::addPosted(std::unique_ptr<TaggedOp> recv) {
  ++(recv->peer == CHORUS_ANY_SOURCE ? postedAny_ : postedFrom_[recv->peer]);
  posted_.push_back(std::move(recv));
}

std::unique_ptr<TaggedOp> Tagged::takePosted(std::list<std::unique_ptr<TaggedOp>>::iterator it) {
  std::unique_ptr<TaggedOp> recv = std::move(*it);
  posted_.erase(it);
  --(recv->peer == CHORUS_ANY_SOURCE ? postedAny_ : postedFrom_[recv->peer]);
  return recv;
}

void Tagged::post(std::unique_ptr<TaggedOp> op) {
  if (!op->isRecv) {
    if (op->peer == comm_.rank()) {
      deliverLocal(std::move(op));
    } else {
      Outgoing& o = out_.emplace_back();
      o.op = std::move(op);
      const int p = o.op->peer;
      o.env = Envelope{o.op->tag, 0, o.op->bytes};
      comm_.hostIsend(p, &o.env, sizeof o.env, envelopeTag(sendSeq_[p]++), &o.envReq);
      if (o.op->bytes > 0)
        comm_.hostIsend(p, o.op->buf, o.op->bytes, payloadTag(sendSeq_[p]++, o.op->bytes), &o.payloadReq);
      else
        o.payloadReq.done = true;
      if (o.envReq.done && o.payloadReq.done) {  // the transport took it all at once (small messages)
        finish(std::move(o.op), chorusSuccess, {});
        out_.pop_back();
      }
    }
    updateDriving();
    return;
  }
  // A receive takes the oldest message that fits and no other receive took yet.
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (it->taker != nullptr || it->dropped || !fits(*op, it->peer, it->tag)) continue;
    if (it->bytes != op->bytes) {
      const std::string why = sizeMismatch(*op, it->peer, it->bytes);
      if (it->arrived) drop(it);
      else it->dropped = true;
      finish(std::move(op), chorusInvalidUsage, why);
    } else if (it->arrived) {
      finishRecv(std::move(op), it->peer, it->data.p.get(), it->bytes);
      drop(it);
    } else {
      it->taker = std::move(op);
    }
    updateDriving();
    return;
  }
  addPosted(std::move(op));
  updateDriving();
}

// A send to this rank itself: delivered at once, to a waiting receive or to the unexpected queue.
void Tagged::deliverLocal(std::unique_ptr<TaggedOp> send) {
  const int me = comm_.rank();
  auto it = posted_.begin();
  while (it != posted_.end() && !fits(**it, me, send->tag)) ++it;
  if (it == posted_.end()) {
    Unexpected& u = unexpected_.emplace_back(Unexpected{me, send->tag, send->bytes, takeBlock(send->bytes), true, false, nullptr});
    if (send->bytes > 0) std::memcpy(u.data.p.get(), send->buf, send->bytes);
  } else {
    std::unique_ptr<TaggedOp> recv = takePosted(it);
    if (recv->bytes == send->bytes) {
      finishRecv(std::move(recv), me, send->buf, send->bytes);
    } else {
      const std::string why = sizeMismatch(*recv, me, send->bytes);
      finish(std::move(recv), chorusInvalidUsage, why);
    }
  }
  finish(std::move(send), chorusSuccess, {});
}

void Tagged::onEnvelope(int peer) {
  Incoming& in = in_[peer];
  const Envelope env = in.env;
  auto it = posted_.begin();
  while (it != posted_.end() && !fits(**it, peer, env.tag)) ++it;
  const bool matched = it != posted_.end();
  std::unique_ptr<TaggedOp> recv;
  if (matched) {
    recv = takePosted(it);
    if (recv->bytes != env.bytes) {  // the message is consumed and dropped, as MPI's truncation error does
      const std::string why = sizeMismatch(*recv, peer, env.bytes);
      finish(std::move(recv), chorusInvalidUsage, why);
    }
  }
  if (env.bytes == 0) {
    if (recv != nullptr) finishRecv(std::move(recv), peer, nullptr, 0);
    else if (!matched) unexpected_.push_back(Unexpected{peer, env.tag, 0, {}, true, false, nullptr});
  } else {
    void* dst;
    if (recv != nullptr) {
      in.op = std::move(recv);
      dst = in.op->buf;
    } else if (matched) {
      in.discarding = true;
      in.discard = takeBlock(env.bytes);
      dst = in.discard.p.get();
    } else {
      unexpected_.push_back(Unexpected{peer, env.tag, env.bytes, takeBlock(env.bytes), false, false, nullptr});
      in.spare = std::prev(unexpected_.end());
      dst = in.spare->data.p.get();
    }
    in.reading = true;
    ++reading_;
    comm_.hostIrecv(peer, dst, env.bytes, payloadTag(recvSeq_[peer]++, env.bytes), &in.payloadReq);
  }
  postEnvelope(peer);
}

void Tagged::onPayload(int peer) {
  Incoming& in = in_[peer];
  in.reading = false;
  --reading_;
  if (in.op != nullptr) {
    if (in.op->source != nullptr) *in.op->source = peer;
    finish(std::move(in.op), chorusSuccess, {});
  } else if (in.discarding) {
    in.discarding = false;
    giveBlock(std::move(in.discard));
  } else {
    auto u = in.spare;
    u->arrived = true;
    if (u->taker != nullptr) {
      finishRecv(std::move(u->taker), peer, u->data.p.get(), u->bytes);
      drop(u);
    } else if (u->dropped) {
      drop(u);
    }
  }
}

bool Tagged::progress() {
  if (!started_) return false;
  bool moved = false;
  for (auto it = out_.begin(); it != out_.end();) {
    if (it->envReq.done && it->payloadReq.done) {
      finish(std::move(it->op), chorusSuccess, {});
      it = out_.erase(it);
      moved = true;
    } else {
      ++it;
    }
  }
  const int n = static_cast<int>(in_.size());
  for (int p = 0; p < n; ++p) {
    Incoming& in = in_[p];
    if (in.reading && in.payloadReq.done) {
      onPayload(p);
      moved = true;
    }
    // A peer's payload precedes its next envelope; a transport may still report the envelope first (UCX completes
    // a large payload's rendezvous later): it waits until the payload is in.
    if (!in.reading && p != comm_.rank() && in.envReq.done) {
      onEnvelope(p);
      if (in.reading && in.payloadReq.done) onPayload(p);  // it was there already: done before anyone looks again
      moved = true;
    }
  }
  if (moved) updateDriving();
  return moved;
}

void Tagged::failAll(chorusResult_t code, const std::string& text) {
  std::vector<std::unique_ptr<TaggedOp>> ops;
  for (auto& op : posted_) ops.push_back(std::move(op));
  posted_.clear();
  postedAny_ = 0;
  std::fill(postedFrom_.begin(), postedFrom_.end(), 0);
  for (Outgoing& o : out_) ops.push_back(std::move(o.op));
  out_.clear();
  for (Incoming& in : in_) {
    if (in.op != nullptr) ops.push_back(std::move(in.op));
    in.reading = false;
  }
  for (Unexpected& u : unexpected_)
    if (u.taker != nullptr) ops.push_back(std::move(u.taker));
  unexpected_.clear();
  reading_ = 0;
  started_ = false;  // the transports' requests are no longer looked at
  updateDriving();
  for (auto& op : ops) {
    const std::string what = describe(*op);
    finish(std::move(op), code, text.find(what) == std::string::npos ? fmt::format("{} (ending its {})", text, what)
                                                                     : text);
  }
}

std::string Tagged::describeOldest() const {
  if (!posted_.empty()) return describe(*posted_.front());
  if (!out_.empty()) return describe(*out_.front().op);
  for (const Incoming& in : in_)
    if (in.op != nullptr) return describe(*in.op);
  return "a tagged message being received";
}

}  // namespace chorus
