#include "transports/shm/control.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "lib/base/identity.h"
#include "lib/base/error.h"
#include "transports/handshake.h"

namespace chorus::transport::shm {

namespace {
sockaddr_un abstractAddr(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof a.sun_path) fail(chorusInternalError, "abstract socket name too long");
  std::memcpy(a.sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: abstract namespace
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}
}  // namespace

Fd listenAbstract(std::string* name) {
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) failErrno("socket(AF_UNIX)");
  *name = fmt::format("chorus-shm-{}-{:016x}", getpid(), randomU64());
  socklen_t len;
  sockaddr_un a = abstractAddr(*name, &len);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), len) != 0) failErrno("bind of the shm control socket");
  if (::listen(fd.get(), SOMAXCONN) != 0) failErrno("listen on the shm control socket");
  return fd;
}

Fd connectAbstract(const std::string& name, Deadline deadline) {
  socklen_t len;
  sockaddr_un a = abstractAddr(name, &len);
  auto backoff = std::chrono::milliseconds(1);
  while (true) {
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) failErrno("socket(AF_UNIX)");
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), len) == 0) {
      setNonBlocking(fd.get());
      return fd;
    }
    int e = errno;
    if (e != EAGAIN && e != EINTR)
      fail(chorusSystemError, "could not connect to the shm control socket @{}: {} (is the peer in another "
           "network namespace? set CHORUS_HOSTID apart, or CHORUS_SHM_DISABLE=1)", name, std::strerror(e));
    if (Clock::now() >= deadline)
      fail(chorusTimeout, "could not connect to the shm control socket @{} before the deadline", name);
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
  }
}

bool writeFrame(int sock, FrameType type, uint32_t code, const std::string& text, Deadline deadline) {
  std::string out(sizeof(Frame), '\0');
  Frame f{kFrameMagic, type, {}, code, static_cast<uint32_t>(std::min<size_t>(text.size(), kMaxAbortText))};
  std::memcpy(out.data(), &f, sizeof f);
  out.append(text, 0, f.textLen);
  size_t done = 0;
  while (done < out.size()) {
    ssize_t w = ::send(sock, out.data() + done, out.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) { done += static_cast<size_t>(w); continue; }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN) return false;
    if (Clock::now() >= deadline) return false;
    pollfd p{sock, POLLOUT, 0};
    ::poll(&p, 1, 10);
  }
  return true;
}

FrameReader::Status FrameReader::poll(int sock, const std::string& peerName) {
  while (true) {
    int passed = -1;
    ssize_t r = recvWithFd(sock, buf_ + have_, sizeof buf_ - have_, &passed);
    if (passed >= 0) ::close(passed);
    if (r == 0) return Status::Closed;
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Idle;
      if (errno == ECONNRESET) return Status::Closed;
      failErrno("reading the shm control socket");
    }
    have_ += static_cast<size_t>(r);
    while (have_ >= sizeof(Frame)) {
      Frame f;
      std::memcpy(&f, buf_, sizeof f);
      if (f.magic != kFrameMagic || f.textLen > kMaxAbortText)
        fail(chorusRemoteError, "{} sent a malformed control frame", peerName);
      size_t total = sizeof f + f.textLen;
      if (have_ < total) break;
      if (f.type == FrameType::Bye) bye_ = true;
      if (f.type == FrameType::Abort) {
        std::string text(reinterpret_cast<const char*>(buf_) + sizeof f, f.textLen);
        throw peerAborted(peerName, f.code == chorusInvalidUsage, text);
      }
      std::memmove(buf_, buf_ + total, have_ - total);
      have_ -= total;
    }
  }
}

}  // namespace chorus::transport::shm
