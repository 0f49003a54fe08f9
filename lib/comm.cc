#include "lib/comm.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdlib>

#include "lib/bootstrap.h"
#include "lib/error.h"
#include "lib/log.h"
#include "transports/tcp/tcp_transport.h"

namespace chorus {

Comm::Comm(int nranks, int rank, const UniqueIdData& root, const Config& config) : config_(config) {
  log::LogRankScope scope(rank);
  for (const EnvSpec& e : envTable())
    if (const char* v = std::getenv(e.name))
      CHORUS_INFO(kEnv, "{}={}", e.name, std::string(e.name) == "CHORUS_SECRET" ? "(set, not shown)" : v);
  Deadline deadline = deadlineIn(config_.initTimeoutSec);
  setup_.rank = rank;
  setup_.nranks = nranks;
  setup_.secret = root.secret;
  setup_.nsocks = config_.nsocks;
  setup_.socketIfname = config_.socketIfname;
  abortFd_ = Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!abortFd_) failErrno("eventfd");
  tcp_ = transport::tcp::create(setup_);

  RankInfo mine;
  mine.rank = rank;
  mine.nranks = nranks;
  mine.pid = getpid();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  mine.host = host;
  mine.hostId = hostIdentity(config_.hostId);
  mine.address = tcp_->address();
  BootstrapResult boot = exchangeWithRoot(root, mine, deadline);
  setup_.commId = boot.commId;
  for (const RankInfo& r : boot.ranks) setup_.peers.push_back({r.rank, r.pid, r.host, r.hostId});

  chooseSpin();
  sendSeq_.assign(nranks, 0);
  recvSeq_.assign(nranks, 0);
  route_.assign(nranks, nullptr);
  std::vector<std::vector<uint8_t>> addresses;
  for (const RankInfo& r : boot.ranks) addresses.push_back(r.address);
  connectPeers(addresses, deadline);
  executor_ = std::make_unique<Executor>(*this);
  CHORUS_INFO(kInit, "communicator ready: rank {} of {} on {}, commId {:016x}; transport tcp to every peer", rank,
              nranks, host, setup_.commId);
  CHORUS_INFO(kColl, "algorithms: AllReduce {}; ReduceScatter/AllGather ring; Broadcast/Reduce pipelined chain; "
              "AllToAll/Send/Recv direct; Barrier dissemination",
              config_.algo == Algo::Ring ? "ring (CHORUS_ALGO=RING)" : "recursive doubling up to 256 KiB, halving-doubling up to 2 MiB (4+ ranks), ring above");
}

Comm::~Comm() = default;

// Busy spinning only pays when the peer we wait for has a core of its own. With more ranks on this host than
// cores (the normal case of tests here) a spinning rank steals the time slice of the rank it waits for, so it
// only polls between sched_yield calls (CHORUS_YIELD_US) before it sleeps. Measured, 4 ranks on 2 cores, 8 B
// allreduce: 124-131 us spinning 50 us, 98 us sleeping at once, 44-47 us yielding for 200 us; 8 ranks: 459 us
// sleeping at once, 172 us yielding.
void Comm::chooseSpin() {
  if (config_.spinUs >= 0) return;
  int local = 0;
  for (const auto& p : setup_.peers) local += p.hostId == setup_.peers[rank()].hostId ? 1 : 0;
  cpu_set_t set;
  int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  config_.spinUs = local > cores ? 0 : 50;
  CHORUS_INFO(kInit, "{} ranks on this host, {} cores: waiting ranks spin {} us before sleeping", local, cores,
              config_.spinUs);
}

void Comm::connectPeers(const std::vector<std::vector<uint8_t>>& addresses, Deadline deadline) {
  // Lower rank connects, higher accepts. Connecting first to every higher rank never blocks on the peer's
  // progress (the kernel completes the TCP handshake), so every rank can then accept in order.
  for (int p = rank() + 1; p < nranks(); ++p) tcp_->connect(p, addresses[p], deadline);
  for (int p = 0; p < rank(); ++p) tcp_->accept(p, deadline);
  for (int p = 0; p < nranks(); ++p)
    if (p != rank()) route_[p] = tcp_.get();
}

void Comm::isend(int peer, const void* buf, size_t len, const OpTag& tag, Request* req) {
  route_[peer]->isend(peer, buf, len, tag, req);
  bytesSent_.fetch_add(len, std::memory_order_relaxed);
}

void Comm::irecv(int peer, void* buf, size_t len, const OpTag& tag, Request* req) {
  route_[peer]->irecv(peer, buf, len, tag, req);
}

void Comm::waitUntil(const std::function<bool()>& done, const OpTag& tag) {
  using namespace std::chrono;
  auto lastMove = Clock::now();
  const auto spin = microseconds(config_.spinUs);
  const auto yield = microseconds(config_.yieldUs);
  const auto timeout = duration_cast<Clock::duration>(duration<double>(config_.timeoutSec));
  while (!done()) {
    if (aborted_.load(std::memory_order_relaxed))
      fail(chorusInvalidUsage, "{}: {} was interrupted by chorusCommAbort", name(), transport::describe(tag));
    if (tcp_->progress()) {
      lastMove = Clock::now();
      continue;
    }
    auto now = Clock::now();
    if (now - lastMove < spin) continue;
    if (now - lastMove < spin + yield) {  // let a runnable peer on our core go first, but keep polling
      sched_yield();
      continue;
    }
    if (now - lastMove > timeout)
      fail(chorusTimeout, "{}: {} made no progress for {} s (CHORUS_TIMEOUT); a peer is stuck or unreachable",
           name(), transport::describe(tag), config_.timeoutSec);
    pollfd p[2] = {{tcp_->waitFd(), POLLIN, 0}, {abortFd_.get(), POLLIN, 0}};
    ::poll(p, 2, 100);
  }
}

uint8_t* Comm::scratch(size_t bytes, int slot) {
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

void Comm::tellPeers() {
  if (peersTold_ || !tcp_) return;
  peersTold_ = true;
  chorusResult_t code;
  std::string why;
  {
    std::lock_guard<std::mutex> g(mu_);
    code = failCode_;
    why = failure_;
  }
  tcp_->sendAbort(code, why, deadlineIn(0.5));
}

void Comm::shutdown() {
  executor_->drain();
  if (failed_.load())
    tellPeers();  // e.g. aborted while idle: the peers learn why instead of seeing a dead connection
  else
    tcp_->close(deadlineIn(1.0));
}

void Comm::setLastError(const std::string& text) {
  std::lock_guard<std::mutex> g(mu_);
  lastError_ = text;
}

const char* Comm::lastError() {
  std::lock_guard<std::mutex> g(mu_);
  lastErrorOut_ = lastError_;
  return lastErrorOut_.c_str();
}

}  // namespace chorus
