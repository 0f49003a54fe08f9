#include "lib/comm/bootstrap.h"

#include <poll.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "lib/base/auth.h"
#include "lib/base/error.h"
#include "lib/base/identity.h"
#include "lib/base/log.h"
#include "lib/base/thread_name.h"
#include "transports/transport.h"

namespace chorus {

namespace {

constexpr uint32_t kIdMagic = 0x43484944;  // "CHID"
constexpr uint32_t kBootMagic = 0x43484253;  // "CHBS"
constexpr uint32_t kChallengeMagic = 0x43484348;  // "CHCH"
constexpr uint32_t kBootVersion = 6;
constexpr uint32_t kMaxTransports = 8;
constexpr size_t kMaxPayload = kMaxRendezvousPayload;
constexpr size_t kMaxInfoFrame = 1024 + sizeof(auth::Nonce) + sizeof(auth::Mac) + 2 * (4 + sizeof(sockaddr_storage)) + (4 + kMaxPayload) + kMaxTransports * (64 + transport::kMaxAddressBytes);
constexpr size_t kMaxTableFrame = 64u << 20;
constexpr double kHandshakeSeconds = 5.0;
// How often a rendezvous round looks for members that are gone (Note [Members gone] in rendezvous.cc).
constexpr auto kWatchPeriod = std::chrono::milliseconds(100);
// The first word of the root's table: the table follows, or the reason it failed. A member found gone is a
// remote error; anything else (disagreeing ranks, the timeout) a usage error.
constexpr uint32_t kTableOk = 0, kTableRefused = 1, kTableMemberGone = 2;

// What the root sends first on every connection (Note [Authentication] in lib/base/auth.cc).
struct Challenge {
  uint32_t magic;
  uint32_t version;
  auth::Nonce nonce;
};
static_assert(sizeof(Challenge) == 24);

// The keys of a join (joiner to root) and of a table (root to joiner).
auth::Key joinKey(uint64_t secret) { return auth::derive(secret, "chorus bootstrap join", 0); }
auth::Key tableKey(uint64_t secret) { return auth::derive(secret, "chorus bootstrap table", 0); }

// Bounds-checked little serializer for bootstrap frames.
class Writer {
 public:
  template <typename T> void put(T v) { append(&v, sizeof v); }
  void putBytes(const void* p, size_t n) { put<uint32_t>(static_cast<uint32_t>(n)); append(p, n); }
  void putString(const std::string& s) { putBytes(s.data(), s.size()); }
  std::vector<uint8_t> take() { return std::move(buf_); }

 private:
  void append(const void* p, size_t n) {
    auto b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  std::vector<uint8_t> buf_;
};

class Reader {
 public:
  Reader(const std::vector<uint8_t>& b, std::string who) : b_(b), who_(std::move(who)) {}
  template <typename T> T get() {
    T v;
    need(sizeof v);
    std::memcpy(&v, b_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::vector<uint8_t> getBytes(size_t max) {
    uint32_t n = get<uint32_t>();
    if (n > max) fail(chorusRemoteError, "malformed bootstrap frame from {}: field of {} bytes", who_, n);
    need(n);
    std::vector<uint8_t> v(b_.begin() + static_cast<long>(pos_), b_.begin() + static_cast<long>(pos_ + n));
    pos_ += n;
    return v;
  }
  std::string getString(size_t max) {
    auto v = getBytes(max);
    return std::string(v.begin(), v.end());
  }

 private:
  void need(size_t n) const {
    if (pos_ + n > b_.size()) fail(chorusRemoteError, "malformed bootstrap frame from {}: truncated", who_);
  }
  const std::vector<uint8_t>& b_;
  std::string who_;
  size_t pos_ = 0;
};

void putInfo(Writer& w, const RankInfo& r) {
  w.put<int32_t>(r.rank);
  w.put<int32_t>(r.nranks);
  w.put<int32_t>(r.pid);
  w.putString(r.host);
  w.putString(r.hostId);
  w.put<uint32_t>(static_cast<uint32_t>(r.addresses.size()));
  for (const auto& a : r.addresses) {
    w.putString(a.transport);
    w.putBytes(a.bytes.data(), a.bytes.size());
  }
  w.putBytes(r.heartbeat.data(), r.heartbeat.size());
  w.putBytes(r.rendezvous.data(), r.rendezvous.size());
  w.putBytes(r.payload.data(), r.payload.size());
}

RankInfo getInfo(Reader& rd) {
  RankInfo r;
  r.rank = rd.get<int32_t>();
  r.nranks = rd.get<int32_t>();
  r.pid = rd.get<int32_t>();
  r.host = rd.getString(256);
  r.hostId = rd.getString(512);
  uint32_t n = rd.get<uint32_t>();
  if (n > kMaxTransports) fail(chorusRemoteError, "malformed bootstrap frame: {} transport addresses", n);
  for (uint32_t i = 0; i < n; ++i) {
    TransportAddress a;
    a.transport = rd.getString(64);
    a.bytes = rd.getBytes(transport::kMaxAddressBytes);
    r.addresses.push_back(std::move(a));
  }
  r.heartbeat = rd.getBytes(sizeof(sockaddr_storage));
  r.rendezvous = rd.getBytes(sizeof(sockaddr_storage));
  r.payload = rd.getBytes(kMaxPayload);
  return r;
}

struct Joiner {
  Fd fd;
  SockAddr from;
  Deadline deadline;
  auth::Nonce challenge{};   // ours, sent on accept
  auth::Nonce nonce{};       // the joiner's, for the MAC of our answer
  std::vector<uint8_t> buf;  // partial frame: 4-byte length then payload
  RankInfo info;
  bool joined = false;
  bool answered = false;     // its table (or the reason there is none) was sent
};

// What readJoin found in a joiner's connection.
struct JoinRead {
  enum class State { kComplete, kWait, kDrop };
  State state;
  std::string why;  // kDrop: why the connection is dropped
};

JoinRead dropJoin(std::string why) { return {.state = JoinRead::State::kDrop, .why = std::move(why)}; }
JoinRead frameTooLong(uint32_t len) {
  return dropJoin(fmt::format("it announced a {}-byte frame (limit {})", len, kMaxInfoFrame));
}

// Reads what is available of j's one frame.
JoinRead readJoin(Joiner& j, const auth::Key& key) {
  const JoinRead kWait{.state = JoinRead::State::kWait, .why = {}};
  const JoinRead kComplete{.state = JoinRead::State::kComplete, .why = {}};
  if (Clock::now() > j.deadline) return dropJoin("it stayed silent past the handshake deadline");
  uint8_t tmp[4096];
  size_t want = j.buf.size() < 4 ? 4 - j.buf.size() : 0;
  if (j.buf.size() >= 4) {
    uint32_t len;
    std::memcpy(&len, j.buf.data(), 4);
    if (len > kMaxInfoFrame) return frameTooLong(len);
    want = 4 + len - j.buf.size();
  }
  if (want == 0) return kComplete;
  ssize_t r = ::recv(j.fd.get(), tmp, std::min(want, sizeof tmp), MSG_DONTWAIT);
  if (r == 0) return dropJoin("it closed the connection");
  if (r < 0) return (errno == EAGAIN || errno == EINTR) ? kWait : dropJoin(std::strerror(errno));
  j.buf.insert(j.buf.end(), tmp, tmp + r);
  if (j.buf.size() < 4) return kWait;
  uint32_t len;
  std::memcpy(&len, j.buf.data(), 4);
  if (len > kMaxInfoFrame) return frameTooLong(len);
  if (j.buf.size() < 4 + len) return kWait;
  if (len < sizeof(auth::Mac)) return dropJoin("a frame too short to carry its proof");
  std::vector<uint8_t> payload(j.buf.begin() + 4, j.buf.end() - static_cast<long>(sizeof(auth::Mac)));
  try {
    Reader rd(payload, j.from.str());
    if (rd.get<uint32_t>() != kBootMagic) return dropJoin("bad magic (not a Chorus rank)");
    uint32_t version = rd.get<uint32_t>();
    if (version != kBootVersion)
      return dropJoin(fmt::format("bootstrap version {} (root speaks {})", version, kBootVersion));
    if (!auth::equal(auth::mac(key, j.challenge.data(), j.challenge.size(), payload.data(), payload.size()),
                     &*(j.buf.end() - static_cast<long>(sizeof(auth::Mac)))))
      return dropJoin("wrong secret (its proof does not match)");
    decodeJoin(payload, j.from.str(), &j.nonce, &j.info);
  } catch (const Error& e) {
    return dropJoin(e.what());
  }
  return kComplete;
}

}  // namespace

void serveRoot(Fd listener, uint64_t secret, double timeoutSec, std::function<std::string(int member)> memberGone) {
  nameThisThread("chorus-root");
  Deadline deadline = deadlineIn(timeoutSec);
  Deadline nextWatch = Clock::now();
  const auth::Key joinK = joinKey(secret), tableK = tableKey(secret);
  std::vector<Joiner> conns;
  std::map<int, size_t> byRank;
  int nranks = -1;
  std::string failure;      // the round is refused (ranks disagree): everyone who joined is told at the end
  std::string lost;         // a member is gone (Note [Members gone]): every live member is told as it joins
  std::vector<uint8_t> lostTable;  // what the joiners are told then
  std::vector<bool> gone;   // by rank, once a member is watched
  auto answer = [&](Joiner& c, const std::vector<uint8_t>& table) {
    c.answered = true;
    try {
      std::vector<uint8_t> frame = table;
      const auth::Mac m = auth::mac(tableK, c.nonce.data(), c.nonce.size(), table.data(), table.size());
      frame.insert(frame.end(), m.begin(), m.end());
      sendFrame(c.fd.get(), frame, deadlineIn(10.0), fmt::format("rank {}", c.info.rank));
    } catch (const Error& e) {
      CHORUS_WARN(kBootstrap, "bootstrap root could not answer rank {}: {}", c.info.rank, e.what());
    }
  };
  auto failed = [](uint32_t status, const std::string& why) {
    CHORUS_WARN(kBootstrap, "bootstrap root failed: {}", why);
    Writer w;
    w.put<uint32_t>(status);
    w.putString(why);
    return w.take();
  };
  // Every rank has joined; or, once a member is lost, every rank has joined or is gone too.
  auto settled = [&] {
    if (nranks < 0) return false;
    for (int r = 0; r < nranks; ++r)
      if (!byRank.count(r) && (lost.empty() || !gone[static_cast<size_t>(r)])) return false;
    return true;
  };
  setNonBlocking(listener.get());
  while (Clock::now() < deadline && failure.empty() && !settled()) {
    std::vector<pollfd> pfds{{listener.get(), POLLIN, 0}};
    for (auto& c : conns) pfds.push_back({c.fd.get(), static_cast<short>(c.joined ? 0 : POLLIN), 0});
    ::poll(pfds.data(), pfds.size(), 100);
    while (true) {
      SockAddr from;
      from.len = sizeof from.ss;
      int fd = ::accept4(listener.get(), reinterpret_cast<sockaddr*>(&from.ss), &from.len, SOCK_CLOEXEC);
      if (fd < 0) break;
      Joiner j{Fd(fd), from, deadlineIn(kHandshakeSeconds), auth::freshNonce(), {}, {}, {}};
      const Challenge c{kChallengeMagic, kBootVersion, j.challenge};
      // A fresh socket's buffer takes 24 bytes at once; one that does not is not worth waiting for.
      if (::send(j.fd.get(), &c, sizeof c, MSG_DONTWAIT | MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof c)) {
        CHORUS_WARN(kBootstrap, "bootstrap root dropped a connection from {}: it could not take the challenge",
                    from.str());
        continue;
      }
      conns.push_back(std::move(j));
    }
    for (size_t i = 0; i < conns.size();) {
      Joiner& j = conns[i];
      if (j.joined) { ++i; continue; }
      const JoinRead read = readJoin(j, joinK);
      if (read.state == JoinRead::State::kWait) { ++i; continue; }
      if (read.state == JoinRead::State::kComplete) {
        const RankInfo& r = j.info;
        if (nranks < 0) nranks = r.nranks;
        if (r.nranks != nranks)
          failure = fmt::format("rank {} was created with nranks={} but another rank with nranks={}", r.rank,
                                r.nranks, nranks);
        else if (r.rank < 0 || r.rank >= nranks)
          failure = fmt::format("a rank joined with rank={}, outside [0, {})", r.rank, nranks);
        else if (byRank.count(r.rank))
          failure = fmt::format("rank {} joined twice (pids {} and {}): every rank needs a distinct rank number",
                                r.rank, conns[byRank[r.rank]].info.pid, r.pid);
        else {
          j.joined = true;
          byRank[r.rank] = i;
          CHORUS_DEBUG(kBootstrap, "root: rank {} of {} joined from {}", r.rank, nranks, j.from.str());
        }
        if (failure.empty()) { ++i; continue; }
      }
      if (!failure.empty()) break;
      CHORUS_WARN(kBootstrap, "bootstrap root dropped a connection from {}: {}", j.from.str(), read.why);
      conns.erase(conns.begin() + static_cast<long>(i));
      byRank.clear();
      for (size_t k = 0; k < conns.size(); ++k)
        if (conns[k].joined) byRank[conns[k].info.rank] = k;
    }
    if (memberGone && failure.empty() && nranks > 0 && Clock::now() >= nextWatch) {
      nextWatch = Clock::now() + kWatchPeriod;
      gone.resize(static_cast<size_t>(nranks));
      for (int r = 0; r < nranks; ++r) {
        if (byRank.count(r) || gone[static_cast<size_t>(r)]) continue;
        std::string why = memberGone(r);
        if (why.empty()) continue;
        gone[static_cast<size_t>(r)] = true;
        if (!lost.empty()) continue;
        lost = why + ", so it cannot join";
        lostTable = failed(kTableMemberGone, lost);
      }
    }
    // Once a member is lost, whoever joins is told at once, and the root waits for the other live members so
    // that they hear the reason from it too (a late one would otherwise find no root, or blame its host).
    if (!lost.empty() && failure.empty())
      for (auto& c : conns)
        if (c.joined && !c.answered) answer(c, lostTable);
  }
  if (failure.empty() && lost.empty() && !settled())
    failure = fmt::format("only {} of {} ranks joined within {} s", byRank.size(), nranks, timeoutSec);
  std::vector<uint8_t> table;
  if (!failure.empty()) {
    table = failed(kTableRefused, failure);
  } else if (!lost.empty()) {
    table = lostTable;
  } else {
    Writer w;
    w.put<uint32_t>(kTableOk);
    w.put<uint64_t>(randomU64());
    w.put<int32_t>(nranks);
    for (int r = 0; r < nranks; ++r) putInfo(w, conns[byRank[r]].info);
    table = w.take();
  }
  for (auto& c : conns)
    if (c.joined && !c.answered) answer(c, table);
}

void encodeUniqueId(const UniqueIdData& d, chorusUniqueId* id) {
  std::memset(id, 0, sizeof *id);
  Writer w;
  w.put<uint32_t>(kIdMagic);
  w.put<uint32_t>(kBootVersion);
  w.put<uint64_t>(d.secret);
  w.put<uint32_t>(d.root.len);
  std::vector<uint8_t> bytes = w.take();
  std::memcpy(id->internal, bytes.data(), bytes.size());
  static_assert(sizeof(sockaddr_in6) + 20 <= CHORUS_UNIQUE_ID_BYTES);
  std::memcpy(id->internal + bytes.size(), &d.root.ss, d.root.len);
}

UniqueIdData decodeUniqueId(const chorusUniqueId& id) {
  uint32_t magic, version, len;
  UniqueIdData d;
  std::memcpy(&magic, id.internal, 4);
  std::memcpy(&version, id.internal + 4, 4);
  std::memcpy(&d.secret, id.internal + 8, 8);
  std::memcpy(&len, id.internal + 16, 4);
  if (magic != kIdMagic)
    fail(chorusInvalidArgument, "commId is not a Chorus unique id (bad magic): pass the id from chorusGetUniqueId");
  if (version != kBootVersion)
    fail(chorusInvalidArgument, "commId has version {}, this library speaks {}", version, kBootVersion);
  if (len != sizeof(sockaddr_in) && len != sizeof(sockaddr_in6))
    fail(chorusInvalidArgument, "commId holds a malformed root address (length {})", len);
  std::memcpy(&d.root.ss, id.internal + 20, len);
  d.root.len = len;
  return d;
}

void startRoot(Fd listener, uint64_t secret, double timeoutSec) {
  std::thread(serveRoot, std::move(listener), secret, timeoutSec, nullptr).detach();
}

BootstrapResult exchangeWithRoot(const UniqueIdData& root, const RankInfo& mine, Deadline deadline) {
  std::string who = "the bootstrap root at " + root.root.str();
  // A rendezvous round's root runs in its host's process: when that is gone, fail now (Note [Members gone]), not
  // after one more round of the retries below, which also catch chorusRemoteError.
  bool hostLost = false;
  auto hostGone = [&] {
    if (!root.memberGone) return;
    std::string why = root.memberGone(0);
    if (why.empty()) return;
    hostLost = true;
    fail(chorusRemoteError, "{} will not answer, as its host {}", who, why);
  };
  // Waits so long at most before looking again.
  auto step = [&] { return root.memberGone ? std::min(deadline, Clock::now() + kWatchPeriod) : deadline; };
  // Network I/O of the exchange: true when it went through, false when the root closed the connection first
  // (chorusRemoteError), which is tried again below; anything else is thrown.
  auto went = [](auto&& io) {
    try {
      io();
      return true;
    } catch (const Error& e) {
      if (e.code() != chorusRemoteError) throw;
      return false;
    }
  };
  const auth::Nonce nonce = auth::freshNonce();
  Writer w;
  w.put<uint32_t>(kBootMagic);
  w.put<uint32_t>(kBootVersion);
  w.put(nonce);
  putInfo(w, mine);
  const std::vector<uint8_t> join = w.take();
  std::vector<uint8_t> frame;
  // A connection that a root's listener took but nobody accepted (a rendezvous root that just finished, Note
  // [Rendezvous]) is reset before the challenge: connect again. A rendezvous joiner also tries again when a root
  // drops it after the challenge, as that root may serve another round on the same port; others fail at once.
  for (;;) {
    if (Clock::now() >= deadline) fail(chorusTimeout, "could not join {} before the deadline", who);
    hostGone();
    Fd fd;
    try {
      fd = connectTo(root.root, step());
    } catch (const Error& e) {
      if (e.code() != chorusTimeout || !root.memberGone) throw;
      continue;
    }
    Challenge c;
    if (!went([&] { recvAll(fd.get(), &c, sizeof c, deadline, who); })) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    if (c.magic != kChallengeMagic) fail(chorusRemoteError, "{} is not a Chorus bootstrap root (bad magic)", who);
    if (c.version != kBootVersion)
      fail(chorusInvalidUsage, "{} speaks bootstrap version {}, this library {}: mixed Chorus versions", who,
           c.version, kBootVersion);
    std::vector<uint8_t> signedJoin = join;
    const auth::Mac proof = auth::mac(joinKey(root.secret), c.nonce.data(), c.nonce.size(), join.data(), join.size());
    signedJoin.insert(signedJoin.end(), proof.begin(), proof.end());
    bool answered = false;
    try {
      sendFrame(fd.get(), signedJoin, deadline, who);
      while (root.memberGone && !waitReadable(fd.get(), step())) {
        hostGone();
        if (Clock::now() >= deadline) fail(chorusTimeout, "{} did not answer before the deadline", who);
      }
      frame = recvFrame(fd.get(), kMaxTableFrame, deadline, who);
      answered = true;
    } catch (const Error& e) {
      if (e.code() != chorusRemoteError || !root.rendezvous || hostLost) throw;
    }
    if (answered) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (frame.size() < sizeof(auth::Mac) ||
      !auth::equal(auth::mac(tableKey(root.secret), nonce.data(), nonce.size(), frame.data(),
                             frame.size() - sizeof(auth::Mac)),
                   frame.data() + frame.size() - sizeof(auth::Mac)))
    fail(chorusRemoteError, "{} did not prove that it knows the communicator's secret (a stranger, or the root of "
         "another job at that address)", who);
  frame.resize(frame.size() - sizeof(auth::Mac));
  return decodeTable(frame, mine.nranks, who);
}

void decodeJoin(const std::vector<uint8_t>& payload, const std::string& who, auth::Nonce* nonce, RankInfo* info) {
  Reader rd(payload, who);
  if (rd.get<uint32_t>() != kBootMagic) fail(chorusRemoteError, "malformed bootstrap frame from {}: bad magic", who);
  if (rd.get<uint32_t>() != kBootVersion)
    fail(chorusRemoteError, "malformed bootstrap frame from {}: another version", who);
  *nonce = rd.get<auth::Nonce>();
  *info = getInfo(rd);
}

BootstrapResult decodeTable(const std::vector<uint8_t>& frame, int nranks, const std::string& who) {
  Reader rd(frame, who);
  if (uint32_t status = rd.get<uint32_t>(); status != kTableOk)
    fail(status == kTableMemberGone ? chorusRemoteError : chorusInvalidUsage,
         "communicator creation failed at the bootstrap root: {}", rd.getString(4096));
  BootstrapResult res;
  res.commId = rd.get<uint64_t>();
  int n = rd.get<int32_t>();
  if (n != nranks) fail(chorusRemoteError, "{} answered with {} ranks, expected {}", who, n, nranks);
  for (int r = 0; r < n; ++r) {
    res.ranks.push_back(getInfo(rd));
    if (res.ranks.back().rank != r) fail(chorusRemoteError, "{} answered with rank {} in place {}", who,
                                         res.ranks.back().rank, r);
  }
  return res;
}

}  // namespace chorus
