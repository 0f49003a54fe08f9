// The communicator: who the ranks are, how to reach each peer, and the one thread at a time that drives its
// operations (lib/comm/executor.h). Algorithms talk to peers only through isend/irecv/waitUntil below, which route
// each peer to its transport.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/context.h"
#include "algorithms/cost_model.h"
#include "chorus/chorus.h"
#include "lib/comm/bootstrap.h"
#include "lib/comm/device_scratch.h"
#include "lib/comm/staging_pool.h"
#include "lib/base/env.h"
#include "lib/base/error.h"
#include "lib/comm/executor.h"
#include "lib/comm/flight_recorder.h"
#include "lib/comm/liveness.h"
#include "lib/comm/made_ops.h"
#include "lib/comm/rendezvous.h"
#include "lib/comm/tagged.h"
#include "lib/base/socket.h"
#include "transports/ipc/ipc_transport.h"
#include "transports/registry.h"

namespace chorus {

class Comm : public algo::Context {
 public:
  // Collective: bootstraps with the root, then connects to every peer. Throws chorus::Error.
  Comm(int nranks, int rank, const struct UniqueIdData& root, const Config& config);
  virtual ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const final { return setup_.rank; }
  int nranks() const final { return setup_.nranks; }
  const Config& config() const { return config_; }
  const transport::PeerInfo& peer(int r) const { return setup_.peers[r]; }
  // True when every pair of the communicator uses a transport that reduces while receiving (then extra
  // messages cost no staging copy; the same answer on every rank).
  bool reduceOnReceive() const { return reduceOnReceive_; }
  // Host index of every rank (equal host identity, numbered by first rank), for topology-aware algorithms.
  const std::vector<int>& hostOf() const final { return hostOf_; }
  size_t chunkBytes(size_t bytes) const final { return chunkBytesOf(deviceCall_, bytes); }
  // The same for a call on device memory (deviceCall) or host memory; any thread.
  size_t chunkBytesOf(bool deviceCall, size_t bytes) const {
    return chunkAt(deviceCall && !deviceChunks_.empty() ? deviceChunks_ : chunks_, bytes);
  }
  const ChunkSteps& chunkSteps() const { return chunks_; }
  // The link numbers of the slowest transport serving a pair of ranks that share a host (the same on every
  // rank); none when no two ranks share one.
  const std::optional<transport::LinkTraits>& localLink() const { return localCost_; }
  // AUTO's predictions (algorithms/cost_model.h), built at creation (lib/comm/tuning.h).
  const algo::CostModel& costModel() const { return model_; }
  // The memory a call's buffers may be in besides host memory: the device current at creation (host: none).
  const mem::Space& space() const { return space_; }
  // The default stream of the communicator's device (Note [The default stream] in stream.cc), opened at first use;
  // nullptr where the runtime has no streams or the calling thread's current device is another.
  mem::DeviceStream* defaultStream();
  std::string name() const { return peer(rank()).name(); }
  Executor& executor() { return *executor_; }
  Tagged& tagged() { return *tagged_; }
  // The ops its user made (chorusRedOpCreatePreMulSum); any thread.
  MadeOps& madeOps() { return madeOps_; }

  // Tagged point-to-point's messages: host memory, straight to the peer's transport (executing thread only).
  void hostIsend(int peer, const void* buf, size_t len, const OpTag& tag, Request* req) {
    route_[peer]->isend(peer, buf, len, tag, req);
    bytesSent_.store(bytesSent_.load(std::memory_order_relaxed) + len, std::memory_order_relaxed);
  }
  void hostIrecv(int peer, void* buf, size_t len, const OpTag& tag, Request* req) {
    route_[peer]->irecv(peer, buf, len, tag, req);
  }
  // The executor's worker, while no operation is queued: drives tagged traffic until it needs no driving or
  // stop() says so (an operation was queued: kick() wakes a sleeping driver). Throws as waitUntil does.
  void driveTagged(FunctionRef<bool()> stop);
  void kick();

  // The space of the call the algorithms run now: its messages are staged through host memory where the CPU may
  // not touch it (Note [Staging device memory]).
  // Device calls go to a peer through its device route where it has one (Note [Device routes]).
  void beginCall(const mem::Space& space) {
    deviceCall_ = !space.isHost();
    staging_ = deviceCall_ && !space.device()->hostAccessible() ? space.device() : nullptr;
  }
  // After each operation: a staged message still in flight (the operation failed) no longer reports to the
  // algorithm's request, which is gone; its bounce buffer stays until the transport is done with it.
  void endCall() {
    if (!staged_.empty()) [[unlikely]]
      for (Staged& s : staged_) s.user = nullptr;
  }

  // ---- algo::Context, for algorithms (executing thread only) ----
  void isend(int peer, const void* buf, size_t len, const OpTag& tag, Request* req) final;
  void irecv(int peer, void* buf, size_t len, const OpTag& tag, Request* req) final;
  bool irecvReduce(const mem::Space& space, int peer, void* dst, const void* src, size_t len, chorusDataType_t dtype,
                   chorusRedOp_t op, const OpTag& tag, Request* req) final {
    if (space.isHost()) [[likely]]
      return fuses_[peer] && (flight_.posted(peer, len), route_[peer]->irecvReduce(peer, dst, src, len, dtype, op, tag, req));
    return deviceRoute_[peer] != nullptr && deviceRoute_[peer]->irecvReduce(peer, dst, src, len, dtype, op, tag, req);
  }
  // Drives the transports until done() is true: spins CHORUS_SPIN_US, then sleeps in poll. Throws on abort,
  // on a transport error, and after CHORUS_TIMEOUT seconds without progress (naming the operation).
  void waitUntil(FunctionRef<bool()> done, const OpTag& tag) final {
    waitFor(done, [&] { return describe(tag); });
  }
  // waitUntil's loop; `what` names the operation in errors.
  void waitFor(FunctionRef<bool()> done, FunctionRef<std::string()> what);
  uint8_t* scratch(const mem::Space& space, size_t bytes, int slot = 0) final;
  // The scratch of calls on the communicator's device, and the pinned buffers that stage them (nullptr: it works
  // on host memory only).
  DeviceScratch* deviceScratch() { return deviceScratch_.get(); }
  StagingPool* stagingPool() { return stagingPool_.get(); }
  // A device call's messages to `peer` are staged through host memory (the device's memory is not the CPU's, and
  // no device route reaches the peer); any thread.
  bool stagesTo(int peer) const {
    return !space_.isHost() && !space_.device()->hostAccessible() && deviceRoute_[peer] == nullptr;
  }
  uint64_t bytesSent() const { return bytesSent_.load(std::memory_order_relaxed); }

  // ---- sequence numbers, taken at enqueue time so tags follow issue order ----
  uint64_t nextCollSeq() { return collSeq_++; }
  uint64_t nextSendSeq(int peer) { return sendSeq_[peer]++; }
  uint64_t nextRecvSeq(int peer) { return recvSeq_[peer]++; }

  // The previous AllReduce's size and algorithm (executing thread only): a repeated size skips the cost model,
  // and only changes are logged.
  size_t lastAllReduceBytes = SIZE_MAX;
  int lastAllReduceChoice = -1;

  // ---- failure state ----
  // Marks the communicator broken (first failure wins), tells the peers, and returns the error to rethrow.
  Error markFailed(const Error& e);
  // Throws the recorded failure, if any.
  void throwIfFailed() const;
  bool failed() const { return failed_.load(); }
  chorusResult_t asyncError() const;
  // Makes every pending and later operation fail promptly; callable from any thread.
  void abort();
  // Breaks the communicator from another thread (a peer declared silent, Note [Liveness]): pending and later
  // operations fail promptly with this error.
  void failFromOutside(chorusResult_t code, const std::string& text);
  // For a rendezvous round among `members` (ranks of this communicator, in the new communicator's order): which
  // member is known to be gone (Note [Members gone]). Callable from any thread while this communicator lives.
  std::function<std::string(int member)> goneAmong(std::vector<int> members) const;
  // What this rank is doing, for its heartbeats (executing thread only).
  void beginActivity(const OpTag& tag) { activity_.store(Activity{tag.kind, tag.seq, true}.pack(), std::memory_order_relaxed); }
  void endActivity() { activity_.store(activity_.load(std::memory_order_relaxed) & ~uint64_t{1}, std::memory_order_relaxed); }
  // The last operations (Note [Flight recorder]); written by the executing thread.
  FlightRecorder& flight() { return flight_; }
  // One JSON line: this rank, why the dump was taken, the failure if any, and the recorded operations (any thread).
  std::string flightDump(const std::string& reason) const;
  // Waits for queued work, says goodbye to the peers and closes connections.
  void shutdown();

  void setLastError(const std::string& text);
  const char* lastError();
  // Where this communicator's ranks meet to form its successors (Note [Rendezvous]); one split or shrink at a time.
  Rendezvous& rendezvous() { return *rendezvous_; }

 private:
  void logEnvironment();
  void startTransports();
  // Picks each pair's transport (transport::choosePair) and connects to this rank's peers.
  void connectPeers(const std::vector<RankInfo>& ranks, Deadline deadline);
  // The device routes (Note [Device routes]): what this rank offers, and the pairs of one host that both offer it.
  void offerDeviceRoute(RankInfo& mine);
  void connectDeviceRoutes(const std::vector<RankInfo>& ranks, Deadline deadline);
  // Drives every transport in use once; true if anything moved.
  bool progress();
  // Sleeps until a transport may have work or the communicator is aborted (at most 100 ms).
  void sleepOnTransports();
  // Sends the recorded failure to every peer, once; only from the executing thread or once it is idle.
  void tellPeers();
  void chooseSpin();
  void chooseChunk(const std::vector<const transport::Descriptor*>& used);

  Config config_;
  mem::Space space_;  // the device current at creation (host: none)
  std::mutex defaultStreamMu_;
  std::unique_ptr<mem::DeviceStream> defaultStream_;  // under defaultStreamMu_
  transport::Setup setup_;
  std::unique_ptr<Tagged> tagged_;  // before transports_: its buffers outlive their posted receives
  MadeOps madeOps_;
  unsigned taggedLooks_ = 0;        // progress() calls, for looking at idle tagged traffic now and then
  std::vector<std::unique_ptr<transport::Transport>> transports_;  // in this rank's order of preference
  std::vector<const transport::Descriptor*> descriptors_;         // of each of transports_
  std::vector<transport::Transport*> inUse_;  // those that serve at least one peer
  std::vector<transport::Transport*> route_;  // per peer
  std::unique_ptr<transport::ipc::DeviceTransport> deviceIpc_;  // device to device within a host, where offered
  std::vector<transport::Transport*> deviceRoute_;  // per peer: deviceIpc_ or nullptr
  bool deviceCall_ = false;  // the call the algorithms run now is on device memory
  std::vector<int> hostOf_;
  ChunkSteps chunks_;  // the pipeline chunk by buffer size (chooseChunk)
  ChunkSteps deviceChunks_;  // device calls' where every peer is reached device to device, else empty
  bool reduceOnReceive_ = false;
  std::vector<uint8_t> fuses_;  // per peer: its link reduces while receiving (else irecvReduce need not ask)
  std::optional<transport::LinkTraits> localCost_;
  bool oversubscribed_ = false;  // this host runs more ranks than this process has cores
  static constexpr int kMaxImpatience = 16;  // Note [Patience] in comm.cc: spin and yield >> impatience_
  int impatience_ = 0;
  algo::CostModel model_;
  std::unique_ptr<Executor> executor_;
  Fd abortFd_;  // eventfd: wakes a sleeping waiter on abort
  Fd kickFd_;   // eventfd: wakes a sleeping driveTagged when an operation is queued
  std::atomic<bool> aborted_{false};  // chorusCommAbort, or a failure from outside: waiters stop
  std::atomic<bool> userAbort_{false};  // the first: chorusCommAbort
  std::atomic<bool> failed_{false};
  [[noreturn]] void throwInterrupted(FunctionRef<std::string()> what);
  bool peersTold_ = false;
  mutable std::mutex mu_;  // guards failure_ and lastError_
  chorusResult_t failCode_ = chorusSuccess;
  std::string failure_;
  std::string lastError_;
  uint64_t collSeq_ = 0;
  std::vector<uint64_t> sendSeq_, recvSeq_;
  std::vector<std::vector<uint8_t>> scratch_;  // host memory, by slot
  std::unique_ptr<DeviceScratch> deviceScratch_;  // on space_'s device; none for host memory only
  // A message staged through host memory (Note [Staging device memory]): a send is copied to `bounce`, then moved by
  // the transport under its own request; a receive is moved into `bounce`, then copied to the device. The
  // algorithm's request completes when the last step has.
  struct Staged {
    enum class Step : uint8_t { ToHost, Moving, ToDevice };
    Request* user;
    Request shadow;
    uint8_t* bounce;
    size_t len;
    int sizeClass;  // of bounce, in the pool
    Step step;
    uint64_t ticket;  // of the device copy under way
    void* deviceDst;  // a receive's destination; nullptr for a send
    int peer;         // a send's, and its tag: it is handed to the transport once its copy is done
    OpTag tag;
  };
  mem::Device* staging_ = nullptr;
  std::list<Staged> staged_;  // in flight; a list keeps each shadow request where the transport was given it
  int copying_ = 0;           // of staged_, those waiting for a device copy: waits then do not sleep in poll
  [[gnu::noinline]] Staged& stage(Request* user, size_t len, void* deviceDst, int peer, const OpTag& tag);
  bool finishStaged();
  // Pinned host memory for bounce buffers, pooled by power-of-two size class (from 4 KiB) and released by ~Comm.
  mem::Device* bounceDevice_ = nullptr;
  std::unique_ptr<StagingPool> stagingPool_;  // on space_'s device, as deviceScratch_
  std::vector<uint8_t> sendBlocked_;  // per peer, during finishStaged: an earlier staged send is not posted yet
  std::atomic<uint64_t> bytesSent_{0};
  std::atomic<uint64_t> activity_{0};  // Activity::pack, read by the heartbeats
  FlightRecorder flight_;
  void dumpOnFailure(const std::string& why);  // the first failure's dump (Note [Flight recorder])
  Fd heartbeatSocket_;                 // until liveness_ takes it
  std::unique_ptr<Rendezvous> rendezvous_;
  // Last: it goes first, while what its callback touches still exists.
  std::unique_ptr<Liveness> liveness_;
  void startLiveness(const std::vector<RankInfo>& ranks);
};

}  // namespace chorus

// The C handle is the communicator itself.
struct chorusComm final : public chorus::Comm {
  using chorus::Comm::Comm;
};
