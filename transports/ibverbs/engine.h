// The ibverbs transport's protocol engine: one peer's messages over its queue pairs (eager copies, rendezvous
// writes, credits, tag checks), written against Fabric (fabric.h) so that it runs and is tested without a
// device. Note [ibverbs protocol] in engine.cc has the design.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "transports/ibverbs/fabric.h"
#include "transports/ibverbs/protocol.h"
#include "transports/ibverbs/reg_cache.h"

namespace chorus::transport::ibverbs {

class Channel {
 public:
  // self and peer name the two ranks in messages. owned registers the engine's own slots (for its life); cache
  // registers the callers' buffers for the time of a rendezvous. All must outlive the channel.
  Channel(const ChannelConfig& config, Fabric& fabric, Registrar& owned, RegCache& cache, std::string self,
          std::string peer);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Posts every receive slot; call once, after the queue pairs are ready to receive and before the peer may send.
  void start();

  // The transport interface's isend/irecv for this peer (transports/transport.h): never block; buf and *req stay
  // valid until req->done.
  void isend(const void* buf, size_t len, const OpTag& tag, Request* req);
  void irecv(void* buf, size_t len, const OpTag& tag, Request* req);

  // A completion of one of this channel's work requests. Throws chorus::Error naming the peer: a failed work
  // request, a tag mismatch, the peer's abort, or a protocol violation.
  void onCompletion(const Completion& c);
  // Posts what can go now (queued sends as credits allow, clear-to-sends, rendezvous writes, credit returns);
  // true if it posted anything.
  bool advance();

  // Best effort: queues the peer's notice that this rank failed (posted by advance()).
  void abort(chorusResult_t code, const std::string& text);
  // Queues the goodbye; true once it was posted and every send of this side has completed.
  void bye();
  bool closed() const;

  bool peerSaidBye() const { return peerSaidBye_; }
  // True while any send or any receive that is not optional is under way.
  bool busy() const;
  // Work requests posted whose completions have not come back: the teardown waits for them.
  int outstanding() const;

  struct Stats {
    uint64_t eagerSent = 0, rendezvousSent = 0, unexpected = 0, creditStalls = 0, creditRequests = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  struct SendOp;
  struct RecvOp;
  struct Slot {
    std::unique_ptr<uint8_t[]> mem;
    Registration reg;
  };
  // A message that came before its receive was posted, kept in the slot it landed in (the slot is reposted, and
  // its credit returned, once the receive takes it): a peer cannot make this rank allocate, and a class whose
  // receives lag holds only its own credits.
  struct Held {
    WireHeader header;
    int slot;
  };

  [[noreturn]] void failPeer(const std::string& what) const;
  [[noreturn]] void mismatch(const OpTag& mine, size_t myLen, const WireHeader& theirs) const;
  // Fails a receive the peer, having said goodbye, will never serve.
  void unserved(const RecvOp& op) const;
  Slot makeSlot(size_t bytes);
  int credits(int cls) const;
  // Posts a SEND: a credit-consuming one of proto->cls, or (spare) a Credit, Bye or Abort.
  bool postControl(MsgType type, const WireHeader* proto, const void* payload, size_t len, bool spare);
  void repost(int slot);
  bool tryAnnounce(SendOp& op);  // an eager message, or a rendezvous message's RTS
  bool tryAdvertise(RecvOp& op);
  bool tryWrite(SendOp& op);
  // Each returns true when it keeps the slot the message landed in.
  bool onMessage(const WireHeader& h, const uint8_t* payload, size_t bytes, int slot);
  // A message a receive takes (an eager payload, or a rendezvous message's RTS): to its posted receive, or held.
  bool onArrival(const WireHeader& h, const uint8_t* payload, int slot);
  void onCts(const WireHeader& h);
  void onImm(uint32_t imm);
  // op takes message h (its payload, for an eager one): h must be op's call, or both calls are named. Returns true
  // when op is complete.
  bool take(RecvOp& op, const WireHeader& h, const uint8_t* payload);
  // theirs (an eager message, RTS or CTS) must be the call (tag, len, mode) this side made.
  void expect(const OpTag& tag, size_t len, bool rendezvous, const WireHeader& theirs) const;

  const ChannelConfig config_;
  Fabric& fabric_;
  Registrar& owned_;
  RegCache& cache_;
  const std::string self_, peer_;

  std::vector<Slot> recvSlots_;        // queue pair 0's, then the others' zero-length receives need no memory
  std::vector<Slot> sendSlots_;        // one per SEND in flight
  std::vector<int> freeSendSlots_;
  std::vector<int> sqOut_;             // work requests outstanding per queue pair

  // Per class: the number the next isend / irecv gets, queued sends (in number order), posted receives by number,
  // messages and announcements held before their call, clear-to-sends that came before their send, receives
  // advertised and not yet written; and its credits (Note [ibverbs protocol]).
  struct Class {
    uint64_t nextSend = 0, nextRecv = 0;
    std::deque<std::unique_ptr<SendOp>> sends;
    std::map<uint64_t, std::unique_ptr<RecvOp>> recvs;
    std::map<uint64_t, Held> early;
    std::map<uint64_t, WireHeader> earlyCts;
    std::unordered_map<uint32_t, RecvOp*> advertised;  // by seqBits
    uint32_t sent = 0, peerFreed = 0;  // credit-consuming messages posted, and how many of them the peer took
    uint32_t freed = 0, reported = 0;  // such messages taken from the peer, and the count last told it
    bool asked = false;                // asked the peer for credits; its answer has not arrived
    bool owes = false;                 // the peer asked; not answered yet (no new credits to give)
  };
  Class classes_[2];
  std::unordered_map<uint64_t, SendOp*> writing_;  // rendezvous sends by id, while their writes are in flight
  uint64_t nextOpId_ = 1;

  std::optional<std::pair<chorusResult_t, std::string>> abortQueued_;
  bool byeQueued_ = false, finalPosted_ = false;
  bool peerSaidBye_ = false;
  uint64_t peerSent_[2] = {0, 0};  // messages of each class the peer sent, as its goodbye says
  Stats stats_;
};

}  // namespace chorus::transport::ibverbs
