#include "transports/handshake.h"

#include <poll.h>
#include <sys/socket.h>

#include <unistd.h>

#include <cerrno>

#include "lib/base/error.h"
#include "lib/base/log.h"

namespace chorus::transport {

namespace {
// How long a connection may take to send its Hello: a stranger that stays silent never holds a slot longer.
constexpr double kHandshakeSeconds = 5.0;
}  // namespace

// Note [Handshake]:
// The lower rank of a pair connects and sends its Hello at once; the higher rank, inside accept(), collects
// connections until the one it waits for has arrived. Connections from other peers that arrive meanwhile are
// kept for their own accept() call (the transport's take() stores them); everything that fails a check is
// closed. The kernel completes the connect before the peer accepts, so a rank can connect to all its higher
// peers before it accepts any lower one, and no order of calls deadlocks.
Fd listenForPeers(const Setup& setup, SockAddr* bound, std::string* ifname) {
  SockAddr addr = findInterfaceAddress(setup.socketIfname, ifname);
  addr.setPort(0);
  Fd listener = listenOn(addr, bound);
  setNonBlocking(listener.get());
  return listener;
}

std::vector<uint8_t> packAddress(const SockAddr& addr) {
  std::vector<uint8_t> out(sizeof(uint32_t) + addr.len);
  const uint32_t len = addr.len;
  std::memcpy(out.data(), &len, sizeof len);
  std::memcpy(out.data() + sizeof len, &addr.ss, addr.len);
  return out;
}

SockAddr unpackAddress(const std::vector<uint8_t>& bytes, const char* transport, int peer) {
  SockAddr to;
  uint32_t len = 0;
  if (bytes.size() < sizeof len) fail(chorusInternalError, "{} address of rank {} is truncated", transport, peer);
  std::memcpy(&len, bytes.data(), sizeof len);
  if (len > sizeof to.ss || bytes.size() != sizeof len + len)
    fail(chorusInternalError, "{} address of rank {} is malformed", transport, peer);
  std::memcpy(&to.ss, bytes.data() + sizeof len, len);
  to.len = len;
  return to;
}

void sendHello(int sock, const void* hello, size_t len, int passFd, const std::string& who) {
  iovec iov{const_cast<void*>(hello), len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (passFd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &passFd, sizeof passFd);
  }
  ssize_t w;
  do w = ::sendmsg(sock, &msg, MSG_NOSIGNAL); while (w < 0 && errno == EINTR);
  // A fresh socket's buffer holds any Hello whole.
  if (w != static_cast<ssize_t>(len)) failErrno("sending the handshake to " + who);
}

ssize_t recvWithFd(int sock, void* buf, size_t len, int* passed) {
  iovec iov{buf, len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t r;
  do r = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC); while (r < 0 && errno == EINTR);
  if (r <= 0) return r;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (*passed < 0) *passed = fd;
      else ::close(fd);  // only one descriptor is ever expected
    }
  }
  return r;
}

void HelloAcceptor::poll(int listener, Deadline deadline, const std::function<void(Arrival&&)>& take) {
  std::vector<pollfd> pfds{{listener, POLLIN, 0}};
  for (auto& p : pending_) pfds.push_back({p.a.fd.get(), POLLIN, 0});
  ::poll(pfds.data(), pfds.size(), 50);
  if (pfds[0].revents & POLLIN) {
    while (true) {
      SockAddr from;
      from.len = sizeof from.ss;
      int fd = ::accept4(listener, reinterpret_cast<sockaddr*>(&from.ss), &from.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      Pending p;
      p.a.fd = Fd(fd);
      p.a.hello.resize(helloBytes_);
      const bool inet = from.ss.ss_family == AF_INET || from.ss.ss_family == AF_INET6;
      p.a.from = inet ? from.str() : "a local process";
      p.deadline = std::min(deadline, deadlineIn(kHandshakeSeconds));
      pending_.push_back(std::move(p));
    }
  }
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    std::string problem = advance(p);
    if (problem == "wait") {
      ++i;
      continue;
    }
    if (!problem.empty())
      CHORUS_WARN(kNet, "{}: {} dropped a connection from {}: {}", setup_.peers[setup_.rank].name(), transport_,
                  p.a.from, problem);
    else
      take(std::move(p.a));
    pending_.erase(pending_.begin() + static_cast<long>(i));
  }
}

void HelloAcceptor::dropPending() {
  for (Pending& p : pending_)
    CHORUS_WARN(kNet, "{}: {} dropped a connection from {}: its handshake was unfinished when the communicator "
                "was formed", setup_.peers[setup_.rank].name(), transport_, p.a.from);
  pending_.clear();
}

std::string HelloAcceptor::advance(Pending& p) {
  if (Clock::now() > p.deadline) return "it stayed silent past the handshake deadline";
  int passed = -1;
  ssize_t r = recvWithFd(p.a.fd.get(), p.a.hello.data() + p.got, helloBytes_ - p.got, &passed);
  if (passed >= 0) {
    if (p.a.passed) {
      ::close(passed);
      return "it passed more than one descriptor";
    }
    p.a.passed = Fd(passed);
  }
  if (r == 0) return "it closed before completing the handshake";
  if (r < 0) return (errno == EAGAIN || errno == EINTR) ? "wait" : std::strerror(errno);
  p.got += static_cast<size_t>(r);
  if (p.got < helloBytes_) return "wait";
  if (std::string problem = check_(p.a.hello.data(), p.a.passed); !problem.empty()) return problem;
  auth::Nonce nonce;  // every Hello ends with its Seal
  std::memcpy(nonce.data(), p.a.hello.data() + helloBytes_ - sizeof(Seal), nonce.size());
  if (!seen_.insert(nonce).second) return "a replayed handshake (its nonce was seen before)";
  return "";
}

}  // namespace chorus::transport
