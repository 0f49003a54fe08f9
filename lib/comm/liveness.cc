#include "lib/comm/liveness.h"

#include <poll.h>
#include <sodium.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "lib/base/error.h"
#include "lib/base/log.h"
#include "lib/base/thread_name.h"

namespace chorus {

namespace {

constexpr uint32_t kMagic = 0x43484c56;  // "CHLV"
constexpr uint8_t kVersion = 1;
enum : uint8_t { kHeartbeat = 1, kNotice = 2, kGoodbye = 3 };

}  // namespace

std::string Activity::describe() const {
  if (kind == OpKind::None) return "idle before any call";
  // Send/Recv count per pair; collectives count the communicator's calls.
  const char* mark = kind == OpKind::Send ? "Send/Recv #" : "#";
  if (kind == OpKind::Send) return fmt::format("{} {}{}", running ? "in" : "idle after", mark, seq);
  return fmt::format("{} {} {}{}", running ? "in" : "idle after", opKindName(kind), mark, seq);
}

// Fixed layout, host byte order (little-endian on every machine Chorus builds for); the MAC covers all before it.
struct Liveness::Datagram {
  uint32_t magic;
  uint8_t version;
  uint8_t type;
  uint16_t pad;
  int32_t from;
  int32_t about;       // a notice's silent rank; else -1
  uint64_t commId;
  uint64_t counter;    // the sender's, rising: an older or repeated one is a replay
  uint64_t fromState;  // Activity::pack of the sender
  uint64_t aboutState;  // a notice's: the silent rank's last reported activity
  uint32_t silentMs;   // a notice's: how long the silent rank had not been heard from
  uint32_t pad2;
  uint8_t mac[crypto_auth_hmacsha256_BYTES];
};

Fd Liveness::openSocket(const std::string& ifnameSpec, std::vector<uint8_t>* address) {
  std::string ifname;
  SockAddr at = findInterfaceAddress(ifnameSpec, &ifname);
  at.setPort(0);
  Fd fd(::socket(at.ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) failErrno("socket (heartbeats)");
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&at.ss), at.len) != 0)
    failErrno(fmt::format("bind {} (heartbeats)", at.str()));
  SockAddr bound;
  bound.len = sizeof bound.ss;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound.ss), &bound.len) != 0)
    failErrno("getsockname (heartbeats)");
  const auto* p = reinterpret_cast<const uint8_t*>(&bound.ss);
  address->assign(p, p + bound.len);
  return fd;
}

Liveness::Liveness(Fd socket, Identity me, std::vector<Member> members, double timeoutSec,
                   const std::atomic<uint64_t>* activity, OnSilent onSilent)
    : sock_(std::move(socket)),
      stopFd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      me_(me),
      members_(std::move(members)),
      timeoutSec_(timeoutSec),
      activity_(activity),
      onSilent_(std::move(onSilent)) {
  if (!stopFd_) failErrno("eventfd (heartbeats)");
  if (sodium_init() < 0) fail(chorusSystemError, "libsodium failed to initialise (heartbeats' MAC)");
  uint8_t seed[32] = "chorus liveness key";
  std::memcpy(seed + 20, &me_.secret, sizeof me_.secret);
  crypto_generichash(key_, sizeof key_, seed, sizeof seed, reinterpret_cast<const uint8_t*>(&me_.commId),
                     sizeof me_.commId);
  const size_t n = members_.size();
  lastCounter_.assign(n, 0);
  lastHeard_.assign(n, Clock::now());
  lastState_.assign(n, 0);
  gone_.assign(n, false);
  heard_.assign(n, false);
  SockAddr at;
  at.len = static_cast<socklen_t>(std::min(members_[static_cast<size_t>(me_.rank)].address.size(), sizeof at.ss));
  std::memcpy(&at.ss, members_[static_cast<size_t>(me_.rank)].address.data(), at.len);
  CHORUS_INFO(kInit, "{}: heartbeats on udp {} every {:.2f} s to the next {} rank(s); silent after {} s "
              "(CHORUS_PEER_TIMEOUT)", members_[static_cast<size_t>(me_.rank)].name, at.str(),
              std::clamp(timeoutSec_ / 10, 0.05, 1.0), std::min(kWatchers, static_cast<int>(n) - 1), timeoutSec_);
  // The first heartbeats go before the communicator is ready, not when the thread first runs: a rank stopped
  // right after its init (or whose thread a loaded machine starts late) has been heard once, so its watchers
  // cannot take its silence for UDP being blocked.
  heartbeat();
  thread_ = std::thread(&Liveness::run, this);
}

void Liveness::heartbeat() {
  const int n = static_cast<int>(members_.size());
  for (int k = 1; k <= std::min(kWatchers, n - 1); ++k) send((me_.rank + k) % n, kHeartbeat, -1, {}, 0);
}

Liveness::~Liveness() {
  uint64_t one = 1;
  if (::write(stopFd_.get(), &one, sizeof one) < 0) { /* the thread also looks every period */ }
  thread_.join();
  const int n = static_cast<int>(members_.size());
  for (int k = 1; k <= std::min(kWatchers, n - 1); ++k) send((me_.rank + k) % n, kGoodbye, -1, {}, 0);
}

void Liveness::send(int to, uint8_t type, int about, Activity aboutState, uint32_t silentMs) {
  static_assert(sizeof(Datagram) == 88, "no padding: the MAC covers every byte before it");
  Datagram d{};
  d.magic = kMagic;
  d.version = kVersion;
  d.type = type;
  d.from = me_.rank;
  d.about = about;
  d.commId = me_.commId;
  d.counter = ++counter_;
  d.fromState = activity_->load(std::memory_order_relaxed);
  d.aboutState = aboutState.pack();
  d.silentMs = silentMs;
  crypto_auth_hmacsha256(d.mac, reinterpret_cast<const uint8_t*>(&d), offsetof(Datagram, mac), key_);
  const std::vector<uint8_t>& a = members_[static_cast<size_t>(to)].address;
  // A full socket buffer or an unreachable host loses this one; the next period sends again.
  (void)::sendto(sock_.get(), &d, sizeof d, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(a.data()),
                 static_cast<socklen_t>(a.size()));
}

void Liveness::receive() {
  const int n = static_cast<int>(members_.size());
  for (;;) {
    Datagram d;
    const ssize_t got = ::recv(sock_.get(), &d, sizeof d, MSG_DONTWAIT | MSG_TRUNC);
    if (got < 0) return;  // EAGAIN: nothing more
    if (got != static_cast<ssize_t>(sizeof d) || d.magic != kMagic || d.version != kVersion ||
        d.commId != me_.commId || d.from < 0 || d.from >= n || d.from == me_.rank ||
        crypto_auth_hmacsha256_verify(d.mac, reinterpret_cast<const uint8_t*>(&d), offsetof(Datagram, mac), key_) !=
            0 ||
        d.counter <= lastCounter_[static_cast<size_t>(d.from)]) {
      CHORUS_DEBUG(kNet, "rank {}: dropped a heartbeat datagram ({} bytes) that is not from this communicator",
                   me_.rank, got);
      continue;
    }
    const auto from = static_cast<size_t>(d.from);
    heard_[from] = true;
    lastCounter_[from] = d.counter;
    lastHeard_[from] = Clock::now();
    lastState_[from] = d.fromState;
    checkSameCall(from, Activity::unpack(d.fromState));
    if (d.type == kGoodbye) gone_[from] = true;
    if (d.type != kNotice || silent_ >= 0 || d.about < 0 || d.about >= n) continue;
    silent_ = d.about;
    silentState_ = Activity::unpack(d.aboutState);
    silentMs_ = d.silentMs;
    const Activity mine = Activity::unpack(activity_->load(std::memory_order_relaxed));
    const std::string& silent = members_[static_cast<size_t>(d.about)].name;
    declare(d.about, d.about == me_.rank
        ? fmt::format("{} was declared silent by {}, which had no heartbeat from it for {:.1f} s "
                      "(CHORUS_PEER_TIMEOUT={}; a cut link or heavy loss between them?); this rank is {}",
                      members_[static_cast<size_t>(me_.rank)].name, members_[from].name, d.silentMs / 1e3,
                      timeoutSec_, mine.describe())
        : fmt::format("{} stopped answering: {} had no heartbeat from it for {:.1f} s (CHORUS_PEER_TIMEOUT={}; its "
                      "last one found it {}); this rank is {}",
                      silent, members_[from].name, d.silentMs / 1e3, timeoutSec_, silentState_.describe(),
                      mine.describe()));
  }
}

// Call numbers count a communicator's collectives alike on every rank (Send/Recv count per pair, and are left out):
// two ranks in the same call number must be in the same collective.
void Liveness::checkSameCall(size_t from, const Activity& theirs) {
  auto collective = [](OpKind k) { return k != OpKind::None && k != OpKind::Send && k != OpKind::Tagged; };
  const Activity mine = Activity::unpack(activity_->load(std::memory_order_relaxed));
  if (mismatched_ || silent_ >= 0 || !theirs.running || !mine.running || theirs.seq != mine.seq ||
      theirs.kind == mine.kind || !collective(theirs.kind) || !collective(mine.kind))
    return;
  mismatched_ = true;
  onSilent_(chorusInvalidUsage, fmt::format("mismatched calls: {} is {} but {} is {} (its heartbeat says)",
                                            members_[static_cast<size_t>(me_.rank)].name, mine.describe(),
                                            members_[from].name, theirs.describe()));
}

void Liveness::declare(int silent, const std::string& why) {
  silent_ = silent;
  onSilent_(chorusRemoteError, why);
  const int n = static_cast<int>(members_.size());
  for (int r = 0; r < n; ++r)
    if (r != me_.rank) send(r, kNotice, silent_, silentState_, silentMs_);
}

void Liveness::run() {
  nameThisThread("chorus-liveness");
  using namespace std::chrono;
  const int n = static_cast<int>(members_.size());
  const int watchers = std::min(kWatchers, n - 1);
  const auto period = duration_cast<Clock::duration>(duration<double>(std::clamp(timeoutSec_ / 10, 0.05, 1.0)));
  const auto timeout = duration_cast<Clock::duration>(duration<double>(timeoutSec_));
  Clock::time_point next = Clock::now() + period;  // the constructor sent the first ones
  for (;;) {
    const auto wait = duration_cast<milliseconds>(next - Clock::now()).count();
    pollfd fds[2] = {{sock_.get(), POLLIN, 0}, {stopFd_.get(), POLLIN, 0}};
    ::poll(fds, 2, static_cast<int>(std::max<int64_t>(wait, 0)));
    if (fds[1].revents != 0) return;
    if (fds[0].revents != 0) receive();
    const Clock::time_point now = Clock::now();
    if (now < next) continue;
    next = now + period;
    heartbeat();
    if (silent_ >= 0) {  // keep telling everyone: a notice may be lost, and ranks behind a cut need it
      for (int r = 0; r < n; ++r)
        if (r != me_.rank) send(r, kNotice, silent_, silentState_, silentMs_);
      continue;
    }
    for (int k = 1; k <= watchers; ++k) {
      const auto p = static_cast<size_t>((me_.rank - k + n) % n);
      if (gone_[p] || now - lastHeard_[p] <= timeout) continue;
      if (!heard_[p]) {  // not one heartbeat ever: datagrams between us are blocked, not the peer stopped
        CHORUS_WARN(kNet, "{}: no heartbeat ever arrived from {} in {} s: UDP between them is blocked? It is not "
                    "watched (CHORUS_PEER_TIMEOUT=0 turns heartbeats off)", members_[static_cast<size_t>(me_.rank)].name,
                    members_[p].name, timeoutSec_);
        gone_[p] = true;
        continue;
      }
      silentState_ = Activity::unpack(lastState_[p]);
      silentMs_ = static_cast<uint32_t>(duration_cast<milliseconds>(now - lastHeard_[p]).count());
      const Activity mine = Activity::unpack(activity_->load(std::memory_order_relaxed));
      declare(static_cast<int>(p),
              fmt::format("{} stopped answering: no heartbeat from it for {:.1f} s (CHORUS_PEER_TIMEOUT={}; its last "
                          "one found it {}); this rank is {}",
                          members_[p].name, silentMs_ / 1e3, timeoutSec_, silentState_.describe(), mine.describe()));
      break;
    }
  }
}

}  // namespace chorus
