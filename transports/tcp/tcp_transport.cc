#include "transports/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <utility>

#include "lib/base/env.h"
#include "lib/base/error.h"
#include "lib/base/log.h"
#include "lib/base/socket.h"
#include "transports/handshake.h"
#include "transports/tcp/tcp_socket.h"
#include "transports/tcp/wire.h"

namespace chorus::transport::tcp {

namespace {

constexpr EnvSpec kEnv[] = {
    {"CHORUS_NSOCKS", "int", "1", "TCP connections per peer; large messages are split across them (1..16)"},
};

class TcpTransport final : public Transport {
 public:
  TcpTransport(const Setup& setup, int nsocks)
      : setup_(setup), nsocks_(nsocks), acceptor_("tcp", setup, sizeof(Hello), [this](const uint8_t* h, const Fd&) {
          return check(helloOf(h));
        }) {
    std::string ifname;
    listener_ = listenForPeers(setup, &listenAddr_, &ifname);
    epoll_ = Fd(epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_) failErrno("epoll_create1");
    CHORUS_DEBUG(kNet, "tcp listening on {} ({})", listenAddr_.str(), ifname);
  }

  ~TcpTransport() override = default;

  const char* name() const override { return "tcp"; }

  std::vector<uint8_t> address() const override { return packAddress(listenAddr_); }

  void connect(int peer, const std::vector<uint8_t>& address, Deadline deadline) override {
    const SockAddr to = unpackAddress(address, "tcp", peer);
    for (int i = 0; i < connections(); ++i) {
      Fd fd = connectTo(to, deadline);
      Hello h{kHelloMagic, kWireVersion, setup_.commId, setup_.rank, i, nsocks_, peer, {}};
      seal(h, setup_);
      sendHello(fd.get(), &h, sizeof h, -1, setup_.peers[peer].name());
      addSocket(peer, std::move(fd));
    }
    CHORUS_INFO(kNet, "connected to {} at {} over tcp ({} data connections)", setup_.peers[peer].name(), to.str(),
                nsocks_);
  }

  void stopListening() override {
    listener_.reset();
    acceptor_.dropPending();
    arrived_.clear();  // none is left for a peer: every accept() has returned
  }

  void accept(int peer, const std::vector<uint8_t>&, Deadline deadline) override {
    while (static_cast<int>(arrived_[peer].size()) < connections()) {
      if (Clock::now() >= deadline)
        fail(chorusTimeout, "{}: {} did not connect before the init deadline", self().name(),
             setup_.peers[peer].name());
      acceptor_.poll(listener_.get(), deadline, [&](HelloAcceptor::Arrival&& a) {
        const Hello h = transport::helloOf<Hello>(a);
        arrived_[h.fromRank][h.sockIndex] = std::move(a.fd);
      });
    }
    auto& socks = arrived_[peer];
    for (int i = 0; i < connections(); ++i) addSocket(peer, std::move(socks.at(i)));
    arrived_.erase(peer);
    CHORUS_INFO(kNet, "accepted {} over tcp ({} data connections)", setup_.peers[peer].name(), nsocks_);
  }

  void isend(int peer, const void* buf, size_t len, const OpTag& tag, Request* req) override {
    auto& socks = conns_.at(peer);
    const int first = messageClass(tag) == 0 ? 0 : nsocks_;  // tagged messages: a connection of their own
    int parts = first == 0 ? partsFor(len, static_cast<size_t>(nsocks_)) : 1;
    req->done = false;
    req->pendingParts = parts;
    for (int i = 0; i < parts; ++i) {
      auto [off, plen] = partRange(len, parts, i);
      WireHeader h{};
      h.magic = kFrameMagic;
      h.type = FrameType::Data;
      h.kind = static_cast<uint8_t>(tag.kind);
      h.dtype = tag.dtype;
      h.redop = tag.redop;
      h.root = tag.root;
      h.seq = tag.seq;
      h.count = tag.count;
      h.msgLen = len;
      h.partOffset = off;
      h.partLen = plen;
      socks[first + i]->queueSend(h, static_cast<const uint8_t*>(buf) + off, req);
      explained(peer, [&] { socks[first + i]->flush(); });
    }
  }

  void irecv(int peer, void* buf, size_t len, const OpTag& tag, Request* req) override {
    auto& socks = conns_.at(peer);
    const int first = messageClass(tag) == 0 ? 0 : nsocks_;
    int parts = first == 0 ? partsFor(len, static_cast<size_t>(nsocks_)) : 1;
    req->done = false;
    req->pendingParts = parts;
    for (int i = 0; i < parts; ++i) {
      auto [off, plen] = partRange(len, parts, i);
      socks[first + i]->queueRecv(RecvPart{static_cast<uint8_t*>(buf) + off, len, off, plen, tag, req});
    }
  }

  bool progress() override {
    // Latency path: while at most two receives are waiting and no send is blocked, try them directly and ask
    // epoll only every kEpollEvery rounds (hang-ups, other peers): one syscall per spin instead of two.
    int waiting = 0;
    bool blocked = false;
    for (auto& [peer, socks] : conns_)
      for (auto& s : socks) {
        waiting += s->recvExpected() ? 1 : 0;
        blocked |= s->sendBlocked();
      }
    if (waiting > 2 || blocked || ++spins_ % kEpollEvery == 0) {
      epoll_event evs[64];
      int n = epoll_wait(epoll_.get(), evs, 64, 0);
      for (int i = 0; i < n; ++i) {
        auto& [peer, idx] = sockIndex_[evs[i].data.u64];
        conns_.at(peer)[idx]->onEvents(evs[i].events);
      }
    } else {
      for (auto& [peer, socks] : conns_)
        for (auto& s : socks)
          if (s->recvExpected()) s->onEvents(EPOLLIN);
    }
    // Reads first: an abort frame from a failing peer explains a send error that may follow on its socket.
    // Control connections first: a peer's abort reason must win over the broken data connection it causes.
    bool moved = false;
    for (auto& [peer, socks] : conns_) moved |= socks.back()->drain();
    for (auto& entry : conns_)  // not a structured binding: clang 14 cannot capture one in a lambda
      explained(entry.first, [&] {
        for (auto& s : entry.second) moved |= s->drain();
      });
    for (auto& entry : conns_)
      explained(entry.first, [&] {
        for (auto& s : entry.second) moved |= s->flush();
      });
    return moved;
  }

  int waitFd() const override { return epoll_.get(); }
  bool armWake() override { return true; }  // the kernel makes the epoll set readable by itself

  void sendAbort(chorusResult_t code, const std::string& text, Deadline deadline) override {
    std::string t = text.substr(0, kMaxAbortText);
    WireHeader h{};
    h.magic = kFrameMagic;
    h.type = FrameType::Abort;
    h.code = static_cast<uint32_t>(code);
    h.partLen = t.size();
    for (auto& [peer, socks] : conns_) {
      if (!socks.back()->writeControl(h, t, deadline))
        CHORUS_DEBUG(kNet, "could not tell {} why this rank failed", setup_.peers[peer].name());
      socks.back()->shutdownWrite();
      for (size_t i = 0; i + 1 < socks.size(); ++i) socks[i]->closeHard();
    }
  }

  void close(Deadline deadline) override {
    WireHeader h{};
    h.magic = kFrameMagic;
    h.type = FrameType::Bye;
    for (auto& [peer, socks] : conns_)
      for (auto& sock : socks) sock->writeControl(h, "", deadline);
    conns_.clear();
  }

 private:
  const PeerInfo& self() const { return setup_.peers[setup_.rank]; }
  // Per peer: nsocks_ data connections, then one for tagged messages (Note [Message classes] in lib/base/ops.h:
  // a stream of their own, so neither class waits behind the other), then the control connection.
  int connections() const { return nsocks_ + 2; }

  static int partsFor(size_t len, size_t nsocks) {
    return len < kSplitBytes ? 1 : static_cast<int>(nsocks);
  }
  static std::pair<uint64_t, uint64_t> partRange(uint64_t len, int parts, int i) {
    uint64_t a = len * static_cast<uint64_t>(i) / static_cast<uint64_t>(parts);
    uint64_t b = len * static_cast<uint64_t>(i + 1) / static_cast<uint64_t>(parts);
    return {a, b - a};
  }

  // Runs f; if a data connection to peer fails, the peer may have said why on its control connection before
  // dropping the data ones: that reason (usually naming the rank that really died) replaces the symptom.
  template <typename F>
  void explained(int peer, F&& f) {
    try {
      f();
    } catch (const Error&) {
      conns_.at(peer).back()->readAfterFailure();
      throw;
    }
  }

  void addSocket(int peer, Fd fd) {
    setNonBlocking(fd.get());
    tuneDataSocket(fd.get());
    auto& socks = conns_[peer];
    bool control = static_cast<int>(socks.size()) == nsocks_ + 1;
    uint64_t key = sockIndex_.size();
    sockIndex_.push_back({peer, socks.size()});
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.u64 = key;
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd.get(), &ev) != 0) failErrno("epoll_ctl");
    socks.push_back(std::make_unique<DataSocket>(std::move(fd), &self(), &setup_.peers[peer], control));
  }

  static Hello helloOf(const uint8_t* bytes) {
    Hello h;
    std::memcpy(&h, bytes, sizeof h);
    return h;
  }

  // The tcp checks of a complete Hello (Note [Handshake], transports/handshake.cc): "" to keep it.
  std::string check(const Hello& h) {
    if (std::string problem = helloProblem(h, kHelloMagic, kWireVersion, setup_); !problem.empty()) return problem;
    if (h.nsocks != nsocks_)
      fail(chorusInvalidUsage, "{} uses CHORUS_NSOCKS={} but {} uses {}; set the same value on every rank",
           setup_.peers[h.fromRank].name(), h.nsocks, self().name(), nsocks_);
    if (h.sockIndex < 0 || h.sockIndex >= connections() || arrived_[h.fromRank].count(h.sockIndex))
      return fmt::format("bad or duplicate connection index {}", h.sockIndex);
    return "";
  }

  const Setup& setup_;
  const int nsocks_;
  Fd listener_;
  SockAddr listenAddr_;
  Fd epoll_;
  std::map<int, std::vector<std::unique_ptr<DataSocket>>> conns_;
  std::vector<std::pair<int, size_t>> sockIndex_;  // epoll key -> (peer, connection index)
  HelloAcceptor acceptor_;
  std::map<int, std::map<int, Fd>> arrived_;  // peer -> connection index -> socket, before accept() claims it
  unsigned spins_ = 0;
  static constexpr unsigned kEpollEvery = 16;
};

}  // namespace

Descriptor descriptor() {
  Descriptor d;
  d.name = "tcp";
  d.preference = 30;
  d.origin = "built-in";
  d.env = kEnv;
  // Latency and bandwidth measured over loopback on this project's 2-core machines; the chunk: Note [Chunk and
  // segments] (tcp_transport.h).
  static_assert(kChunkBytes + sizeof(WireHeader) <= 2 * kLoopbackSegmentBytes);
  d.traits = {10.0, 3.5, 35.0, 1.5, false, {{0, kChunkBytes}}};
  d.canConnect = [](const PeerInfo&, const PeerInfo&) { return true; };
  d.create = [](const Setup& setup) -> std::unique_ptr<Transport> {
    return std::make_unique<TcpTransport>(setup, static_cast<int>(envInt("CHORUS_NSOCKS", 1, 16, kEnv)));
  };
  return d;
}

}  // namespace chorus::transport::tcp
