#include "lib/comm/comm.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>

#include "algorithms/tree_shape.h"
#include "lib/base/identity.h"
#include "lib/comm/bootstrap.h"
#include "lib/base/error.h"
#include "lib/base/log.h"
#include "lib/base/text.h"
#include "lib/comm/tuning.h"
#include "lib/comm/devices.h"
#include "transports/ipc/ipc_transport.h"
#include "transports/registry.h"

namespace chorus {

Comm::Comm(int nranks, int rank, const UniqueIdData& root, const Config& config)
    : config_(config), flight_(config.flightRecords) {
  log::LogRankScope scope(rank);
  logEnvironment();
  Deadline deadline = deadlineIn(config_.initTimeoutSec);
  setup_.rank = rank;
  setup_.nranks = nranks;
  setup_.secret = root.secret;
  setup_.socketIfname = config_.socketIfname;
  abortFd_ = Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  kickFd_ = Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!abortFd_ || !kickFd_) failErrno("eventfd");
  tagged_ = std::make_unique<Tagged>(*this);
  // A process with a device driver loaded may hand over device memory, so the plugins are loaded to find its
  // runtime (Note [Memory plugins]) before the communicator takes the current device as its own.
  findDeviceRuntime(false);
  space_ = mem::currentSpace();
  if (!space_.isHost()) {
    deviceScratch_ = std::make_unique<DeviceScratch>(space_.device());
    stagingPool_ = std::make_unique<StagingPool>(space_.device());
  }
  startTransports();

  RankInfo mine;
  mine.rank = rank;
  mine.nranks = nranks;
  mine.pid = getpid();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  mine.host = host;
  mine.hostId = hostIdentity(config_.hostId);
  for (const auto& t : transports_) mine.addresses.push_back({t->name(), t->address()});
  if (nranks > 1 && config_.peerTimeoutSec > 0)
    heartbeatSocket_ = Liveness::openSocket(config_.socketIfname, &mine.heartbeat);
  rendezvous_ = std::make_unique<Rendezvous>(config_.socketIfname, &mine.rendezvous);
  offerDeviceRoute(mine);
  BootstrapResult boot = exchangeWithRoot(root, mine, deadline);
  setup_.commId = boot.commId;
  rendezvous_->setMembers(rank, setup_.secret, setup_.commId, boot.ranks);
  std::vector<std::string> hostIds;
  for (const RankInfo& r : boot.ranks) {
    setup_.peers.push_back({r.rank, r.pid, r.host, r.hostId});
    hostIds.push_back(r.hostId);
  }
  hostOf_ = algo::hostIndices(hostIds);

  chooseSpin();
  sendSeq_.assign(nranks, 0);
  recvSeq_.assign(nranks, 0);
  route_.assign(nranks, nullptr);
  fuses_.assign(nranks, 0);
  deviceRoute_.assign(nranks, nullptr);
  connectPeers(boot.ranks, deadline);
  connectDeviceRoutes(boot.ranks, deadline);
  for (auto& t : transports_) t->stopListening();
  tagged_->start();
  model_ = buildCostModel(*this, oversubscribed_);
  executor_ = std::make_unique<Executor>(*this);
  if (heartbeatSocket_) startLiveness(boot.ranks);
  CHORUS_INFO(kInit, "communicator ready: rank {} of {} on {}, commId {:016x}", rank, nranks, host, setup_.commId);
  std::string choices;
  for (const auto& c : model_.crossovers(config_.algo.allReduce))
    choices += fmt::format("{}{} from {} B", choices.empty() ? "" : ", ", algo::algoName(c.algo), c.fromBytes);
  CHORUS_INFO(kColl, "algorithms: AllReduce {}; ReduceScatter/AllGather ring; Broadcast/Reduce pipelined chain; "
              "AllToAll/Send/Recv direct; Barrier dissemination", choices);
}

Comm::~Comm() {
  deviceIpc_.reset();  // its copies (of a failed operation) may still write to device scratch: they end first
  deviceScratch_.reset();
  for (Staged& s : staged_)  // the transports are closed by now
    if (s.bounce != nullptr) stagingPool_->give(s.sizeClass, s.bounce);
  stagingPool_.reset();
}

// Busy spinning only pays when the peer we wait for has a core of its own. With more ranks on this host than
// cores (the normal case of tests here) a spinning rank steals the time slice of the rank it waits for, so it
// only polls between sched_yield calls (CHORUS_YIELD_US) before it sleeps. Measured, 4 ranks on 2 cores, 8 B
// allreduce: 124-131 us spinning 50 us, 98 us sleeping at once, 44-47 us yielding for 200 us; 8 ranks: 459 us
// sleeping at once, 172 us yielding.
void Comm::chooseSpin() {
  const int local = static_cast<int>(std::count(hostOf_.begin(), hostOf_.end(), hostOf_[rank()]));
  cpu_set_t set;
  int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  oversubscribed_ = local > cores;
  if (config_.spinUs >= 0) return;
  config_.spinUs = oversubscribed_ ? 0 : 50;
  CHORUS_INFO(kInit, "{} ranks on this host, {} cores: waiting ranks spin {} us before sleeping", local, cores,
              config_.spinUs);
}

// Every transport the configuration allows, in order of preference. One that cannot start (a bad setting of
// its own, a library failure) fails the communicator: those that cannot run here at all were already left out
// by the registry (Descriptor::unavailable).
void Comm::startTransports() {
  for (const transport::Descriptor* d : transport::select(config_.transports)) {
    transports_.push_back(d->create(setup_));
    descriptors_.push_back(d);
  }
}

void Comm::logEnvironment() {
  auto logSection = [](std::span<const EnvSpec> vars) {
    for (const EnvSpec& e : vars)
      if (const char* v = std::getenv(e.name))
        CHORUS_INFO(kEnv, "{}={}", e.name, std::string(e.name) == "CHORUS_SECRET" ? "(set, not shown)" : v);
  };
  logSection(envTable());
  for (const transport::Descriptor& d : transport::registered()) logSection(d.env);
}

// The pipeline chunk by buffer size (chooseChunks in lib/comm/tuning.h), unless CHORUS_CHUNK_BYTES fixes it.
void Comm::chooseChunk(const std::vector<const transport::Descriptor*>& used) {
  if (config_.chunkBytes != 0) {
    chunks_ = {{0, config_.chunkBytes}};
    return;
  }
  std::vector<const transport::LinkTraits*> traits;
  for (const transport::Descriptor* d : used) traits.push_back(&d->traits);
  std::vector<int> perHost(hostOf_.size(), 0);
  for (int h : hostOf_) ++perHost[static_cast<size_t>(h)];
  // hostOf_ numbers hosts by their first rank, so any index above 0 means a second host.
  const bool crossHost = *std::max_element(hostOf_.begin(), hostOf_.end()) > 0;
  // Whether a host is oversubscribed is agreed on only later (buildCostModel); on one host every rank knows it.
  chunks_ = chooseChunks(traits, *std::max_element(perHost.begin(), perHost.end()), crossHost,
                         !crossHost && oversubscribed_);
  std::string text;
  for (const ChunkStep& c : chunks_)
    text += c.fromBytes == 0 ? fmt::format("{} bytes", c.chunkBytes)
                             : fmt::format(", {} from buffers of {} bytes", c.chunkBytes, c.fromBytes);
  CHORUS_INFO(kInit, "pipeline chunk {}", text);
}

void Comm::connectPeers(const std::vector<RankInfo>& ranks, Deadline deadline) {
  // Both ends of a pair must pick the same transport, so the choice depends only on what both published
  // (transport::choosePair). Every rank computes every pair's, so that link facts the cost model and the
  // chunk size depend on agree on all ranks.
  std::vector<std::vector<std::string>> offered(static_cast<size_t>(nranks()));
  for (int r = 0; r < nranks(); ++r)
    for (const TransportAddress& a : ranks[static_cast<size_t>(r)].addresses)
      if (a.transport != transport::ipc::kName) offered[static_cast<size_t>(r)].push_back(a.transport);
  auto nameList = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& n : v) s += (s.empty() ? "" : ",") + n;
    return s.empty() ? std::string("none") : s;
  };
  std::vector<const transport::Descriptor*> used;  // every transport some pair of the communicator uses
  reduceOnReceive_ = true;
  localCost_.reset();
  for (int a = 0; a < nranks(); ++a)
    for (int b = a + 1; b < nranks(); ++b) {
      const transport::Descriptor* d = transport::choosePair(a, b, offered, setup_.peers);
      if (d == nullptr)
        fail(chorusInvalidUsage, "{} and {} share no transport: one offers {}, the other {} (CHORUS_TRANSPORTS)",
             peer(a).name(), peer(b).name(), nameList(offered[static_cast<size_t>(a)]),
             nameList(offered[static_cast<size_t>(b)]));
      if (std::none_of(used.begin(), used.end(), [&](const auto* x) { return x->name == d->name; })) used.push_back(d);
      reduceOnReceive_ = reduceOnReceive_ && d->traits.reducesOnReceive;
      if (hostOf_[static_cast<size_t>(a)] == hostOf_[static_cast<size_t>(b)] &&
          (!localCost_ || d->traits.alphaUs > localCost_->alphaUs))
        localCost_ = d->traits;  // the slowest link inside a host
      if (a != rank() && b != rank()) continue;
      const int p = a == rank() ? b : a;
      // By name: the registry may have grown by its plugins since this rank's select() (another thread's).
      const size_t at = static_cast<size_t>(
          std::find_if(descriptors_.begin(), descriptors_.end(), [&](const auto* x) { return x->name == d->name; }) -
          descriptors_.begin());
      if (at == descriptors_.size()) fail(chorusInternalError, "{}: transport {} is not started here", name(), d->name);
      route_[p] = transports_[at].get();
      fuses_[p] = d->traits.reducesOnReceive;
      if (std::find(inUse_.begin(), inUse_.end(), route_[p]) == inUse_.end()) inUse_.push_back(route_[p]);
      CHORUS_INFO(kInit, "{} -> {}: transport {}", name(), peer(p).name(), route_[p]->name());
    }
  chooseChunk(used);
  auto addressOf = [&](int p) -> const std::vector<uint8_t>& {
    for (const TransportAddress& a : ranks[static_cast<size_t>(p)].addresses)
      if (a.transport == route_[p]->name()) return a.bytes;
    fail(chorusInternalError, "{} published no {} address", peer(p).name(), route_[p]->name());
  };
  // Lower rank connects, higher accepts. Connecting first to every higher rank never blocks on the peer's
  // progress (the kernel completes TCP and unix-socket handshakes), so every rank can then accept in order.
  // Then each transport settles what its connects left to this side's progress (UCX's wire-up): the device IPC
  // setup that follows, or the caller, may block without progressing them while a peer is still in accept().
  for (int p = rank() + 1; p < nranks(); ++p) route_[p]->connect(p, addressOf(p), deadline);
  for (int p = 0; p < rank(); ++p) route_[p]->accept(p, addressOf(p), deadline);
  for (transport::Transport* t : inUse_) t->settle(deadline);
}

// Note [Device routes]:
// A call on device memory reaches a peer of the same host device to device where both ranks offer device IPC
// (transports/ipc/ipc_transport.h: their communicators are on devices of one runtime that has IPC, and
// CHORUS_DEVICE_IPC is not 0) and their devices reach each other (Note [Peer access]); the pair's host transport
// still carries its host calls and its failures. Every rank computes every pair's answer from what all published,
// so both ends of a pair agree. Elsewhere device memory goes through host memory (Note [Staging device memory])
// where the CPU may not touch it.
//
// Note [Peer access]:
// Ranks on two GPUs of one host can go device to device only where each GPU can map and copy the other's memory
// (CUDA: cudaDeviceCanAccessPeer; GPUs behind different PCIe root complexes, or in a VM with P2P off, cannot, and
// CUDA IPC between them fails or crawls through host memory). So each rank publishes with its offer its device's
// host-wide name (the PCI bus id) and the names of the devices it sees that its device cannot reach; a pair goes
// device to device unless one end names the other so, and stages through host memory otherwise. A device a rank
// does not see (one GPU per process by CUDA_VISIBLE_DEVICES) is named by no one: the pair is taken to map, as
// today's drivers allow between processes, and a driver's refusal is the error. Between threads of one process on
// two GPUs the CUDA plugin enables peer access where it maps.
namespace {

struct DeviceOffer {
  std::string runtime, device;          // the runtime's name; the device's host-wide name ("" when none)
  std::vector<std::string> unreachable;  // devices this rank sees that its device cannot reach

  // One field per line: the runtime, the device, then each unreachable device.
  std::vector<uint8_t> encode() const {
    std::string text = runtime + "\n" + device;
    for (const std::string& u : unreachable) text += "\n" + u;
    return {text.begin(), text.end()};
  }
  static DeviceOffer decode(const std::vector<uint8_t>& bytes) {
    std::vector<std::string> lines{{}};
    for (uint8_t b : bytes) {
      if (b == '\n') lines.emplace_back();
      else lines.back() += static_cast<char>(b);
    }
    return {.runtime = lines[0],
            .device = lines.size() > 1 ? lines[1] : std::string(),
            .unreachable = {lines.begin() + static_cast<ptrdiff_t>(std::min<size_t>(lines.size(), 2)), lines.end()}};
  }
  // Symmetric, so both ends of a pair agree.
  bool reaches(const DeviceOffer& o) const {
    auto names = [](const std::vector<std::string>& list, const std::string& d) {
      return !d.empty() && std::find(list.begin(), list.end(), d) != list.end();
    };
    return runtime == o.runtime && !names(unreachable, o.device) && !names(o.unreachable, device);
  }
};

}  // namespace

void Comm::offerDeviceRoute(RankInfo& mine) {
  if (space_.isHost() || !config_.deviceIpc || !space_.device()->hasIpc() || nranks() == 1) return;
  deviceIpc_ = transport::ipc::create(setup_, space_.device(), config_.deviceIpcReduce);
  const DeviceOffer offer{.runtime = mem::runtime()->name(),  // both ends must be of one runtime
                          .device = space_.device()->hostWideId(),
                          .unreachable = space_.device()->unreachablePeers()};
  mine.addresses.push_back({transport::ipc::kName, offer.encode()});
}

void Comm::connectDeviceRoutes(const std::vector<RankInfo>& ranks, Deadline deadline) {
  std::vector<std::optional<DeviceOffer>> offers(static_cast<size_t>(nranks()));
  for (int r = 0; r < nranks(); ++r)
    for (const TransportAddress& a : ranks[static_cast<size_t>(r)].addresses)
      if (a.transport == transport::ipc::kName) offers[static_cast<size_t>(r)] = DeviceOffer::decode(a.bytes);
  auto deviceToDevice = [&](int p, int q) {
    const auto &a = offers[static_cast<size_t>(p)], &b = offers[static_cast<size_t>(q)];
    return a && b && hostOf_[static_cast<size_t>(p)] == hostOf_[static_cast<size_t>(q)] && a->reaches(*b);
  };
  // The chunk of Note [Device IPC chunks], from what every rank published, so that all agree (one that offered none
  // included).
  bool everyPairDeviceToDevice = nranks() > 1;
  for (int p = 0; p < nranks() && everyPairDeviceToDevice; ++p)
    for (int q = p + 1; q < nranks() && everyPairDeviceToDevice; ++q) everyPairDeviceToDevice = deviceToDevice(p, q);
  if (everyPairDeviceToDevice && config_.chunkBytes == 0) deviceChunks_ = {{0, transport::ipc::kChunkBytes}};
  if (deviceIpc_ == nullptr) return;
  for (int p = 0; p < nranks(); ++p)
    if (p != rank() && deviceToDevice(rank(), p)) deviceRoute_[p] = deviceIpc_.get();
  // Creating a pair's page never waits, so every rank creates its higher peers' before it opens its lower ones'.
  for (int p = rank() + 1; p < nranks(); ++p)
    if (deviceRoute_[p] != nullptr) deviceIpc_->connect(p, {}, deadline);
  for (int p = 0; p < rank(); ++p)
    if (deviceRoute_[p] != nullptr) deviceIpc_->accept(p, {}, deadline);
  deviceIpc_->awaitPeers(deadline);  // a page's creator may not leave (and unlink it) before its peer has it
  if (std::any_of(deviceRoute_.begin(), deviceRoute_.end(), [](auto* t) { return t != nullptr; })) {
    inUse_.push_back(deviceIpc_.get());
    CHORUS_INFO(kInit, "{}: device calls reach the peers of this host over {} IPC{}", name(), space_.name(),
                deviceChunks_.empty() ? std::string()
                                      : fmt::format(", in chunks of {} bytes", deviceChunks_.front().chunkBytes));
  }
}

bool Comm::progress() {
  bool moved = false;
  for (transport::Transport* t : inUse_) moved |= t->progress();
  if (!staged_.empty()) moved |= finishStaged();
  // Tagged traffic nobody waits for yet (a message arriving early) is looked at every 16th time only: each look
  // costs the latency path a few loads per peer (8 B AllReduce over shm, 4 ranks: 5.27 against 4.74 us when
  // looked at every time, docs/tagged-p2p.md).
  if (tagged_->needsDriving() || (++taggedLooks_ & 15) == 0) moved |= tagged_->progress();
  return moved;
}

// Note [Staging device memory]:
// Memory the CPU may not touch (a GPU's) reaches a host transport through host memory. A send starts a device
// copy of its bytes to a bounce buffer and is handed to the transport once that copy is done; a receive lands in
// a bounce buffer and starts a copy to the device, and the algorithm sees it done once that copy is. The copies
// run on the device while the host goes on (mem::Device::copyStart: a stream of their own and an event each, for
// CUDA), and progress() moves each message on, so the copy of chunk k+1 overlaps the transport's moving of chunk
// k. Sends to one peer reach the transport in the order the algorithm issued them (copies finish in order, and a
// send waits for any earlier one to the same peer). Bounce buffers are the device's pinned host memory, pooled
// by size class for the communicator's life: the copy engine reads and writes pinned memory at full speed and
// without a second copy, and the pool keeps cudaHostAlloc (milliseconds) off the hot path. While a copy is under
// way a waiting rank yields instead of sleeping in poll: nothing would wake it when the copy ends.
Comm::Staged& Comm::stage(Request* user, size_t len, void* deviceDst, int peer, const OpTag& tag) {
  bounceDevice_ = staging_;  // the communicator's device: the only one its calls may use
  if (len == 0)
    return staged_.emplace_back(Staged{user, {}, nullptr, 0, -1, Staged::Step::Moving, 0, deviceDst, peer, tag});
  const int sizeClass = mem::bounceSizeClass(len);
  uint8_t* bounce = stagingPool_->take(sizeClass);
  return staged_.emplace_back(Staged{user, {}, bounce, len, sizeClass, Staged::Step::Moving, 0, deviceDst, peer, tag});
}

bool Comm::finishStaged() {
  bool moved = false;
  sendBlocked_.assign(static_cast<size_t>(nranks()), 0);
  for (auto it = staged_.begin(); it != staged_.end();) {
    Staged& s = *it;
    bool finished = false;
    if (s.step == Staged::Step::ToHost) {
      if (sendBlocked_[s.peer] || !bounceDevice_->copyDone(s.ticket)) {
        sendBlocked_[s.peer] = 1;
        ++it;
        continue;
      }
      --copying_;
      moved = true;
      if (s.user == nullptr) {
        finished = true;  // its operation failed: nothing to send
      } else {
        s.step = Staged::Step::Moving;
        route_[s.peer]->isend(s.peer, s.bounce, s.len, s.tag, &s.shadow);
      }
    } else if (s.step == Staged::Step::Moving) {
      if (!s.shadow.done) {
        ++it;
        continue;
      }
      moved = true;
      if (s.deviceDst != nullptr && s.user != nullptr) {
        s.step = Staged::Step::ToDevice;
        s.ticket = bounceDevice_->copyStart(s.deviceDst, s.bounce, s.len);
        ++copying_;
      } else {
        finished = true;
      }
    } else {
      if (!bounceDevice_->copyDone(s.ticket)) {
        ++it;
        continue;
      }
      --copying_;
      moved = true;
      finished = true;
    }
    if (!finished) {
      ++it;
      continue;
    }
    if (s.user != nullptr) s.user->done = true;
    if (s.bounce != nullptr) stagingPool_->give(s.sizeClass, s.bounce);
    it = staged_.erase(it);
  }
  return moved;
}

void Comm::sleepOnTransports() {
  if (copying_ > 0) {  // a device copy ends without waking anyone: look again after a nap (a yield here kept a
    std::this_thread::sleep_for(std::chrono::microseconds(20));  // core busy per rank for as long as it ran)
    return;
  }
  std::vector<pollfd> fds;
  for (transport::Transport* t : inUse_) {
    if (!t->armWake()) return;
    fds.push_back({t->waitFd(), POLLIN, 0});
  }
  fds.push_back({abortFd_.get(), POLLIN, 0});
  fds.push_back({kickFd_.get(), POLLIN, 0});
  ::poll(fds.data(), fds.size(), 100);
  if (fds.back().revents & POLLIN) {
    uint64_t n;
    if (::read(kickFd_.get(), &n, sizeof n) < 0) { /* nonblocking: already drained */ }
  }
}

void Comm::isend(int peer, const void* buf, size_t len, const OpTag& tag, Request* req) {
  if (deviceCall_ && deviceRoute_[peer] != nullptr) [[unlikely]] {
    deviceRoute_[peer]->isend(peer, buf, len, tag, req);
  } else if (staging_ != nullptr) [[unlikely]] {  // also when empty: it must not overtake a staged send to the peer
    Staged& s = stage(req, len, nullptr, peer, tag);
    s.step = Staged::Step::ToHost;
    s.ticket = len == 0 ? 0 : staging_->copyStart(s.bounce, buf, len);  // ticket 0: nothing to wait for
    ++copying_;
    finishStaged();  // handed to the transport at once if the copy is done already (no copy engine)
  } else {
    route_[peer]->isend(peer, buf, len, tag, req);
  }
  // Operations run one at a time, so this needs no atomic read-modify-write: a locked add would wait for the
  // store that just published a shared-memory slot to reach the peer's cache line (~0.03 us per 8-byte call).
  bytesSent_.store(bytesSent_.load(std::memory_order_relaxed) + len, std::memory_order_relaxed);
}

void Comm::irecv(int peer, void* buf, size_t len, const OpTag& tag, Request* req) {
  flight_.posted(peer, len);
  if (deviceCall_ && deviceRoute_[peer] != nullptr) [[unlikely]] {
    deviceRoute_[peer]->irecv(peer, buf, len, tag, req);
    return;
  }
  if (staging_ != nullptr && len > 0) [[unlikely]] {
    Staged& s = stage(req, len, buf, peer, tag);
    buf = s.bounce;
    req = &s.shadow;
  }
  route_[peer]->irecv(peer, buf, len, tag, req);
}

// Note [Patience]: a wait spins, then yields, then sleeps on the transports. Spinning pays when the peer answers
// within the spin (a blocking 8-byte call); it costs when the peer is busy elsewhere, above all when this wait runs
// on the worker beside the caller's own computation (DDP's backward: it takes that thread's core). So the spin and
// the yield shrink by half after each wait that lasted longer than the full spin and yield, and grow back by a
// factor of two after each shorter one (judged by its length, not by whether it slept: a shrunk spin sleeps more),
// between 0 and what CHORUS_SPIN_US/CHORUS_YIELD_US say. Waits of one communicator run one at a time.
void Comm::waitFor(FunctionRef<bool()> done, FunctionRef<std::string()> what) {
  using namespace std::chrono;
  Clock::time_point lastMove;  // set at the first look at the clock (idle == 16): most waits never need it
  const auto spin = microseconds(config_.spinUs >> impatience_);
  const auto yield = microseconds(config_.yieldUs >> impatience_);
  Clock::time_point firstLook{};
  // Reading the clock costs more than a look at the transports: only every 16th time while spinning. With no
  // spin (more ranks than cores) the first idle look already yields: the peer we wait for may need our core.
  const unsigned looks = spin.count() > 0 ? 16 : 1;  // a power of two: counted with a mask, not a division
  unsigned idle = 0;  // progress() calls without movement
  bool spinning = true;
  while (!done()) {
    if (aborted_.load(std::memory_order_relaxed)) throwInterrupted(what);
    if (progress()) {
      idle = 0;
      spinning = true;
      continue;
    }
    if (spinning && (++idle & (looks - 1)) != 0) continue;
    auto now = Clock::now();
    if (idle == looks) {  // first look at the clock since something moved; looks + 1 keeps later looks from
      lastMove = now;     // resetting it (once spinning ends, idle stops counting)
      idle = looks + 1;
      if (firstLook == Clock::time_point{}) firstLook = now;
    }
    if (now - lastMove < spin) continue;
    spinning = false;
    if (now - lastMove < spin + yield) {  // let a runnable peer on our core go first, but keep polling
      sched_yield();
      continue;
    }
    if (now - lastMove > duration_cast<Clock::duration>(duration<double>(config_.timeoutSec)))  // only this late
      fail(chorusTimeout, "{}: {} made no progress for {} s (CHORUS_TIMEOUT, or the communicator's timeoutSec); a "
           "peer is stuck or unreachable",
           name(), what(), config_.timeoutSec);
    sleepOnTransports();
  }
  const bool longWait = firstLook != Clock::time_point{} &&
                        Clock::now() - firstLook > microseconds(config_.spinUs + config_.yieldUs);
  if (longWait) impatience_ = std::min(impatience_ + 1, kMaxImpatience);
  else if (impatience_ > 0) --impatience_;
}

void Comm::driveTagged(FunctionRef<bool()> stop) {
  waitFor([&] { return !tagged_->needsDriving() || stop(); }, [&] { return tagged_->describeOldest(); });
}

void Comm::kick() {
  uint64_t one = 1;
  if (::write(kickFd_.get(), &one, sizeof one) < 0) { /* the driver looks at the queue within 100 ms anyway */ }
}

mem::DeviceStream* Comm::defaultStream() {
  std::lock_guard<std::mutex> g(defaultStreamMu_);
  if (defaultStream_ == nullptr && !space_.isHost() && mem::runtime() != nullptr && mem::runtime()->hasStreams()) {
    std::unique_ptr<mem::DeviceStream> s = mem::runtime()->openStream(nullptr);
    if (mem::Space(s->device()) != space_) return nullptr;  // another device's: that thread's to order
    defaultStream_ = std::move(s);
  }
  return defaultStream_.get();
}

uint8_t* Comm::scratch(const mem::Space& space, size_t bytes, int slot) {
  if (!space.isHost()) {
    if (space != space_) [[unlikely]]
      fail(chorusInternalError, "{}: scratch asked of {}, but this communicator works on {}", name(), space.name(),
           space_.name());
    return deviceScratch_->get(bytes, slot);
  }
  if (scratch_.size() <= static_cast<size_t>(slot)) scratch_.resize(slot + 1);
  auto& s = scratch_[slot];
  if (s.size() < bytes) {
    s.clear();
    s.shrink_to_fit();
    s.resize(bytes);
  }
  return s.data();
}

Error Comm::markFailed(const Error& e) {
  bool first = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (failCode_ == chorusSuccess) {
      failCode_ = e.code();
      failure_ = e.what();
      first = true;
    }
  }
  if (first) {
    failed_ = true;
    CHORUS_WARN(kColl, "{}", e.what());
    dumpOnFailure(e.what());
  }
  tellPeers();
  return e;
}

void Comm::throwIfFailed() const {
  if (!failed_.load()) return;
  std::lock_guard<std::mutex> g(mu_);
  throw Error(failCode_, fmt::format("communicator is unusable after an earlier error: {}", failure_));
}

chorusResult_t Comm::asyncError() const {
  std::lock_guard<std::mutex> g(mu_);
  return failCode_;
}

void Comm::abort() {
  userAbort_ = true;
  aborted_ = true;
  uint64_t one = 1;
  if (::write(abortFd_.get(), &one, sizeof one) < 0) { /* the flag alone still stops waiters within 100 ms */ }
  {
    std::lock_guard<std::mutex> g(mu_);
    if (failCode_ == chorusSuccess) {
      failCode_ = chorusInvalidUsage;
      failure_ = fmt::format("{}: communicator was aborted with chorusCommAbort", name());
    }
  }
  failed_ = true;
}

void Comm::startLiveness(const std::vector<RankInfo>& ranks) {
  std::vector<Liveness::Member> members;
  for (const RankInfo& r : ranks) members.push_back({peer(r.rank).name(), r.heartbeat});
  liveness_ = std::make_unique<Liveness>(std::move(heartbeatSocket_), Liveness::Identity{rank(), setup_.commId,
                                         setup_.secret}, std::move(members), config_.peerTimeoutSec, &activity_,
                                         [this](chorusResult_t code, const std::string& why) { failFromOutside(code, why); });
}

std::function<std::string(int member)> Comm::goneAmong(std::vector<int> members) const {
  return [this, members = std::move(members)](int member) -> std::string {
    if (member < 0 || member >= static_cast<int>(members.size())) return "";
    const int r = members[static_cast<size_t>(member)];
    if (r == rank()) return "";
    const transport::PeerInfo& p = peer(r);
    if (p.hostId == peer(rank()).hostId && processGone(p.pid)) return p.name() + " has exited";
    if (liveness_ && liveness_->silent() == r) return p.name() + " was declared silent by the heartbeats";
    return "";
  };
}

void Comm::failFromOutside(chorusResult_t code, const std::string& text) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (failCode_ != chorusSuccess) return;  // broken already: that error stands
    failCode_ = code;
    failure_ = text;
  }
  failed_ = true;
  aborted_ = true;
  CHORUS_WARN(kColl, "{}: {}", name(), text);
  dumpOnFailure(fmt::format("{}: {}", name(), text));
  uint64_t one = 1;
  if (::write(abortFd_.get(), &one, sizeof one) < 0) { /* the flag alone still stops waiters within 100 ms */ }
}

void Comm::throwInterrupted(FunctionRef<std::string()> what) {
  if (userAbort_.load()) fail(chorusInvalidUsage, "{}: {} was interrupted by chorusCommAbort", name(), what());
  chorusResult_t code;
  std::string why;
  {
    std::lock_guard<std::mutex> g(mu_);
    code = failCode_;
    why = failure_;
  }
  fail(code, "{}: {} cannot finish: {}", name(), what(), why);
}

void Comm::tellPeers() {
  if (peersTold_ || transports_.empty()) return;
  peersTold_ = true;
  chorusResult_t code;
  std::string why;
  {
    std::lock_guard<std::mutex> g(mu_);
    code = failCode_;
    why = failure_;
  }
  Deadline deadline = deadlineIn(0.5);
  for (transport::Transport* t : inUse_) t->sendAbort(code, why, deadline);
}

void Comm::shutdown() {
  executor_->drain();
  executor_->stop();  // its worker drives no tagged traffic from here on
  liveness_.reset();  // says goodbye: leaving is not falling silent
  tagged_->failAll(chorusInvalidUsage,
                   fmt::format("{}: the communicator was destroyed while the operation was pending", name()));
  if (failed_.load())
    tellPeers();  // e.g. aborted while idle: the peers learn why instead of seeing a dead connection
  else
    for (transport::Transport* t : inUse_) t->close(deadlineIn(1.0));
}

void Comm::setLastError(const std::string& text) {
  std::lock_guard<std::mutex> g(mu_);
  lastError_ = text;
}

// Each calling thread gets its own copy: another thread's call (or a failure being recorded) never rewrites the
// text a caller is still reading.
const char* Comm::lastError() {
  thread_local std::string* copy = nullptr;
  std::lock_guard<std::mutex> g(mu_);
  return keepThreadText(copy, lastError_);
}

std::string Comm::flightDump(const std::string& reason) const {
  std::string failure;
  {
    std::lock_guard<std::mutex> g(mu_);
    failure = failure_;
  }
  return fmt::format(R"({{"chorus_flight_recorder":1,"comm":"{:016x}","rank":{},"nranks":{},"name":"{}","reason":"{}",)"
                     R"("failure":"{}","ops":{}}})",
                     setup_.commId, rank(), nranks(), jsonEscape(name()), jsonEscape(reason), jsonEscape(failure),
                     flight_.json());
}

void Comm::dumpOnFailure(const std::string& why) {
  if (flight_.on()) log::writeLine(flightDump("failure: " + why));
}

}  // namespace chorus
