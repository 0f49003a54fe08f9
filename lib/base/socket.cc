#include "lib/base/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>

#include "lib/base/error.h"

namespace chorus {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

uint16_t SockAddr::port() const {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
}

void SockAddr::setPort(uint16_t p) {
  if (ss.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(p);
  else reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(p);
}

std::string SockAddr::str() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
    return fmt::format("{}:{}", buf, port());
  }
  inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof buf);
  return fmt::format("[{}]:{}", buf, port());
}

SockAddr SockAddr::parse(const std::string& hostPort) {
  size_t colon = hostPort.rfind(':');
  if (colon == std::string::npos || colon + 1 >= hostPort.size())
    fail(chorusInvalidArgument, "address '{}' is not host:port", hostPort);
  std::string host = hostPort.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  long port = std::strtol(hostPort.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port <= 0 || port > 65535) fail(chorusInvalidArgument, "port in '{}' is invalid", hostPort);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr)
    fail(chorusInvalidArgument, "cannot resolve host '{}' of '{}': {}", host, hostPort, gai_strerror(rc));
  SockAddr a;
  std::memcpy(&a.ss, res->ai_addr, res->ai_addrlen);
  a.len = res->ai_addrlen;
  freeaddrinfo(res);
  a.setPort(static_cast<uint16_t>(port));
  return a;
}

namespace {

// NCCL_SOCKET_IFNAME rules: "eth,ib" prefixes; "^docker" excludes prefixes; "=eth0" exact names.
bool ifnameMatches(const std::string& spec, const std::string& name) {
  if (spec.empty()) return true;
  std::string s = spec;
  bool exclude = false, exact = false;
  if (!s.empty() && s[0] == '^') { exclude = true; s = s.substr(1); }
  if (!s.empty() && s[0] == '=') { exact = true; s = s.substr(1); }
  bool hit = false;
  std::stringstream ss(s);
  for (std::string tok; std::getline(ss, tok, ',');) {
    if (tok.empty()) continue;
    if (exact ? name == tok : name.compare(0, tok.size(), tok) == 0) hit = true;
  }
  return exclude ? !hit : hit;
}

}  // namespace

SockAddr findInterfaceAddress(const std::string& spec, std::string* ifname) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) failErrno("getifaddrs");
  SockAddr best, loopback;
  std::string bestName, loName;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || !(i->ifa_flags & IFF_UP)) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (fam == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr)) continue;
    if (!ifnameMatches(spec, i->ifa_name)) continue;
    SockAddr a;
    a.len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&a.ss, i->ifa_addr, a.len);
    bool lo = (i->ifa_flags & IFF_LOOPBACK) != 0;
    // Prefer IPv4, then the first match, in getifaddrs order; loopback only as the last resort by default.
    SockAddr& slot = (lo && spec.empty()) ? loopback : best;
    std::string& nm = (lo && spec.empty()) ? loName : bestName;
    if (slot.len == 0 || (slot.ss.ss_family == AF_INET6 && fam == AF_INET)) { slot = a; nm = i->ifa_name; }
  }
  freeifaddrs(list);
  if (best.len == 0) { best = loopback; bestName = loName; }
  if (best.len == 0)
    fail(chorusInvalidArgument, "CHORUS_SOCKET_IFNAME='{}' matches no up interface with an IP address", spec);
  if (ifname) *ifname = bestName;
  return best;
}

Fd bindTo(const SockAddr& addr, SockAddr* bound) {
  Fd fd(::socket(addr.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) failErrno("socket");
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr.ss), addr.len) != 0)
    failErrno("bind to " + addr.str());
  if (bound) {
    bound->len = sizeof bound->ss;
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound->ss), &bound->len);
  }
  return fd;
}

Fd listenOn(const SockAddr& addr, SockAddr* bound) {
  Fd fd = bindTo(addr, bound);
  if (::listen(fd.get(), 4096) != 0) failErrno("listen on " + addr.str());
  return fd;
}

Fd connectTo(const SockAddr& addr, Deadline deadline) {
  auto backoff = std::chrono::milliseconds(1);
  while (true) {
    Fd fd(::socket(addr.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) failErrno("socket");
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr.ss), addr.len) == 0) return fd;
    int e = errno;
    // ECONNRESET: the listener closed during the handshake (a rendezvous root that just finished, Note
    // [Rendezvous]); like a listener not up yet, another may be by the next try.
    if (e != ECONNREFUSED && e != ECONNRESET && e != ETIMEDOUT && e != EHOSTUNREACH && e != ENETUNREACH &&
        e != EINTR) {
      errno = e;
      failErrno("connect to " + addr.str());
    }
    if (Clock::now() + backoff > deadline)
      fail(chorusTimeout, "could not connect to {} before the deadline: {}", addr.str(), std::strerror(e));
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
}

void setNonBlocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) failErrno("fcntl O_NONBLOCK");
}

void tuneDataSocket(int fd) {
  int one = 1, idle = 5, intvl = 1, cnt = 5;
  unsigned userTimeoutMs = 30000;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &userTimeoutMs, sizeof userTimeoutMs);
}

namespace {

int msLeft(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1000));
}

// True when fd is ready for `events` (or has hung up) before the deadline; -1 with errno when poll fails.
int pollUntil(int fd, short events, Deadline deadline) {
  while (Clock::now() < deadline) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, msLeft(deadline));
    if (rc > 0) return 1;
    if (rc < 0 && errno != EINTR) return -1;
  }
  return 0;
}

void waitFd(int fd, short events, Deadline deadline, const std::string& who, const char* what) {
  int rc = pollUntil(fd, events, deadline);
  if (rc == 0) fail(chorusTimeout, "timed out while {} {}", what, who);
  if (rc < 0) failErrno(std::string("poll while ") + what + " " + who);
}

}  // namespace

bool waitReadable(int fd, Deadline until) { return pollUntil(fd, POLLIN, until) > 0; }

void sendAll(int fd, const void* buf, size_t len, Deadline deadline, const std::string& who) {
  auto p = static_cast<const char*>(buf);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) { p += n; len -= static_cast<size_t>(n); continue; }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) { waitFd(fd, POLLOUT, deadline, who, "sending to"); continue; }
    fail(chorusRemoteError, "connection to {} failed while sending: {}", who, std::strerror(errno));
  }
}

void recvAll(int fd, void* buf, size_t len, Deadline deadline, const std::string& who) {
  auto p = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) { p += n; len -= static_cast<size_t>(n); continue; }
    if (n == 0) fail(chorusRemoteError, "{} closed the connection", who);
    if (errno == EAGAIN || errno == EINTR) { waitFd(fd, POLLIN, deadline, who, "receiving from"); continue; }
    fail(chorusRemoteError, "connection to {} failed while receiving: {}", who, std::strerror(errno));
  }
}

void sendFrame(int fd, const std::vector<uint8_t>& payload, Deadline deadline, const std::string& who) {
  uint32_t len = static_cast<uint32_t>(payload.size());
  sendAll(fd, &len, sizeof len, deadline, who);
  sendAll(fd, payload.data(), payload.size(), deadline, who);
}

std::vector<uint8_t> recvFrame(int fd, size_t maxLen, Deadline deadline, const std::string& who) {
  uint32_t len = 0;
  recvAll(fd, &len, sizeof len, deadline, who);
  if (len > maxLen) fail(chorusRemoteError, "{} sent a {}-byte frame, more than the {} allowed", who, len, maxLen);
  std::vector<uint8_t> out(len);
  recvAll(fd, out.data(), len, deadline, who);
  return out;
}

}  // namespace chorus
