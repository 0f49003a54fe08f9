// Liveness across real processes (Note [Liveness] in lib/comm/liveness.h): a rank stopped with SIGSTOP is declared
// silent within CHORUS_PEER_TIMEOUT + 2 s by every other rank, whether they wait for it inside a call, sit idle, or
// do not watch it; ranks that leave normally are not taken for silent; and ranks busy on overloaded cores raise no
// false alarm. The test binary is also the worker program (test/procs.h).
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "test/comms.h"
#include "test/procs.h"
#include "test/shell.h"
#include "test/watchdog.h"

namespace {

using namespace chorus::test;

constexpr int kPeerTimeout = 2;  // seconds: CHORUS_PEER_TIMEOUT of these tests

// =========================================================================================================
// Worker side (LIVENESS_STOP: the rank that stops itself with SIGSTOP once every rank is ready)

chorusComm_t initOrDie() {
  chorusComm_t comm = nullptr;
  if (chorusCommInitFromEnv(&comm) != chorusSuccess) {
    say("@@INITFAIL %s", chorusGetLastError(nullptr));
    finish(20);
  }
  return comm;
}

bool allReduceOnce(chorusComm_t comm) {
  int32_t v = 1;
  return chorusAllReduce(&v, &v, 1, chorusInt32, chorusSum, comm, nullptr) == chorusSuccess;
}

void stopIfChosen(int rank) {
  if (rank != envInt("LIVENESS_STOP", -1)) return;
  say("@@STOPPING %lld", (long long)monoNs());
  raise(SIGSTOP);
  finish(0);  // continued: the test is over
}

// Every rank calls AllReduce in a loop; the stopped rank's peers wait for it inside a call.
int workerInCall() {
  chorusComm_t comm = initOrDie();
  const int rank = envInt("CHORUS_RANK", -1);
  for (int i = 0; i < 20; ++i)
    if (!allReduceOnce(comm)) {
      say("@@EARLY %s", chorusGetLastError(comm));
      finish(21);
    }
  say("@@READY 1");
  stopIfChosen(rank);
  for (;;) {
    int32_t v = 1;
    const chorusResult_t rc = chorusAllReduce(&v, &v, 1, chorusInt32, chorusSum, comm, nullptr);
    if (rc != chorusSuccess) {
      say("@@ERR %d %lld %s", int(rc), (long long)monoNs(), chorusGetLastError(comm));
      const int64_t t0 = monoNs();
      chorusCommDestroy(comm);  // with a peer stopped: bounded too
      say("@@DESTROYED %lld", (long long)((monoNs() - t0) / 1000000));
      finish(0);
    }
  }
}

// After one AllReduce the survivors sit idle, looking at chorusCommGetAsyncError, then call once more.
int workerIdle() {
  chorusComm_t comm = initOrDie();
  const int rank = envInt("CHORUS_RANK", -1);
  if (!allReduceOnce(comm)) finish(21);
  say("@@READY 1");
  stopIfChosen(rank);
  const int64_t deadline = monoNs() + int64_t(kPeerTimeout + 10) * 1000000000;
  chorusResult_t async = chorusSuccess;
  while (async == chorusSuccess && monoNs() < deadline) {
    usleep(20000);
    chorusCommGetAsyncError(comm, &async);
  }
  say("@@ASYNC %d %lld", int(async), (long long)monoNs());
  int32_t v = 1;
  const int64_t t0 = monoNs();
  const chorusResult_t rc = chorusAllReduce(&v, &v, 1, chorusInt32, chorusSum, comm, nullptr);
  say("@@ERR %d %lld %lld %s", int(rc), (long long)monoNs(), (long long)((monoNs() - t0) / 1000000),
      chorusGetLastError(comm));
  finish(0);
}

// Rank 0 destroys its communicator and exits; the others stay idle for longer than the timeout, then report.
int workerGoodbye() {
  chorusComm_t comm = initOrDie();
  const int rank = envInt("CHORUS_RANK", -1);
  if (!allReduceOnce(comm)) finish(21);
  say("@@READY 1");
  if (rank == 0) {
    chorusCommDestroy(comm);
    finish(0);
  }
  usleep((kPeerTimeout + 2) * 1000000);
  chorusResult_t async = chorusInternalError;
  chorusCommGetAsyncError(comm, &async);
  say("@@ASYNC %d %s", int(async), async == chorusSuccess ? "" : chorusGetLastError(comm));
  chorusCommDestroy(comm);
  finish(0);
}

// Collectives for LIVENESS_SECONDS while a thread per rank burns its core: nothing may be declared silent.
int workerLoaded() {
  chorusComm_t comm = initOrDie();
  std::atomic<bool> stop{false};
  std::thread burner([&] {
    volatile uint64_t x = 0;
    while (!stop.load(std::memory_order_relaxed)) x = x + 1;
  });
  const int64_t end = monoNs() + int64_t(envInt("LIVENESS_SECONDS", 10)) * 1000000000;
  std::vector<float> buf(1 << 16, 1.0f);
  int calls = 0;
  chorusResult_t rc = chorusSuccess;
  while (rc == chorusSuccess) {
    const size_t count = size_t{1} << (calls % 17);
    rc = chorusAllReduce(buf.data(), buf.data(), count, chorusFloat32, chorusSum, comm, nullptr);
    ++calls;
    int32_t more = monoNs() < end;  // every rank stops after the same call
    if (rc == chorusSuccess) rc = chorusAllReduce(&more, &more, 1, chorusInt32, chorusMin, comm, nullptr);
    if (rc == chorusSuccess && more == 0) break;
  }
  stop = true;
  burner.join();
  say("@@DONE %d %d %s", int(rc), calls, rc == chorusSuccess ? "" : chorusGetLastError(comm));
  chorusCommDestroy(comm);
  finish(0);
}

// Under scripts/netns-cluster, one rank per host: the rank LIVENESS_CUT cuts its own host off (LIVENESS_HOW: "down",
// its link set down; "drop", every packet dropped both ways) once every rank is ready, and all keep calling
// AllReduce: every rank must fail within the bound. Lines are "@@ERR <rank> <rc> <ns> <text>" on stdout.
int workerCut() {
  chorusComm_t comm = initOrDie();
  const int rank = envInt("CHORUS_RANK", -1);
  for (int i = 0; i < 20; ++i)
    if (!allReduceOnce(comm)) finish(21);
  if (rank == envInt("LIVENESS_CUT", -1)) {
    const std::string how = std::getenv("LIVENESS_HOW") ? std::getenv("LIVENESS_HOW") : "down";
    const char* cmd = how == "drop" ? "iptables -A OUTPUT -o eth0 -j DROP && iptables -A INPUT -i eth0 -j DROP"
                                    : "ip link set eth0 down";
    say("@@CUT %d %lld %s", rank, (long long)monoNs(), cmd);
    if (std::system(cmd) != 0) say("@@CUTFAILED %d", rank);
  }
  for (;;) {
    int32_t v = 1;
    const chorusResult_t rc = chorusAllReduce(&v, &v, 1, chorusInt32, chorusSum, comm, nullptr);
    if (rc != chorusSuccess) {
      say("@@ERR %d %d %lld %s", rank, int(rc), (long long)monoNs(), chorusGetLastError(comm));
      finish(0);
    }
  }
}

// Under scripts/netns-cluster: rank 1's host drops every UDP datagram from the start (a firewall that passes only
// TCP); all ranks run collectives past the timeout. Lines are "@@DONE <rank> <rc> <text>".
int workerNoUdp() {
  const int rank = envInt("CHORUS_RANK", -1);
  if (rank == 1 && std::system("iptables -A INPUT -p udp -j DROP && iptables -A OUTPUT -p udp -j DROP") != 0)
    say("@@CUTFAILED %d", rank);
  chorusComm_t comm = initOrDie();
  const int64_t end = monoNs() + int64_t(kPeerTimeout + 2) * 1000000000;
  chorusResult_t rc = chorusSuccess;
  for (int32_t more = 1; rc == chorusSuccess && more != 0;) {
    more = monoNs() < end;
    rc = chorusAllReduce(&more, &more, 1, chorusInt32, chorusMin, comm, nullptr);
  }
  say("@@DONE %d %d %s", rank, int(rc), rc == chorusSuccess ? "" : chorusGetLastError(comm));
  chorusCommDestroy(comm);
  finish(0);
}

int runWorker(const std::string& name) {
  if (name == "noudp") return workerNoUdp();
  if (name == "cut") return workerCut();
  if (name == "incall") return workerInCall();
  if (name == "idle") return workerIdle();
  if (name == "goodbye") return workerGoodbye();
  if (name == "loaded") return workerLoaded();
  say("@@UNKNOWN %s", name.c_str());
  return 2;
}

// =========================================================================================================
// Parent side

struct Job {
  Procs procs;
  int n;
  explicit Job(int nranks, const std::string& worker, const std::vector<std::string>& extra) : n(nranks) {
    const int port = freePort();
    const uint64_t secret = randomSecret();
    for (int r = 0; r < n; ++r) {
      std::vector<std::string> env = rankEnv(r, n, port, secret);
      env.push_back("CHORUS_PEER_TIMEOUT=" + std::to_string(kPeerTimeout));
      env.insert(env.end(), extra.begin(), extra.end());
      procs.spawn({selfExe(), "--worker=" + worker}, env);
    }
  }
  bool allSaid(const std::string& key, double seconds, int except = -1) {
    return procs.pumpUntil([&] {
      for (int r = 0; r < n; ++r)
        if (r != except && !procs[static_cast<size_t>(r)].field(key)) return false;
      return true;
    }, seconds);
  }
  std::string said(int r, const std::string& key) { return procs[static_cast<size_t>(r)].field(key).value_or(""); }
};

// "<rc> <ns> <rest>" of an @@ERR or @@ASYNC line.
struct Outcome {
  int rc = -1;
  int64_t at = 0;
  std::string text;
};
Outcome outcome(const std::string& fields) {
  Outcome o;
  char* end = nullptr;
  o.rc = static_cast<int>(std::strtol(fields.c_str(), &end, 10));
  o.at = std::strtoll(end, &end, 10);
  o.text = end;
  return o;
}

// Every survivor's error names the stopped rank, says it stopped answering, and what each side was in.
void expectNamesTheSilentRank(const Outcome& o, int stopped, int r, const std::string& dump) {
  EXPECT_EQ(o.rc, chorusRemoteError) << "rank " << r << ": " << o.text << "\n" << dump;
  EXPECT_NE(o.text.find("rank " + std::to_string(stopped) + " (pid"), std::string::npos)
      << "rank " << r << " does not name rank " << stopped << ": " << o.text;
  EXPECT_NE(o.text.find("stopped answering"), std::string::npos) << "rank " << r << ": " << o.text;
  EXPECT_NE(o.text.find("CHORUS_PEER_TIMEOUT=" + std::to_string(kPeerTimeout)), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("its last one found it "), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("this rank is "), std::string::npos) << o.text;
}

void stoppedCase(int n, int stopped) {
  Watchdog dog(60, killAllChildren);
  Job job(n, "incall", {"LIVENESS_STOP=" + std::to_string(stopped)});
  ASSERT_TRUE(job.allSaid("READY", 30)) << job.procs.dump();
  ASSERT_TRUE(job.procs.pumpUntil([&] { return !job.said(stopped, "STOPPING").empty(); }, 10)) << job.procs.dump();
  const int64_t stoppedAt = std::strtoll(job.said(stopped, "STOPPING").c_str(), nullptr, 10);
  ASSERT_TRUE(job.allSaid("ERR", kPeerTimeout + 10, stopped)) << "survivors still waiting\n" << job.procs.dump();
  for (int r = 0; r < n; ++r) {
    if (r == stopped) continue;
    const Outcome o = outcome(job.said(r, "ERR"));
    const double after = double(o.at - stoppedAt) / 1e9;
    EXPECT_LE(after, kPeerTimeout + 2.0) << "rank " << r << " learned it " << after << " s after the stop";
    expectNamesTheSilentRank(o, stopped, r, job.procs.dump());
    EXPECT_NE(o.text.find("AllReduce #"), std::string::npos) << "rank " << r << ": " << o.text;
  }
  ASSERT_TRUE(job.allSaid("DESTROYED", 15, stopped)) << job.procs.dump();
  for (int r = 0; r < n; ++r) {
    if (r == stopped) continue;
    EXPECT_LT(std::atoi(job.said(r, "DESTROYED").c_str()), 5000) << "rank " << r << "'s destroy, ms";
  }
}

TEST(Liveness, AStoppedRankFailsThePeersWaitingForItInACall) { stoppedCase(3, 1); }

// With 5 ranks, rank 0's watchers are ranks 1 and 2: ranks 3 and 4 learn it from their notices.
TEST(Liveness, RanksThatDoNotWatchTheStoppedOneLearnItToo) { stoppedCase(5, 0); }

TEST(Liveness, IdleRanksLearnItAndTheirNextCallFailsAtOnce) {
  Watchdog dog(60, killAllChildren);
  const int n = 3, stopped = 2;
  Job job(n, "idle", {"LIVENESS_STOP=" + std::to_string(stopped)});
  ASSERT_TRUE(job.allSaid("READY", 30)) << job.procs.dump();
  ASSERT_TRUE(job.procs.pumpUntil([&] { return !job.said(stopped, "STOPPING").empty(); }, 10)) << job.procs.dump();
  const int64_t stoppedAt = std::strtoll(job.said(stopped, "STOPPING").c_str(), nullptr, 10);
  ASSERT_TRUE(job.allSaid("ERR", kPeerTimeout + 15, stopped)) << job.procs.dump();
  for (int r = 0; r < n; ++r) {
    if (r == stopped) continue;
    const Outcome async = outcome(job.said(r, "ASYNC"));
    EXPECT_EQ(async.rc, chorusRemoteError) << "rank " << r << "'s chorusCommGetAsyncError\n" << job.procs.dump();
    EXPECT_LE(double(async.at - stoppedAt) / 1e9, kPeerTimeout + 2.0) << "rank " << r;
    // "@@ERR rc ns ms text": the call after it fails at once (ms), naming the stopped rank.
    const std::string fields = job.said(r, "ERR");
    Outcome call = outcome(fields);
    char* end = nullptr;
    const long ms = std::strtol(call.text.c_str(), &end, 10);
    call.text = end;
    EXPECT_LT(ms, 500) << "rank " << r << "'s next call took " << ms << " ms";
    expectNamesTheSilentRank(call, stopped, r, job.procs.dump());
    EXPECT_NE(call.text.find("this rank is idle after AllReduce #0"), std::string::npos) << call.text;
  }
}

TEST(Liveness, ARankThatLeavesNormallyIsNotTakenForSilent) {
  Watchdog dog(60, killAllChildren);
  const int n = 3;
  Job job(n, "goodbye", {});
  ASSERT_TRUE(job.procs.waitAllExited(kPeerTimeout + 30)) << job.procs.dump();
  for (int r = 1; r < n; ++r)
    EXPECT_EQ(outcome(job.said(r, "ASYNC")).rc, chorusSuccess) << "rank " << r << "\n" << job.procs.dump();
}

// Strangers send the heartbeat sockets junk, oversized datagrams, datagrams of the right size with a wrong MAC
// and ones of another communicator while the ranks run collectives: nothing is disturbed.
TEST(Liveness, StrangersDatagramsAreDropped) {
  Watchdog dog(90, killAllChildren);
  const int n = 3;
  Job job(n, "loaded", {"LIVENESS_SECONDS=5", "CHORUS_DEBUG=INFO", "CHORUS_DEBUG_SUBSYS=INIT"});
  std::vector<sockaddr_in> ports;
  ASSERT_TRUE(job.procs.pumpUntil([&] {
    ports.clear();
    for (int r = 0; r < n; ++r) {
      const std::string out = job.procs[static_cast<size_t>(r)].output();
      const size_t at = out.find("heartbeats on udp 127.0.0.1:");
      if (at == std::string::npos) return false;
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(std::atoi(out.c_str() + at + 28)));
      ports.push_back(a);
    }
    return true;
  }, 30)) << job.procs.dump();
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> junk(70000);
  uint64_t x = 88172645463325252ull;
  for (uint8_t& b : junk) b = static_cast<uint8_t>((x ^= x << 13, x ^= x >> 7, x ^= x << 17));
  const int64_t end = monoNs() + 4000000000;
  while (monoNs() < end && !job.procs.pumpUntil([&] { return false; }, 0.01)) {
    for (const sockaddr_in& a : ports) {
      const auto* to = reinterpret_cast<const sockaddr*>(&a);
      sendto(fd, junk.data(), 88, 0, to, sizeof a);     // the right size: magic, commId or MAC wrong
      sendto(fd, junk.data(), 13, 0, to, sizeof a);     // truncated
      sendto(fd, junk.data(), 60000, 0, to, sizeof a);  // oversized
      uint8_t forged[88] = {};
      const uint32_t magic = 0x43484c56;
      std::memcpy(forged, &magic, 4);
      forged[4] = 1;
      forged[5] = 2;  // a notice, with a zero MAC
      sendto(fd, forged, sizeof forged, 0, to, sizeof a);
    }
    junk[static_cast<size_t>(x % 88)] ^= 0x5a;
  }
  close(fd);
  ASSERT_TRUE(job.procs.waitAllExited(60)) << job.procs.dump();
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(std::atoi(job.said(r, "DONE").c_str()), chorusSuccess) << "rank " << r << "\n" << job.procs.dump();
}

// A host cut off, by its link going down or by every packet dropped, on 3 simulated hosts: every rank fails within
// CHORUS_PEER_TIMEOUT + 2 s of the cut; the others name the cut-off rank.
void cutCase(const std::string& how) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces (scripts/netns-cluster)";
  Watchdog dog(120, killAllChildren);
  const char* src = std::getenv("TEST_SOURCE_DIR");
  const std::string cmd = std::string(src ? src : "..") + "/scripts/netns-cluster -k 3 --timeout 60 -- env " +
                          "CHORUS_PEER_TIMEOUT=" + std::to_string(kPeerTimeout) + " LIVENESS_CUT=1 LIVENESS_HOW=" +
                          how + " " + selfExe() + " --worker=cut";
  const RunResult r = runShell(cmd);
  if (r.status == 77) GTEST_SKIP() << r.output;
  const size_t cut = r.output.find("@@CUT 1 ");
  ASSERT_NE(cut, std::string::npos) << cmd << "\n" << r.output;
  ASSERT_EQ(r.output.find("@@CUTFAILED"), std::string::npos) << r.output;
  const int64_t cutAt = std::strtoll(r.output.c_str() + cut + 8, nullptr, 10);
  for (int rank = 0; rank < 3; ++rank) {
    const size_t at = r.output.find("@@ERR " + std::to_string(rank) + " ");
    ASSERT_NE(at, std::string::npos) << "rank " << rank << " reported no error\n" << r.output;
    const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
    char* end = nullptr;
    std::strtol(line.c_str() + 6, &end, 10);
    const long rc = std::strtol(end, &end, 10);
    const int64_t when = std::strtoll(end, &end, 10);
    EXPECT_EQ(rc, chorusRemoteError) << line;
    EXPECT_LE(double(when - cutAt) / 1e9, kPeerTimeout + 2.0) << line;
    if (rank != 1) {
      EXPECT_NE(line.find("rank 1 (pid"), std::string::npos) << line;
    }
  }
}

TEST(Liveness, AHostWhoseLinkGoesDownIsDeclaredOnBothSides) { cutCase("down"); }

// Datagrams blocked from the start (UDP firewalled) are not a stopped peer: warned about, no failure.
TEST(Liveness, BlockedUdpFromTheStartIsNoFalseAlarm) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces (scripts/netns-cluster)";
  Watchdog dog(120, killAllChildren);
  const char* src = std::getenv("TEST_SOURCE_DIR");
  const std::string cmd = std::string(src ? src : "..") + "/scripts/netns-cluster -k 3 --timeout 60 -- env " +
                          "CHORUS_PEER_TIMEOUT=" + std::to_string(kPeerTimeout) + " " + selfExe() + " --worker=noudp";
  const RunResult r = runShell(cmd);
  if (r.status == 77) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.output.find("@@CUTFAILED"), std::string::npos) << r.output;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_NE(r.output.find("@@DONE " + std::to_string(rank) + " 0 "), std::string::npos) << "rank " << rank << "\n"
                                                                                        << r.output;
  EXPECT_NE(r.output.find("no heartbeat ever arrived from rank 1"), std::string::npos) << r.output;
}
TEST(Liveness, AHostThatLosesEveryPacketIsDeclaredOnBothSides) { cutCase("drop"); }

// 8 ranks and 8 burning threads on this machine's 2 cores, CHORUS_PEER_TIMEOUT=2: no false alarm.
TEST(Liveness, NoFalseAlarmWithEightRanksOnLoadedCores) {
  Watchdog dog(120, killAllChildren);
  const int n = 8;
  Job job(n, "loaded", {"LIVENESS_SECONDS=8"});
  ASSERT_TRUE(job.procs.waitAllExited(90)) << job.procs.dump();
  for (int r = 0; r < n; ++r) {
    const std::string done = job.said(r, "DONE");
    ASSERT_FALSE(done.empty()) << "rank " << r << "\n" << job.procs.dump();
    EXPECT_EQ(std::atoi(done.c_str()), chorusSuccess) << "rank " << r << ": " << done;
  }
}

// A rank in Broadcast #k while the others are in AllReduce #k: every rank fails with chorusInvalidUsage naming the
// mismatch within seconds, not at CHORUS_TIMEOUT (120 s here). In one process the AllReduce is direct and a message
// reveals it; across hosts, where recursive doubling gives the Broadcast's rank nothing to compare, the heartbeats
// do (Note [Liveness]): that path is the fault campaign's 'mismatch' kind (the fault_campaign test).
TEST(Liveness, AMismatchedCollectiveFailsEveryRankPromptly) {
  Watchdog dog(60);
  chorus::test::EnvGuard env;
  env.set("CHORUS_PEER_TIMEOUT", "2");
  auto comms = chorus::test::makeComms(4);
  std::vector<chorusResult_t> rc(4, chorusSuccess);
  std::vector<std::string> text(4);
  const int64_t t0 = monoNs();
  chorus::test::onAll(comms, [&](int r, chorusComm_t c) {
    std::vector<int32_t> v(1000, r);
    rc[r] = r == 2 ? chorusBroadcast(v.data(), v.data(), v.size(), chorusInt32, 0, c, nullptr)
                   : chorusAllReduce(v.data(), v.data(), v.size(), chorusInt32, chorusSum, c, nullptr);
    text[r] = chorusGetLastError(c);
  });
  EXPECT_LT(secondsSince(t0), 10.0);
  bool named = false;
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(rc[r], chorusInvalidUsage) << "rank " << r << ": " << text[r];
    named |= text[r].find("mismatched calls") != std::string::npos;
  }
  EXPECT_TRUE(named) << text[0];
  for (chorusComm_t c : comms) chorusCommAbort(c);
}

}  // namespace

int main(int argc, char** argv) { return chorus::test::testsOrWorker(argc, argv, runWorker); }
