// Failures across real processes: a rank SIGKILLed mid-AllReduce, garbage and impostors at the bootstrap
// root while a communicator forms, a cross-process call mismatch, a rank that exits without destroying, and a
// member of a split or shrink that is gone before it joins.
//
// The test binary is also the worker program: main() runs a worker scenario when given --worker=<name>
// (re-executed via the path of /proc/self/exe, either by chorusrun or forked here with CHORUS_RANK,
// CHORUS_NRANKS, CHORUS_ROOT and CHORUS_SECRET set). Workers report on stdout with lines "@@KEY fields...".
// Every child runs in its own process group, dies with this process (PR_SET_PDEATHSIG), and is waited for
// with a deadline; whatever is still running when a test ends is killed, so nothing is left behind.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "lib/base/auth.h"
#include "test/ports.h"
#include "test/procs.h"
#include "test/watchdog.h"


namespace {

using namespace chorus::test;

chorusComm_t initOrDie() {
  chorusComm_t comm = nullptr;
  int64_t t0 = monoNs();
  chorusResult_t rc = chorusCommInitFromEnv(&comm);
  if (rc != chorusSuccess) {
    say("@@RC %d %lld %lld %s", int(rc), (long long)monoNs(), (long long)((monoNs() - t0) / 1000000),
        chorusGetLastError(nullptr));
    finish(20);
  }
  return comm;
}

// Loops AllReduce until it fails; prints @@READY after the first success and @@ERR <rc> <time ns> <text>.
int workerLoop() {
  chorusComm_t comm = initOrDie();
  int rank = -1;
  chorusCommUserRank(comm, &rank);
  std::vector<float> buf(size_t(1) << 20, 1.0f);
  for (bool ready = false;;) {
    chorusResult_t rc = chorusAllReduce(buf.data(), buf.data(), buf.size(), chorusFloat32, chorusMax, comm, nullptr);
    if (rc != chorusSuccess) {
      int64_t t = monoNs();
      say("@@ERR %d %lld %s", int(rc), (long long)t, chorusGetLastError(nullptr));
      chorusCommDestroy(comm);  // must not hang on a broken communicator (the parent bounds it)
      finish(10);
    }
    if (!ready) {
      say("@@READY %d", rank);
      ready = true;
    }
  }
}

// Rank 0 starts the root at once; the others join after CHORUS_TEST_JOIN_DELAY_MS. Then a checked AllReduce.
int workerForm() {
  int rank = envInt("CHORUS_RANK", -1);
  if (rank != 0) usleep(useconds_t(envInt("CHORUS_TEST_JOIN_DELAY_MS", 0)) * 1000);
  chorusComm_t comm = initOrDie();
  int n = 0;
  chorusCommCount(comm, &n);
  const size_t k = 100003;
  std::vector<int32_t> in(k), out(k, -1);
  for (size_t i = 0; i < k; ++i) in[i] = rank * 1000 + int32_t(i % 1000);
  chorusResult_t rc = chorusAllReduce(in.data(), out.data(), k, chorusInt32, chorusSum, comm, nullptr);
  if (rc != chorusSuccess) {
    say("@@FAIL allreduce %d %s", int(rc), chorusGetLastError(nullptr));
    finish(1);
  }
  for (size_t i = 0; i < k; ++i) {
    int32_t want = 1000 * n * (n - 1) / 2 + n * int32_t(i % 1000);
    if (out[i] != want) {
      say("@@FAIL wrong value at %zu: %d, expected %d", i, out[i], want);
      finish(1);
    }
  }
  if (chorusCommDestroy(comm) != chorusSuccess) {
    say("@@FAIL destroy %s", chorusGetLastError(nullptr));
    finish(1);
  }
  say("@@OK %d", rank);
  finish(0);
}

// Rank 1 calls Broadcast (root 1), the others AllReduce, on CHORUS_TEST_COUNT floats.
// Prints @@RC <rc> <time ns> <ms> <text>; after a success also @@NEXT for a following Barrier.
int workerMismatch() {
  chorusComm_t comm = initOrDie();
  int rank = -1;
  chorusCommUserRank(comm, &rank);
  const size_t k = size_t(envInt("CHORUS_TEST_COUNT", 1000));
  std::vector<float> buf(k, 1.0f);
  int64_t t0 = monoNs();
  chorusResult_t rc = rank == 1 ? chorusBroadcast(buf.data(), buf.data(), k, chorusFloat32, 1, comm, nullptr)
                                : chorusAllReduce(buf.data(), buf.data(), k, chorusFloat32, chorusSum, comm, nullptr);
  say("@@RC %d %lld %lld %s", int(rc), (long long)monoNs(), (long long)((monoNs() - t0) / 1000000),
      rc == chorusSuccess ? "" : chorusGetLastError(nullptr));
  if (rc == chorusSuccess) {
    t0 = monoNs();
    chorusResult_t next = chorusBarrier(comm, nullptr);
    say("@@NEXT %d %lld %lld %s", int(next), (long long)monoNs(), (long long)((monoNs() - t0) / 1000000),
        next == chorusSuccess ? "" : chorusGetLastError(nullptr));
    rc = next;
  }
  chorusCommDestroy(comm);
  // A survivor that saw the death leaves a moment later: rank 2 did exit first, but when chorusrun wakes after
  // both have exited, waitpid may hand it either, and the launcher test asserts it reports the first failure.
  if (rc != chorusSuccess) usleep(300 * 1000);
  finish(rc == chorusSuccess ? 0 : 10);
}

// Rank 2 exits with code 3 right after init, without destroying; the others then call AllReduce.
int workerCrash() {
  chorusComm_t comm = initOrDie();
  int rank = -1;
  chorusCommUserRank(comm, &rank);
  if (rank == 2) {
    say("@@CRASH %d", rank);
    finish(3);
  }
  std::vector<float> buf(size_t(1) << 20, 1.0f);
  int64_t t0 = monoNs();
  chorusResult_t rc = chorusAllReduce(buf.data(), buf.data(), buf.size(), chorusFloat32, chorusSum, comm, nullptr);
  say("@@RC %d %lld %lld %s", int(rc), (long long)monoNs(), (long long)((monoNs() - t0) / 1000000),
      rc == chorusSuccess ? "" : chorusGetLastError(nullptr));
  chorusCommDestroy(comm);
  // A survivor that saw the death leaves a moment later: rank 2 did exit first, but when chorusrun wakes after
  // both have exited, waitpid may hand it either, and the launcher test asserts it reports the first failure.
  if (rc != chorusSuccess) usleep(300 * 1000);
  finish(rc == chorusSuccess ? 0 : 10);
}

// Rank CHORUS_TEST_GONE leaves 200 ms after init without destroying: it exits, or with CHORUS_TEST_STOP=1 stops
// itself (SIGSTOP). 500 ms after init the others call chorusCommSplit (CHORUS_TEST_CALL=split, one color) or
// chorusCommShrink excluding nobody (shrink), and print @@RC <rc> <time ns> <ms> <text>.
int workerGone() {
  chorusComm_t comm = initOrDie();
  int rank = -1;
  chorusCommUserRank(comm, &rank);
  if (rank == envInt("CHORUS_TEST_GONE", -1)) {
    usleep(200 * 1000);
    say("@@GONE %d", rank);
    if (envInt("CHORUS_TEST_STOP", 0) == 1) raise(SIGSTOP);
    finish(3);
  }
  usleep(500 * 1000);
  const char* call = std::getenv("CHORUS_TEST_CALL");
  chorusComm_t sub = nullptr;
  int64_t t0 = monoNs();
  chorusResult_t rc = call != nullptr && std::string(call) == "shrink"
                          ? chorusCommShrink(comm, nullptr, 0, &sub, nullptr, CHORUS_SHRINK_DEFAULT)
                          : chorusCommSplit(comm, 0, rank, &sub, nullptr);
  say("@@RC %d %lld %lld %s", int(rc), (long long)monoNs(), (long long)((monoNs() - t0) / 1000000),
      rc == chorusSuccess ? "" : chorusGetLastError(nullptr));
  if (sub != nullptr) chorusCommDestroy(sub);
  chorusCommAbort(comm);
  chorusCommDestroy(comm);
  finish(rc == chorusSuccess ? 0 : 10);
}

int runWorker(const std::string& name) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  if (name == "loop") return workerLoop();
  if (name == "form") return workerForm();
  if (name == "mismatch") return workerMismatch();
  if (name == "crash") return workerCrash();
  if (name == "gone") return workerGone();
  std::fprintf(stderr, "unknown worker scenario '%s'\n", name.c_str());
  return 2;
}

// "@@RC <rc> <time ns> <ms> <text>" or "@@ERR <rc> <time ns> <text>".
struct Report {
  int rc = -1;
  int64_t at = 0;
  long long ms = -1;
  std::string text;
};
Report parseReport(const std::string& fields, bool withMs) {
  Report r;
  std::istringstream in(fields);
  long long at = 0;
  in >> r.rc >> at;
  r.at = at;
  if (withMs) in >> r.ms;
  std::getline(in, r.text);
  if (!r.text.empty() && r.text[0] == ' ') r.text.erase(0, 1);
  return r;
}

// A survivor's "@@RC" report, which must be a chorusRemoteError within 5 s of its call.
Report remoteErrorWithin5s(const Child& c) {
  auto f = c.field("RC");
  EXPECT_TRUE(f.has_value()) << "no @@RC report";
  if (!f) return Report{};
  Report rep = parseReport(*f, true);
  EXPECT_EQ(rep.rc, int(chorusRemoteError));
  EXPECT_LT(rep.ms, 5000);
  return rep;
}

int connectLocal(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool sendAll(int fd, const void* p, size_t n) {
  auto b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    b += w;
    n -= size_t(w);
  }
  return true;
}

// True when the peer closes (or resets) fd within `seconds`.
bool closedByPeer(int fd, double seconds) {
  int64_t t0 = monoNs();
  char buf[256];
  while (secondsSince(t0) < seconds) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
  return false;
}

// The TCP ports the process of this job whose environment holds `marker` and `rankVar` listens on.
std::set<uint16_t> listeningPortsOf(const std::string& marker, const std::string& rankVar) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream envf(e.path() / "environ");
    std::string env((std::istreambuf_iterator<char>(envf)), std::istreambuf_iterator<char>());
    const std::string nul(1, '\0');
    auto has = [&](const std::string& v) { return (nul + env + nul).find(nul + v + nul) != std::string::npos; };
    if (has(marker) && has(rankVar)) return chorus::test::listeningPorts(e.path());
  }
  return {};
}

const int kRemoteError = chorusRemoteError, kInvalidUsage = chorusInvalidUsage;

// A survivor must name the rank that died. The failure mode this guards against: rank A fails because rank D
// died and drops its connections; a rank B sending to A sees the broken connection first and blames A. The
// control connection carries A's reason (naming D), and the transport reports it instead of the symptom.
constexpr const char* kLostReason =
    "a survivor blamed a live rank (\"the peer has probably died\") instead of the dead rank";
bool blamesALiveRank(const std::string& text, int dead) {
  return text.find("rank " + std::to_string(dead)) == std::string::npos &&
         text.find("probably died") != std::string::npos;
}

// =========================================================================================================

TEST(Failures, SigkillOneRankOfFourMidAllReduce) {
  Watchdog wd(60, killAllChildren);
  const int n = 4, victim = 2;
  const int port = freePort();
  const uint64_t secret = randomSecret();
  Procs p;
  for (int r = 0; r < n; ++r) p.spawn({selfExe(), "--worker=loop"}, rankEnv(r, n, port, secret));
  ASSERT_TRUE(p.pumpUntil([&] {
    for (int r = 0; r < n; ++r)
      if (!p[r].field("READY")) return false;
    return true;
  }, 30)) << "the four ranks did not all complete an AllReduce\n" << p.dump();
  p.pumpUntil([] { return false; }, 0.3);  // let them loop
  for (int r = 0; r < n; ++r) ASSERT_FALSE(p[r].exited) << p.dump();

  const int64_t killedAt = monoNs();
  ASSERT_EQ(kill(p[victim].pid, SIGKILL), 0);
  bool reported = p.pumpUntil([&] {
    for (int r = 0; r < n; ++r)
      if (r != victim && !p[r].field("ERR")) return false;
    return true;
  }, 15);
  EXPECT_TRUE(reported) << "a survivor did not report an error within 15 s of the kill (hang)\n" << p.dump();
  int naming = 0;
  bool lostReason = false;
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    auto f = p[r].field("ERR");
    if (!f) continue;
    Report rep = parseReport(*f, false);
    double after = double(rep.at - killedAt) / 1e9;
    SCOPED_TRACE("rank " + std::to_string(r) + ": rc " + std::to_string(rep.rc) + " " + std::to_string(after) +
                 " s after the kill: " + rep.text);
    EXPECT_EQ(rep.rc, kRemoteError);
    EXPECT_GE(after, 0.0);
    EXPECT_LT(after, 2.0);
    if (rep.text.find("rank " + std::to_string(victim)) != std::string::npos) ++naming;
    else if (blamesALiveRank(rep.text, victim)) lostReason = true;
    else ADD_FAILURE() << "the error does not name the dead rank " << victim;
  }
  EXPECT_GE(naming, 1) << "no survivor names the dead rank";
  EXPECT_TRUE(p.waitAllExited(10)) << "a survivor did not exit after its error\n" << p.dump();
  for (int r = 0; r < n; ++r)
    if (r != victim && p[r].exited) {
      EXPECT_EQ(p[r].exitCode(), 10) << "rank " << r << "\n" << p[r].output();
    }
  EXPECT_EQ(p[victim].exitCode(), 128 + SIGKILL);
  if (lostReason) ADD_FAILURE() << kLostReason << "\n" << p.dump();
}

TEST(Failures, GarbageAndWrongSecretAtTheRootWhileACommunicatorForms) {
  Watchdog wd(90, killAllChildren);
  const int port = freePort();
  const uint64_t secret = randomSecret();
  Procs p;
  // chorusrun keeps a CHORUS_ROOT and CHORUS_SECRET that are already set.
  p.spawn({chorusrunPath(), "-n", "4", "--", selfExe(), "--worker=form"},
          {"CHORUS_ROOT=127.0.0.1:" + std::to_string(port), "CHORUS_SECRET=" + hex(secret),
           "CHORUS_TEST_JOIN_DELAY_MS=2500"});
  // Rank 0 listens at once; ranks 1..3 join 2.5 s later, so everything below reaches a forming communicator.
  int silent = -1;
  int64_t t0 = monoNs();
  while (silent < 0 && secondsSince(t0) < 15 && !p[0].exited) {
    silent = connectLocal(port);
    if (silent < 0) p.pumpUntil([] { return false; }, 0.02);
  }
  ASSERT_GE(silent, 0) << "the root never listened on port " << port << "\n" << p.dump();

  std::mt19937_64 rng(12345);
  // 1. random bytes
  int junk = connectLocal(port);
  ASSERT_GE(junk, 0);
  std::vector<uint8_t> bytes(300);
  for (auto& b : bytes) b = uint8_t(rng());
  uint32_t junkLen = uint32_t(bytes.size() - 4);  // a plausible length, so the root parses the random payload
  std::memcpy(bytes.data(), &junkLen, 4);
  EXPECT_TRUE(sendAll(junk, bytes.data(), bytes.size()));
  // 2. a huge length prefix
  int huge = connectLocal(port);
  ASSERT_GE(huge, 0);
  uint32_t hugeLen = 0xFFFFFFF0u;
  EXPECT_TRUE(sendAll(huge, &hugeLen, sizeof hugeLen));
  EXPECT_TRUE(sendAll(huge, bytes.data(), 64));
  // 3. the right magic and version, posing as rank 1 of 4: one with a proof made without the secret, one with a
  // proof made with it but over a nonce the root never sent (what a handshake recorded elsewhere, replayed, is)
  auto impostorFrame = [&](bool knowsSecret) {
    std::vector<uint8_t> f;
    auto put = [&](const void* v, size_t n) { f.insert(f.end(), (const uint8_t*)v, (const uint8_t*)v + n); };
    auto put32 = [&](uint32_t v) { put(&v, 4); };
    auto putStr = [&](const std::string& s) { put32(uint32_t(s.size())); put(s.data(), s.size()); };
    put32(0x43484253u);  // "CHBS"
    put32(6);            // bootstrap version (kBootVersion)
    chorus::auth::Nonce nonce{};
    put(nonce.data(), nonce.size());
    put32(1), put32(4), put32(uint32_t(getpid()));  // rank, nranks, pid
    putStr("impostor");
    putStr("impostor-host-id");
    put32(0);  // no transport addresses
    chorus::auth::Nonce stale{};  // the challenge of some other connection
    stale[0] = 7;
    chorus::auth::Mac proof{};
    if (knowsSecret) proof = chorus::auth::mac(chorus::auth::derive(secret, "chorus bootstrap join", 0), stale.data(),
                                               stale.size(), f.data(), f.size());
    put(proof.data(), proof.size());
    return f;
  };
  int impostor = connectLocal(port), replayer = connectLocal(port);
  ASSERT_GE(impostor, 0);
  ASSERT_GE(replayer, 0);
  for (auto [fd, knows] : {std::pair{impostor, false}, std::pair{replayer, true}}) {
    std::vector<uint8_t> f = impostorFrame(knows);
    uint32_t len = uint32_t(f.size());
    EXPECT_TRUE(sendAll(fd, &len, 4));
    EXPECT_TRUE(sendAll(fd, f.data(), f.size()));
  }
  // 4. a half frame that never completes, and a connection closed at once
  int partial = connectLocal(port);
  ASSERT_GE(partial, 0);
  uint32_t partialLen = 100;
  EXPECT_TRUE(sendAll(partial, &partialLen, 4));
  EXPECT_TRUE(sendAll(partial, bytes.data(), 10));
  int quitter = connectLocal(port);
  if (quitter >= 0) close(quitter);

  // 5. the same at rank 0's transport ports while it waits for the others (it has no lower rank to accept from,
  // so they wait in its listener's backlog until the communicator is formed and the listener closes)
  std::vector<int> transportStrangers;
  std::set<uint16_t> rank0Ports;
  for (int64_t t1 = monoNs(); secondsSince(t1) < 2.0; p.pumpUntil([] { return false; }, 0.02)) {  // just started
    rank0Ports = listeningPortsOf("CHORUS_ROOT=127.0.0.1:" + std::to_string(port), "CHORUS_RANK=0");
    rank0Ports.erase(uint16_t(port));
    if (!rank0Ports.empty()) break;
  }
  for (uint16_t tport : rank0Ports) {
    for (int k = 0; k < 3; ++k) {
      int fd = connectLocal(tport);
      if (fd < 0) continue;
      if (k == 0) sendAll(fd, bytes.data(), bytes.size());                    // random bytes
      if (k == 1) sendAll(fd, &hugeLen, sizeof hugeLen);                      // an oversized length
      if (k == 2) sendAll(fd, bytes.data(), 20);                              // a partial Hello, then silence
      transportStrangers.push_back(fd);
    }
  }
  EXPECT_FALSE(transportStrangers.empty()) << "rank 0 had no transport port to reach";

  // The root must drop the malformed and the wrong-secret connection promptly (and never answer them).
  EXPECT_TRUE(closedByPeer(huge, 2.0)) << "the root kept a connection that announced a 4 GiB frame";
  EXPECT_TRUE(closedByPeer(impostor, 2.0)) << "the root kept a connection with the wrong secret";
  EXPECT_TRUE(closedByPeer(replayer, 2.0)) << "the root kept a connection that replayed a proof";
  EXPECT_TRUE(closedByPeer(junk, 2.0)) << "the root kept a connection that sent random bytes";

  bool done = p.waitAllExited(60);
  close(silent), close(junk), close(huge), close(impostor), close(replayer), close(partial);
  for (int fd : transportStrangers) close(fd);
  ASSERT_TRUE(done) << "chorusrun did not finish within 60 s\n" << p.dump();
  std::string out = p[0].output();
  EXPECT_EQ(p[0].exitCode(), 0) << out;
  EXPECT_EQ(p[0].count("OK"), 4) << out;
  EXPECT_EQ(p[0].count("FAIL"), 0) << out;
  EXPECT_LT(secondsSince(t0), 30.0);
  // The root logged why it dropped them (WARN is on by default).
  size_t proofs = 0;
  for (size_t at = out.find("its proof does not match"); at != std::string::npos;
       at = out.find("its proof does not match", at + 1))
    ++proofs;
  EXPECT_EQ(proofs, 2u) << out;  // the impostor and the replayer
  EXPECT_NE(out.find("4294967280-byte frame"), std::string::npos) << out;
  EXPECT_NE(out.find("bad magic"), std::string::npos) << out;
}

TEST(Failures, BroadcastVersusAllReduceAcrossProcesses) {
  Watchdog wd(60, killAllChildren);
  const int n = 4;
  const int port = freePort();
  const uint64_t secret = randomSecret();
  Procs p;
  for (int r = 0; r < n; ++r) {
    auto env = rankEnv(r, n, port, secret);
    env.push_back("CHORUS_TEST_COUNT=" + std::to_string(8 << 20));  // 32 MiB: more than socket buffers hold
    p.spawn({selfExe(), "--worker=mismatch"}, env);
  }
  ASSERT_TRUE(p.waitAllExited(30)) << "a rank hung on the mismatch\n" << p.dump();
  int naming = 0;
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " (" + (r == 1 ? "Broadcast" : "AllReduce") + ")\n" +
                 p[r].output());
    auto f = p[r].field("RC");
    ASSERT_TRUE(f.has_value());
    Report rep = parseReport(*f, true);
    EXPECT_TRUE(rep.rc == kInvalidUsage || rep.rc == kRemoteError) << rep.rc;
    EXPECT_LT(rep.ms, 5000);
    EXPECT_EQ(p[r].exitCode(), 10);
    if (rep.text.find("Broadcast") != std::string::npos && rep.text.find("AllReduce") != std::string::npos)
      ++naming;
  }
  EXPECT_GE(naming, 1) << "no rank's error names both calls";
}

TEST(Failures, RankExitsWithoutDestroyUnderChorusrun) {
  Watchdog wd(60, killAllChildren);
  Procs p;
  int64_t t0 = monoNs();
  p.spawn({chorusrunPath(), "-n", "4", "--", selfExe(), "--worker=crash"}, {});
  ASSERT_TRUE(p.waitAllExited(30)) << "chorusrun did not finish\n" << p.dump();
  std::string out = p[0].output();
  EXPECT_EQ(p[0].exitCode(), 3) << out;
  EXPECT_NE(out.find("rank 2"), std::string::npos) << out;
  EXPECT_NE(out.find("exited with code 3"), std::string::npos) << out;
  EXPECT_LT(secondsSince(t0), 15.0);
}

// Without a launcher to stop them, the survivors must fail on their own.
TEST(Failures, RankExitsWithoutDestroySurvivorsFailOnTheirOwn) {
  Watchdog wd(60, killAllChildren);
  const int n = 4;
  const int port = freePort();
  const uint64_t secret = randomSecret();
  Procs p;
  for (int r = 0; r < n; ++r) p.spawn({selfExe(), "--worker=crash"}, rankEnv(r, n, port, secret));
  ASSERT_TRUE(p.waitAllExited(30)) << "a survivor hung\n" << p.dump();
  EXPECT_EQ(p[2].exitCode(), 3) << p[2].output();
  int naming = 0;
  bool lostReason = false;
  for (int r = 0; r < n; ++r) {
    if (r == 2) continue;
    SCOPED_TRACE("rank " + std::to_string(r) + "\n" + p[r].output());
    Report rep = remoteErrorWithin5s(p[r]);
    if (rep.text.find("rank 2") != std::string::npos) ++naming;
    else if (blamesALiveRank(rep.text, 2)) lostReason = true;
    else ADD_FAILURE() << "the error does not name the dead rank 2";
    EXPECT_NE(p[r].exitCode(), 0);
  }
  EXPECT_GE(naming, 1) << "no survivor names the dead rank";
  if (lostReason) ADD_FAILURE() << kLostReason << "\n" << p.dump();
}

// A member of a split or shrink that is gone before it joins: the others fail within seconds naming it, not after
// the creation timeout (120 s here). Exited: found by its pid on this host (by the heartbeats with a host id per
// rank); stopped: by the heartbeats (CHORUS_PEER_TIMEOUT=1). Gone rank 0 hosts the round's root.
TEST(Failures, SplitAndShrinkFailNamingAMemberThatIsGone) {
  Watchdog wd(120, killAllChildren);
  struct Case {
    const char* call;
    int gone;
    bool stop;
  };
  for (const Case& k : {Case{"split", 2, false}, Case{"split", 0, false}, Case{"shrink", 3, false},
                        Case{"split", 1, true}}) {
    SCOPED_TRACE(std::string(k.call) + ", rank " + std::to_string(k.gone) + (k.stop ? " stopped" : " exited"));
    const int n = 4;
    const int port = freePort();
    const uint64_t secret = randomSecret();
    Procs p;
    for (int r = 0; r < n; ++r) {
      std::vector<std::string> env = rankEnv(r, n, port, secret);
      env.insert(env.end(), {"CHORUS_TEST_GONE=" + std::to_string(k.gone), std::string("CHORUS_TEST_CALL=") + k.call,
                             std::string("CHORUS_TEST_STOP=") + (k.stop ? "1" : "0"), "CHORUS_INIT_TIMEOUT=120",
                             "CHORUS_PEER_TIMEOUT=1"});
      p.spawn({selfExe(), "--worker=gone"}, env);
    }
    ASSERT_TRUE(p.pumpUntil([&] {
      for (int r = 0; r < n; ++r)
        if (r != k.gone && !(p[r].exited && p[r].fd < 0)) return false;
      return true;
    }, 30)) << "a survivor hung\n" << p.dump();
    for (int r = 0; r < n; ++r) {
      if (r == k.gone) continue;
      SCOPED_TRACE("rank " + std::to_string(r) + "\n" + p[r].output());
      Report rep = remoteErrorWithin5s(p[r]);
      EXPECT_NE(rep.text.find("rank " + std::to_string(k.gone) + " "), std::string::npos)
          << "the error does not name the gone rank";
    }
  }
}

}  // namespace

int main(int argc, char** argv) { return chorus::test::testsOrWorker(argc, argv, runWorker); }
