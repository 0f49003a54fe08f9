// The ibverbs transport's wire protocol: what a SEND carries, how a rendezvous message is split over a peer's
// queue pairs, and the numbers both ends must agree on (they compare them when they connect). Note [ibverbs
// protocol] in engine.cc has the design.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lib/base/ops.h"

namespace chorus::transport::ibverbs {

// What both ends of a connection use; a pair whose settings differ is refused when it connects.
struct ChannelConfig {
  int qps = 1;                          // reliable-connected queue pairs to the peer (CHORUS_IB_QPS_PER_PEER)
  size_t eagerBytes = 8 * 1024;         // payloads up to this are copied into a receive slot; larger: RDMA WRITE
  int credits = 32;                     // receive slots per class the peer may fill (eager, RTS, CTS messages)
  int advertised = 8;                   // rendezvous receives of one class advertised to the peer at once
  size_t stripeBytes = 256 * 1024;      // a message is split over several queue pairs only in pieces this big
  size_t maxWriteBytes = size_t(1) << 30;  // the longest single RDMA WRITE
  int sendQueueDepth = 128;             // work requests outstanding on one queue pair's send queue
  bool operator==(const ChannelConfig&) const = default;
};
std::string describe(const ChannelConfig& c);  // "2 qps, eager 8192 B, 32 credits, ..." for messages

// The SEND slots a side posts on queue pair 0: the credits of each class (eager messages, RTSs and CTSs), one per
// advertised rendezvous receive of each class (its WRITE WITH IMMEDIATE consumes one), and three spares: a credit
// return per class and a final message (goodbye or abort) may arrive beyond the credits. Queue pairs 1.. post one
// per advertised receive.
constexpr int kSpareSlots = 3;
inline int recvSlots(const ChannelConfig& c, int qp) {
  return qp == 0 ? 2 * c.credits + 2 * c.advertised + kSpareSlots : 2 * c.advertised;
}

enum class MsgType : uint8_t {
  Eager = 1,   // header + payload: one message of a class
  Rts,         // ready to send: a rendezvous message's call and length, so that a receiver expecting a shorter
               // (eager) message, or another call, fails instead of waiting for it
  Cts,         // clear to send: the receiver's buffer for a rendezvous message (address, rkey)
  Credit,      // credits returned on request (spare slot)
  Bye,         // the peer closes cleanly (spare slot)
  Abort,       // the peer failed: code and text follow (spare slot)
};

// flags: on a credit-consuming message, its sender is running low on credits of that class and asks for a Credit
// message; on a Credit message, the classes it answers.
constexpr uint8_t classBit(int cls) { return uint8_t(1u << cls); }

// Every SEND opens with this. Eager, Rts and Cts messages repeat the OpTag and length of their call, so that a
// receiver (Eager, Rts) or a sender (Cts) compares them with its own (Note [Message tags] in transports/transport.h).
struct WireHeader {
  MsgType type;
  uint8_t cls;    // message class (Note [Message classes] in lib/base/ops.h)
  uint8_t flags;  // classBit()s: credits wanted, or answered
  uint8_t kind, dtype, redop;
  uint16_t pad = 0;
  int32_t root;    // OpTag.root; the result code for Abort
  uint32_t rkey;   // Cts: the key of the receiver's buffer
  uint32_t freed[2];  // per class, how many credit-consuming messages from the peer this side has taken (mod 2^32)
  uint64_t msgSeq;  // the message's number in its class between this pair (Bye: class 0's count)
  uint64_t seq, count;  // OpTag.seq, OpTag.count (Bye: seq is class 1's count)
  uint64_t len;    // the message's payload bytes (Abort: the text's)
  uint64_t raddr;  // Cts: where the payload goes
};
static_assert(sizeof(WireHeader) == 64);
constexpr size_t kHeaderBytes = sizeof(WireHeader);

// A header for message msgSeq of its class, repeating its call's tag and length.
inline WireHeader headerFor(const OpTag& tag, int cls, uint64_t msgSeq, size_t len) {
  WireHeader h{};
  h.cls = uint8_t(cls);
  h.kind = uint8_t(tag.kind);
  h.dtype = tag.dtype;
  h.redop = tag.redop;
  h.root = tag.root;
  h.msgSeq = msgSeq;
  h.seq = tag.seq;
  h.count = tag.count;
  h.len = len;
  return h;
}

// A rendezvous message's immediate value: its class and the low 31 bits of its number (at most `advertised` of a
// class are outstanding, so these are unique among them).
inline uint32_t immFor(int cls, uint64_t msgSeq) { return (uint32_t(cls) << 31) | uint32_t(msgSeq & 0x7fffffff); }
inline int immClass(uint32_t imm) { return int(imm >> 31); }
inline uint32_t immSeq(uint32_t imm) { return imm & 0x7fffffff; }
inline uint32_t seqBits(uint64_t msgSeq) { return uint32_t(msgSeq & 0x7fffffff); }

// One RDMA WRITE of a rendezvous message. On each queue pair it uses, the last piece carries the immediate value:
// the reliable connection delivers a queue pair's writes in order, so its arrival means all of them landed.
struct Piece {
  int qp;
  size_t offset, len;
  bool last;  // with immediate
};

// How a message of len bytes is written: over min(qps, len / stripeBytes) queue pairs (at least one), each taking
// an equal share, in writes of at most maxWriteBytes. Both ends compute the same; the receiver expects one
// immediate per queue pair used.
std::vector<Piece> planPieces(const ChannelConfig& c, size_t len);
int queuePairsUsed(const ChannelConfig& c, size_t len);

}  // namespace chorus::transport::ibverbs
