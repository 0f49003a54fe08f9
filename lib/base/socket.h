// Small blocking-with-deadline socket helpers for setup paths (bootstrap, handshakes). The data path lives in
// transports/tcp and uses non-blocking sockets with epoll.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline Deadline deadlineIn(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() { int f = fd_; fd_ = -1; return f; }
  void reset(int fd = -1);
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  uint16_t port() const;
  void setPort(uint16_t port);
  std::string str() const;  // "1.2.3.4:5" or "[::1]:5"
  static SockAddr parse(const std::string& hostPort);  // throws chorusInvalidArgument
};

// The address to listen on, chosen by CHORUS_SOCKET_IFNAME's rules (see env.cc); names the interface in *ifname.
SockAddr findInterfaceAddress(const std::string& spec, std::string* ifname);

Fd listenOn(const SockAddr& addr, SockAddr* bound);
// Binds without listening: the port is reserved, and connections to it are refused until listen().
Fd bindTo(const SockAddr& addr, SockAddr* bound);
// Retries refused and reset connections until the deadline (the listener may not be up yet, or just closed).
Fd connectTo(const SockAddr& addr, Deadline deadline);
void setNonBlocking(int fd);
// True when fd has something to read (or has hung up) before `until`.
bool waitReadable(int fd, Deadline until);
void tuneDataSocket(int fd);  // TCP_NODELAY, keepalive and user timeout so a cut link surfaces as an error

// Whole-buffer I/O on a blocking or non-blocking fd, bounded by the deadline. Throw chorusTimeout on expiry and
// chorusRemoteError on EOF/reset; `who` names the other side in messages.
void sendAll(int fd, const void* buf, size_t len, Deadline deadline, const std::string& who);
void recvAll(int fd, void* buf, size_t len, Deadline deadline, const std::string& who);

// Length-prefixed frames (u32 little-endian). recvFrame refuses lengths above maxLen before allocating.
void sendFrame(int fd, const std::vector<uint8_t>& payload, Deadline deadline, const std::string& who);
std::vector<uint8_t> recvFrame(int fd, size_t maxLen, Deadline deadline, const std::string& who);

}  // namespace chorus
