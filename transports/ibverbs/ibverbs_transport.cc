// Note [ibverbs connections]:
//  A rank opens one port (the ports CHORUS_IB_HCA selects, the rank's number picking among them so that the ranks
//  of a host spread over its ports) and listens on a TCP socket whose address is the transport's address. For
//  each pair, the lower rank's connect() creates its queue pairs, moves them to INIT, posts their receives and
//  sends a Hello over TCP: its queue pair numbers and packet sequence numbers, its LID, GID and MTU, and the
//  protocol's settings, sealed with the communicator's secret (transports/handshake.h). It does not wait, or
//  ranks 0, 1, 2 would wait in a circle (the UCX transport has the same rule). The higher rank's accept() takes
//  that Hello, creates and readies its own queue pairs up to RTR (they can receive), and answers with the same
//  fields. settle() finishes both ends: the lower rank takes the answer, moves to RTR and RTS and says it is
//  ready (one byte); the higher rank moves to RTS when it reads that byte. So no side sends before the other can
//  receive: a packet for a queue pair that is not in RTR yet would be dropped and retried until the retry count
//  ran out. A pair whose protocol settings differ (CHORUS_IB_* set differently on two ranks) or whose link layers
//  differ is refused at once, naming both ranks.
//
//  The TCP connection stays open as the peer's watch: when the peer's process dies its kernel closes it, which a
//  queue pair with nothing in flight would never notice. A peer that closes after its goodbye has left cleanly;
//  one that closes with messages still owed to this rank has died, and the transfers waiting for it fail naming it.
#include "transports/ibverbs/ibverbs_transport.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cstring>
#include <map>
#include <optional>
#include <unordered_map>

#include "lib/base/error.h"
#include "lib/base/log.h"
#include "lib/base/socket.h"
#include "transports/handshake.h"
#include "transports/ibverbs/engine.h"
#include "transports/ibverbs/verbs.h"

namespace chorus::transport::ibverbs {

namespace {

constexpr uint32_t kHelloMagic = 0x43484942;  // "CHIB"
constexpr uint32_t kWireVersion = 1;
constexpr int kMaxQps = 16;
constexpr uint8_t kReady = 'R';
constexpr unsigned kWatchEvery = 32;  // progress() calls between looks at the peers' TCP connections

// The handshake, both ways (the answer has the same layout). No padding: the seal's MAC covers every byte.
struct Hello {
  uint32_t magic, version;
  uint64_t commId;
  int32_t fromRank, toRank;
  uint32_t qps, credits, advertised, sendQueueDepth;
  uint64_t eagerBytes, stripeBytes, maxWriteBytes;
  uint32_t qpn[kMaxQps], psn[kMaxQps];
  uint8_t gid[16];
  uint16_t lid;
  uint8_t mtu, ethernet;
  uint32_t pad;
  Seal seal;
};
static_assert(std::has_unique_object_representations_v<Hello>);

ChannelConfig configOf(const Hello& h) {
  ChannelConfig c;
  c.qps = int(h.qps);
  c.credits = int(h.credits);
  c.advertised = int(h.advertised);
  c.sendQueueDepth = int(h.sendQueueDepth);
  c.eagerBytes = h.eagerBytes;
  c.stripeBytes = h.stripeBytes;
  c.maxWriteBytes = h.maxWriteBytes;
  return c;
}

class IbverbsTransport final : public Transport {
 public:
  IbverbsTransport(const Setup& setup, const Settings& settings)
      : setup_(setup),
        settings_(settings),
        port_(choosePort(setup, settings), settings.gidIndex, cqDepth(setup, settings)),
        pinned_(port_, false),
        registrar_(port_, port_.onDemandPaging()),
        // A pinned registration kept after its transfer may outlive the mapping it was made for (memory freed and
        // mapped again at the same address): only on-demand paging, which follows the page tables, is cached.
        cache_(registrar_, port_.onDemandPaging() ? settings.regCacheBytes : 0),
        acceptor_("ibverbs", setup, sizeof(Hello), [this](const uint8_t* h, const Fd&) { return check(h); }) {
    if (settings.channel.qps < 1 || settings.channel.qps > kMaxQps)
      fail(chorusInvalidArgument, "ibverbs: {} queue pairs per peer: expected 1..{}", settings.channel.qps, kMaxQps);
    std::string ifname;
    listener_ = listenForPeers(setup, &listenAddr_, &ifname);
    epoll_ = Fd(epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_) failErrno("epoll_create1");
    watch(port_.eventFd(), kEventsKey);
    watch(port_.asyncFd(), kAsyncKey);
    CHORUS_INFO(kNet, "ibverbs on {}{}, handshakes on {} ({})", port_.name(),
                port_.onDemandPaging() ? ", on-demand paging" : "", listenAddr_.str(), ifname);
  }

  ~IbverbsTransport() override {
    conns_.clear();  // channels and queue pairs before the cache, the registrar and the port
  }

  const char* name() const override { return "ibverbs"; }

  std::vector<uint8_t> address() const override { return packAddress(listenAddr_); }

  void connect(int peer, const std::vector<uint8_t>& address, Deadline deadline) override {
    const SockAddr to = unpackAddress(address, "ibverbs", peer);
    Conn& c = open(peer);
    c.sock = connectTo(to, deadline);
    Hello h = helloFor(c, peer);
    sendHello(c.sock.get(), &h, sizeof h, -1, setup_.peers[size_t(peer)].name());
    c.state = Conn::State::AwaitAnswer;
  }

  void accept(int peer, const std::vector<uint8_t>&, Deadline deadline) override {
    while (arrived_.count(peer) == 0) {
      if (Clock::now() >= deadline)
        fail(chorusTimeout, "{}: {} did not connect over ibverbs before the init deadline", self(), peerName(peer));
      acceptor_.poll(listener_.get(), deadline, [&](HelloAcceptor::Arrival&& a) {
        const Hello h = helloOf<Hello>(a);
        arrived_.emplace(h.fromRank, Arrival{std::move(a.fd), h});
      });
    }
    Arrival a = std::move(arrived_.at(peer));
    arrived_.erase(peer);
    Conn& c = open(peer);
    c.sock = std::move(a.sock);
    c.peerHello = a.hello;
    // Up to RTR only: this side may receive from now on; it sends once the peer says it is ready.
    c.qps->connect(remoteOf(a.hello), settings_.qp, /*sendToo=*/false);
    Hello h = helloFor(c, peer);
    sendAll(c.sock.get(), &h, sizeof h, deadline, peerName(peer));
    c.state = Conn::State::AwaitReady;
  }

  void settle(Deadline deadline) override {
    for (auto& [peer, c] : conns_) {
      if (c->state == Conn::State::AwaitAnswer) {
        Hello h{};
        recvAll(c->sock.get(), &h, sizeof h, deadline, peerName(peer));
        if (std::string problem = helloProblem(h, kHelloMagic, kWireVersion, setup_, peer);
            !problem.empty())
          fail(chorusRemoteError, "{}: {} answered the ibverbs handshake wrongly: {}", self(), peerName(peer),
               problem);
        compatible(h);
        c->qps->connect(remoteOf(h), settings_.qp, /*sendToo=*/true);
        sendAll(c->sock.get(), &kReady, 1, deadline, peerName(peer));
        c->state = Conn::State::Ready;
        CHORUS_INFO(kNet, "{} connected to {} over ibverbs ({} queue pairs)", self(), peerName(peer),
                    c->qps->size());
      }
    }
    for (auto& [peer, c] : conns_) {
      if (c->state == Conn::State::AwaitReady) {
        uint8_t ready = 0;
        recvAll(c->sock.get(), &ready, 1, deadline, peerName(peer));
        if (ready != kReady)
          fail(chorusRemoteError, "{}: {} broke the ibverbs handshake", self(), peerName(peer));
        c->qps->connect(remoteOf(c->peerHello), settings_.qp, /*sendToo=*/true);
        c->state = Conn::State::Ready;
        CHORUS_INFO(kNet, "{} accepted {} over ibverbs ({} queue pairs)", self(), peerName(peer), c->qps->size());
      }
    }
    for (auto& [peer, c] : conns_)
      if (!c->watched) {
        setNonBlocking(c->sock.get());
        watch(c->sock.get(), uint64_t(peer));
        c->watched = true;
      }
  }

  void stopListening() override {
    listener_.reset();
    acceptor_.dropPending();
    arrived_.clear();
  }

  void isend(int peer, const void* buf, size_t len, const OpTag& tag, Request* req) override {
    guarded(peer, [&](Channel& ch) {
      alive(peer);
      ch.isend(buf, len, tag, req);
    });
  }

  void irecv(int peer, void* buf, size_t len, const OpTag& tag, Request* req) override {
    guarded(peer, [&](Channel& ch) {
      if (!optional(tag, req)) alive(peer);
      ch.irecv(buf, len, tag, req);
    });
  }

  bool progress() override {
    if (failure_) std::rethrow_exception(failure_);
    bool moved = pollCompletions();
    if (++spins_ % kWatchEvery == 0) watchPeers();
    for (auto& [peer, c] : conns_)
      guarded(peer, [&](Channel& ch) { moved |= ch.advance(); });
    return moved;
  }

  int waitFd() const override { return epoll_.get(); }

  // Asks the completion queue for an event at its next completion, then looks once more: a completion that came
  // before the request would raise no event.
  bool armWake() override {
    port_.drainEvents();
    port_.armEvents();
    return !pollCompletions();
  }

  void sendAbort(chorusResult_t code, const std::string& text, Deadline deadline) override {
    for (auto& [peer, c] : conns_) c->channel->abort(code, text);
    drive(deadline);
  }

  void close(Deadline deadline) override {
    for (auto& [peer, c] : conns_) c->channel->bye();
    drive(deadline);
    conns_.clear();
    byQpn_.clear();
  }

 private:
  struct Conn {
    enum class State { AwaitAnswer, AwaitReady, Ready };
    std::unique_ptr<QueuePairs> qps;
    std::unique_ptr<Channel> channel;  // after qps: destroyed first
    Fd sock;
    Hello peerHello{};
    State state = State::AwaitAnswer;
    bool watched = false;  // its TCP connection is in the epoll set
    bool gone = false;     // its TCP connection closed
    bool broken = false;   // failed while closing: left alone
  };
  struct Arrival {
    Fd sock;
    Hello hello;
  };
  static constexpr uint64_t kEventsKey = ~uint64_t(0), kAsyncKey = ~uint64_t(1);

  static PortInfo choosePort(const Setup& setup, const Settings& s) {
    const std::vector<PortInfo> ports = selectPorts(s.hca, listPorts());
    return ports[size_t(setup.rank) % ports.size()];
  }

  // Every work request of every peer's queue pairs may complete at once.
  static int cqDepth(const Setup& setup, const Settings& s) {
    long perPeer = 0;
    for (int q = 0; q < s.channel.qps; ++q) perPeer += s.channel.sendQueueDepth + recvSlots(s.channel, q);
    return int(std::min<long>(perPeer * std::max(setup.nranks - 1, 1), 1 << 22));
  }

  std::string self() const { return setup_.peers.empty() ? "this rank" : setup_.peers[size_t(setup_.rank)].name(); }
  std::string peerName(int peer) const { return setup_.peers[size_t(peer)].name(); }

  void watch(int fd, uint64_t key) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = key;
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) failErrno("epoll_ctl");
  }

  Conn& open(int peer) {
    const ChannelConfig& cfg = settings_.channel;
    auto c = std::make_unique<Conn>();
    int recvDepth = 0;
    for (int q = 0; q < cfg.qps; ++q) recvDepth = std::max(recvDepth, recvSlots(cfg, q));
    c->qps = std::make_unique<QueuePairs>(port_, cfg.qps, cfg.sendQueueDepth, recvDepth, peerName(peer));
    c->channel = std::make_unique<Channel>(cfg, *c->qps, pinned_, cache_, self(), peerName(peer));
    c->channel->start();  // receives posted in INIT, before the peer learns the queue pair numbers
    for (int q = 0; q < c->qps->size(); ++q) byQpn_[c->qps->qpn(q)] = {peer, q};
    return *conns_.emplace(peer, std::move(c)).first->second;
  }

  Hello helloFor(const Conn& c, int peer) const {
    const ChannelConfig& cfg = settings_.channel;
    Hello h{};
    h.magic = kHelloMagic;
    h.version = kWireVersion;
    h.commId = setup_.commId;
    h.fromRank = setup_.rank;
    h.toRank = peer;
    h.qps = uint32_t(cfg.qps);
    h.credits = uint32_t(cfg.credits);
    h.advertised = uint32_t(cfg.advertised);
    h.sendQueueDepth = uint32_t(cfg.sendQueueDepth);
    h.eagerBytes = cfg.eagerBytes;
    h.stripeBytes = cfg.stripeBytes;
    h.maxWriteBytes = cfg.maxWriteBytes;
    for (int q = 0; q < c.qps->size(); ++q) {
      h.qpn[q] = c.qps->qpn(q);
      h.psn[q] = c.qps->psn(q);
    }
    std::memcpy(h.gid, port_.gid().data(), 16);
    h.lid = port_.lid();
    h.mtu = uint8_t(port_.local().mtu);
    h.ethernet = port_.local().ethernet ? 1 : 0;
    seal(h, setup_);
    return h;
  }

  std::vector<RemoteQp> remoteOf(const Hello& h) const {
    std::vector<RemoteQp> r(h.qps);
    for (size_t q = 0; q < r.size(); ++q) {
      r[q].qpn = h.qpn[q];
      r[q].psn = h.psn[q];
      r[q].lid = h.lid;
      std::memcpy(r[q].gid.data(), h.gid, 16);
      r[q].mtu = ibv_mtu(h.mtu);
    }
    return r;
  }

  // The ibverbs checks of a Hello that passed the common ones: settings and link layer must agree.
  void compatible(const Hello& h) const {
    if (configOf(h) != settings_.channel)
      fail(chorusInvalidUsage, "{} uses other ibverbs settings than {}: {} there, {} here; set CHORUS_IB_* alike on "
           "every rank", peerName(h.fromRank), self(), describe(configOf(h)), describe(settings_.channel));
    if ((h.ethernet != 0) != port_.local().ethernet)
      fail(chorusInvalidUsage, "{} is on an {} port but {} is on {} ({}): the two cannot connect over ibverbs",
           peerName(h.fromRank), h.ethernet ? "Ethernet (RoCE)" : "InfiniBand", self(),
           port_.local().ethernet ? "Ethernet (RoCE)" : "InfiniBand", port_.name());
  }

  std::string check(const uint8_t* bytes) {
    Hello h;
    std::memcpy(&h, bytes, sizeof h);
    if (std::string problem = helloProblem(h, kHelloMagic, kWireVersion, setup_); !problem.empty()) return problem;
    if (arrived_.count(h.fromRank) != 0 || conns_.count(h.fromRank) != 0) return "a second connection from that rank";
    compatible(h);
    if (h.qps != uint32_t(settings_.channel.qps)) return "queue pair count differs";
    return "";
  }

  // Runs f on peer's channel; the first error sticks (after it the streams no longer line up).
  template <typename F>
  void guarded(int peer, F&& f) {
    if (failure_) std::rethrow_exception(failure_);
    auto it = conns_.find(peer);
    if (it == conns_.end()) fail(chorusInternalError, "ibverbs: no connection to rank {}", peer);
    try {
      f(*it->second->channel);
    } catch (...) {
      failure_ = std::current_exception();
      throw;
    }
  }

  // Takes every completion waiting and hands each to each(peer, completion); true if there was any.
  template <typename Each>
  bool drainCompletions(Each&& each) {
    bool moved = false;
    ibv_wc wcs[32];
    for (;;) {
      const int n = ibv_poll_cq(port_.cq(), 32, wcs);
      if (n < 0) fail(chorusSystemError, "ibverbs: ibv_poll_cq on {} failed", port_.name());
      for (int i = 0; i < n; ++i)
        if (auto it = byQpn_.find(wcs[i].qp_num); it != byQpn_.end())  // else a queue pair already closed
          each(it->second.first, toCompletion(wcs[i], it->second.second));
      moved |= n > 0;
      if (n < 32) return moved;
    }
  }

  bool pollCompletions() {
    return drainCompletions([&](int peer, const Completion& c) {
      guarded(peer, [&](Channel& ch) { ch.onCompletion(c); });
    });
  }

  // Whether the peer closed its TCP connection (it left, or its process died). Never blocks.
  static bool peerClosed(const Conn& c) {
    uint8_t b;
    const ssize_t r = ::recv(c.sock.get(), &b, 1, MSG_DONTWAIT | MSG_PEEK);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

  // A peer whose connection closed without a goodbye died: nothing more goes to it or comes from it.
  void alive(int peer) const {
    const Conn& c = *conns_.at(peer);
    if (c.gone && !c.channel->peerSaidBye())
      fail(chorusRemoteError, "{}: {} died: its connection closed", self(), peerName(peer));
  }

  // Looks at the peers' TCP connections: one that closed belongs to a peer that left or died.
  void watchPeers() {
    epoll_event evs[64];
    const int n = epoll_wait(epoll_.get(), evs, 64, 0);
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u64 == kEventsKey) continue;
      if (evs[i].data.u64 == kAsyncKey) {
        deviceEvents();
        continue;
      }
      const int peer = int(evs[i].data.u64);
      Conn& c = *conns_.at(peer);
      if (c.gone || !peerClosed(c)) continue;
      c.gone = true;
      epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.sock.get(), nullptr);
      // Its goodbye, if it said one, may still wait in the completion queue.
      pollCompletions();
      if (c.channel->busy() && !c.channel->peerSaidBye())
        guarded(peer, [&](Channel&) {
          fail(chorusRemoteError, "{}: {} died: its connection closed while messages with it were under way",
               self(), peerName(peer));
        });
    }
  }

  // The device's own reports: a port that went down fails every peer; a queue pair's fatal error fails its peer.
  void deviceEvents() {
    Port::AsyncEvent e;
    while (port_.nextAsyncEvent(&e)) {
      const char* what = ibv_event_type_str(e.type);
      if (e.type == IBV_EVENT_PORT_ERR || e.type == IBV_EVENT_DEVICE_FATAL) {
        if (!failure_)
          failure_ = std::make_exception_ptr(Error(chorusRemoteError, fmt::format(
              "{}: {} reported {}: every connection over it is lost", self(), port_.name(), what)));
      } else if (e.type == IBV_EVENT_QP_FATAL || e.type == IBV_EVENT_QP_REQ_ERR ||
                 e.type == IBV_EVENT_QP_ACCESS_ERR) {
        auto it = byQpn_.find(e.qpNum);
        if (it != byQpn_.end() && !failure_)
          failure_ = std::make_exception_ptr(Error(chorusRemoteError, fmt::format(
              "{}: connection to {} failed: its queue pair {} went to the error state ({})", self(),
              peerName(it->second.first), it->second.second, what)));
      } else {
        CHORUS_DEBUG(kNet, "{}: {}: {}", self(), port_.name(), what);
      }
    }
    if (failure_) std::rethrow_exception(failure_);
  }

  // Until every connection's goodbye or abort is posted and done, or its peer is gone, or the deadline: steps each
  // connection that still works, whatever happened to the others (an abort must reach every peer that can hear it).
  void drive(Deadline deadline) {
    auto finished = [&] {
      for (auto& [peer, c] : conns_)
        if (!c->channel->closed() && !c->gone && !c->broken) return false;
      return true;
    };
    auto step = [&](Conn& c, auto&& f) {
      if (c.broken) return;
      try {
        f(*c.channel);
      } catch (const Error& e) {
        c.broken = true;
        CHORUS_DEBUG(kNet, "{}: while closing over ibverbs: {}", self(), e.what());
      }
    };
    while (!finished() && Clock::now() < deadline) {
      bool moved = false;
      try {
        moved = drainCompletions([&](int peer, const Completion& done) {
          step(*conns_.at(peer), [&](Channel& ch) { ch.onCompletion(done); });
        });
      } catch (const Error& e) {  // the completion queue itself failed: nothing more can move
        CHORUS_DEBUG(kNet, "{}: while closing over ibverbs: {}", self(), e.what());
        return;
      }
      for (auto& [peer, c] : conns_) {
        step(*c, [&](Channel& ch) { moved |= ch.advance(); });
        if (!c->gone && c->watched && peerClosed(*c)) c->gone = true;
      }
      if (!moved) {
        pollfd p{epoll_.get(), POLLIN, 0};
        port_.drainEvents();
        port_.armEvents();
        ::poll(&p, 1, 10);
      }
    }
  }

  const Setup& setup_;
  const Settings settings_;
  Port port_;
  VerbsRegistrar pinned_;     // the engine's slots: registered once, used all the time
  VerbsRegistrar registrar_;  // users' buffers: on demand where the device can
  RegCache cache_;
  Fd listener_;
  SockAddr listenAddr_;
  Fd epoll_;
  HelloAcceptor acceptor_;
  std::map<int, Arrival> arrived_;
  std::map<int, std::unique_ptr<Conn>> conns_;
  std::unordered_map<uint32_t, std::pair<int, int>> byQpn_;  // queue pair number -> (peer, index)
  std::exception_ptr failure_;
  unsigned spins_ = 0;
};

}  // namespace

std::unique_ptr<Transport> create(const Setup& setup, const Settings& settings) {
  return std::make_unique<IbverbsTransport>(setup, settings);
}

}  // namespace chorus::transport::ibverbs
