#include "lib/comm/rendezvous.h"

#include <sys/socket.h>
#include <sodium.h>
#include <unistd.h>

#include <cstring>

#include "lib/base/error.h"
#include "lib/base/log.h"

namespace chorus {

// Note [Rendezvous]:
// A failed communicator cannot carry the exchange that forms its successor, and the process that hosted its
// bootstrap root may be the one that died. So every rank keeps one more listening socket for the life of the
// communicator, and the bootstrap table tells everyone where each is. To form a new communicator, the ranks that
// will belong to it agree without talking on who hosts its root (the first of them: for shrink the lowest
// surviving rank, for split's own exchange of colors rank 0, for each color its first member by key) and that
// host runs an ordinary bootstrap root (bootstrap.cc) on a duplicate of its listener; the others join it as they
// would join chorusGetUniqueId's. The root's secret is derived, by a keyed hash, from the communicator's secret,
// its id, what the round is about (split, or shrink without these ranks; then the color) and how many rounds
// about that this rank has begun, so a rank that disagrees with the others, a straggler of an earlier round, or a
// stranger is dropped by the root's secret check instead of joining the wrong communicator. Rounds are counted
// per subject, not overall, because a rank left out of a shrink does not see that round and must still agree
// with the others on the next split. Connections waiting on a listener between rounds sit in its backlog until a
// root accepts and checks them; a root serves one communicator and exits, closing its duplicate.

// Note [Members gone]:
// A round's members are ranks of a communicator that already exists, so, unlike the ranks of a first creation,
// they are known, and one that is gone need not be waited for until the creation timeout (120 s by default). The
// parent communicator tells (Comm::goneAmong) when a member has exited, for a member on this host (its pid, a
// zombie counting as gone), or has been declared silent by the heartbeats (any host, within CHORUS_PEER_TIMEOUT,
// Note [Liveness]). The root looks every 100 ms at the members that have not joined, and when one is gone it fails
// the round for everyone who has, naming it (chorusRemoteError). A joiner cannot learn that from a root whose
// process is the one gone, so it looks at the root's host itself while it connects and waits. Only the root judges
// the other members: a joiner that failed on its own view would leave the root to form a communicator without it.

Rendezvous::Rendezvous(const std::string& socketIfname, std::vector<uint8_t>* address) {
  SockAddr addr = findInterfaceAddress(socketIfname, nullptr);
  addr.setPort(0);
  socket_ = bindTo(addr, &bound_);
  const auto* p = reinterpret_cast<const uint8_t*>(&bound_.ss);
  address->assign(p, p + bound_.len);
}

Rendezvous::~Rendezvous() {
  if (root_.joinable()) root_.join();
}

void Rendezvous::endRoot() {
  if (root_.joinable()) root_.join();
  if (socket_) return;
  try {
    socket_ = bindTo(bound_, nullptr);
  } catch (const Error& e) {  // another process took the port meanwhile: a later root hosted here says so
    CHORUS_WARN(kInit, "the rendezvous port {} could not be taken back: {}", bound_.str(), e.what());
  }
}

void Rendezvous::setMembers(int rank, uint64_t secret, uint64_t commId, const std::vector<RankInfo>& ranks) {
  rank_ = rank;
  secret_ = secret;
  commId_ = commId;
  at_.clear();
  for (const RankInfo& r : ranks) {
    if (r.rendezvous.size() > sizeof(sockaddr_storage))
      fail(chorusRemoteError, "rank {} sent a malformed rendezvous address", r.rank);
    SockAddr a;
    a.len = static_cast<socklen_t>(r.rendezvous.size());
    std::memcpy(&a.ss, r.rendezvous.data(), a.len);
    at_.push_back(a);
  }
}

void Rendezvous::beginRound(const std::string& purpose, const std::vector<int32_t>& detail) {
  std::string what = purpose;
  what.append(reinterpret_cast<const char*>(detail.data()), detail.size() * sizeof(int32_t));
  const uint64_t round = ++rounds_[what];
  if (sodium_init() < 0) fail(chorusSystemError, "libsodium failed to initialise (rendezvous)");
  uint8_t key[crypto_generichash_KEYBYTES] = {};
  std::memcpy(key, &secret_, sizeof secret_);
  std::memcpy(key + sizeof secret_, &commId_, sizeof commId_);
  what.append(reinterpret_cast<const char*>(&round), sizeof round);
  roundKey_.resize(crypto_generichash_BYTES);
  crypto_generichash(roundKey_.data(), roundKey_.size(), reinterpret_cast<const uint8_t*>(what.data()), what.size(),
                     key, sizeof key);
}

uint64_t Rendezvous::secretFor(int32_t part) const {
  uint8_t out[crypto_generichash_BYTES_MIN];
  crypto_generichash(out, sizeof out, reinterpret_cast<const uint8_t*>(&part), sizeof part, roundKey_.data(),
                     roundKey_.size());
  uint64_t s;
  std::memcpy(&s, out, sizeof s);
  return s;
}

UniqueIdData Rendezvous::root(int host, int32_t part, double timeoutSec,
                              std::function<std::string(int member)> memberGone) {
  if (host < 0 || host >= static_cast<int>(at_.size()))
    fail(chorusInternalError, "rendezvous host {} is not a rank of the communicator", host);
  UniqueIdData d;
  d.secret = secretFor(part);
  d.root = at_[static_cast<size_t>(host)];
  d.rendezvous = true;
  d.memberGone = std::move(memberGone);
  if (host == rank_) {
    endRoot();  // split's exchange of colors, if this rank hosted it
    if (!socket_) fail(chorusSystemError, "this rank lost its rendezvous port {} to another process", bound_.str());
    if (::listen(socket_.get(), 4096) != 0) failErrno("listen on the rendezvous port " + bound_.str());
    root_ = std::thread(serveRoot, std::move(socket_), d.secret, timeoutSec, d.memberGone);
  }
  return d;
}

}  // namespace chorus
