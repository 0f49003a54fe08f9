// Tagged point-to-point, matched as MPI matches: a receive names a source (or any) and a tag, and takes the
// oldest message that fits, whatever the order the messages and the receives came in. It rides on the
// transports' second message class (Note [Message classes] in lib/base/ops.h): each message is an envelope
// (tag, bytes) and its payload, sent eagerly; each peer's next envelope always has a receive posted, so a
// message nobody asked for yet is read into memory of its own (the unexpected queue) instead of blocking the
// collectives behind it. Driven by the communicator's executing thread only (Comm::progress).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "lib/base/error.h"
#include "lib/base/ops.h"

namespace chorus {

class Comm;

// One tagged send or receive, from its posting until it finishes (onDone, on the executing thread, once).
struct TaggedOp {
  bool isRecv = false;
  int peer = -1;  // a send's destination; a receive's source, or CHORUS_ANY_SOURCE
  int tag = 0;
  void* buf = nullptr;  // a send only reads it
  size_t bytes = 0;
  int* source = nullptr;  // a receive: where the sender's rank goes (may be null)
  std::function<void(chorusResult_t, const std::string&)> onDone;
};

class Tagged {
 public:
  explicit Tagged(Comm& comm);
  ~Tagged();
  // Posts the standing envelope receives; once the transports are connected.
  void start();
  void post(std::unique_ptr<TaggedOp> op);
  // Moves what arrived on; true if anything did.
  bool progress();
  // Something is in flight that needs this rank's progress: a posted operation or a message being read.
  // Read by any thread (the executor's, to know whether its worker must drive).
  bool needsDriving() const { return needsDriving_.load(std::memory_order_relaxed); }
  // Finishes every operation in flight with this error (the communicator failed or is being destroyed).
  void failAll(chorusResult_t code, const std::string& text);
  // The oldest operation in flight, for messages ("tagged receive (tag 5 from any source, 16 bytes)").
  std::string describeOldest() const;

 private:
  struct Envelope {
    int32_t tag;
    uint32_t pad;
    uint64_t bytes;
  };
  // Memory for messages read before their receive, kept for the next ones: a fresh large block costs a page fault
  // per 4 KiB on first touch.
  struct Block {
    std::unique_ptr<uint8_t[]> p;
    size_t cap = 0;
  };
  struct Unexpected {
    int peer;
    int tag;
    size_t bytes;
    Block data;
    bool arrived = false;             // all of its payload is in data
    bool dropped = false;             // a receive of another size took it: thrown away once it has arrived
    std::unique_ptr<TaggedOp> taker;  // a receive matched while the payload was still arriving
  };
  struct Incoming {  // per peer: its next envelope, and the payload of the last one while it arrives
    Envelope env{};
    Request envReq;
    Request payloadReq;
    bool reading = false;
    std::unique_ptr<TaggedOp> op;           // the payload lands in this receive's buffer,
    std::list<Unexpected>::iterator spare;  // or (op null) in this unexpected message,
    bool discarding = false;                // or nowhere (into discard): it matched a receive of another size
    Block discard;
  };
  struct Outgoing {
    std::unique_ptr<TaggedOp> op;
    Envelope env{};
    Request envReq, payloadReq;
  };

  OpTag envelopeTag(uint64_t seq) const;
  OpTag payloadTag(uint64_t seq, uint64_t bytes) const;
  void postEnvelope(int peer);
  void onEnvelope(int peer);
  void onPayload(int peer);
  void deliverLocal(std::unique_ptr<TaggedOp> send);
  static bool fits(const TaggedOp& recv, int peer, int tag);
  void finish(std::unique_ptr<TaggedOp> op, chorusResult_t rc, const std::string& text);
  void finishRecv(std::unique_ptr<TaggedOp> op, int from, const void* data, size_t bytes);
  void updateDriving();
  Block takeBlock(size_t bytes);
  void giveBlock(Block b);
  void drop(std::list<Unexpected>::iterator u);  // its block goes back to blocks_
  void addPosted(std::unique_ptr<TaggedOp> recv);
  std::unique_ptr<TaggedOp> takePosted(std::list<std::unique_ptr<TaggedOp>>::iterator it);
  std::string sizeMismatch(const TaggedOp& recv, int from, size_t bytes) const;

  Comm& comm_;
  bool started_ = false;
  std::atomic<bool> needsDriving_{false};
  std::vector<uint64_t> sendSeq_, recvSeq_;  // per peer: its class's messages, envelopes and payloads
  std::vector<Incoming> in_;
  std::list<Outgoing> out_;
  std::list<std::unique_ptr<TaggedOp>> posted_;  // receives waiting for a message, oldest first
  std::vector<size_t> postedFrom_;               // of posted_, per peer: those naming it
  size_t postedAny_ = 0;                         // of posted_: those from CHORUS_ANY_SOURCE
  std::list<Unexpected> unexpected_;             // messages waiting for a receive, oldest first
  size_t reading_ = 0;                           // peers whose payload is arriving
  std::vector<Block> blocks_;                    // free, at most kKeptBlocks
  static constexpr size_t kKeptBlocks = 4;
};

std::string describe(const TaggedOp& op);  // "tagged receive (tag 5 from any source, 16 bytes)"

}  // namespace chorus
