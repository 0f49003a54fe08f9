// The flight recorder (Note [Flight recorder] in lib/comm/flight_recorder.h): chorusCommDump returns the last
// operations as JSON, wrapping at CHORUS_FLIGHT_RECORDER; ranks that time out dump by themselves, a rank that sits
// idle dumps on CHORUS_DUMP_SIGNAL, and scripts/chorus_hang.py names the rank that never issued the call the others
// wait in. An application's own handler of that signal is left alone. The test binary is also the worker program.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "test/procs.h"
#include "test/ranks.h"
#include "test/shell.h"
#include "test/watchdog.h"

namespace {

using namespace chorus::test;

std::string dumpOf(chorusComm_t comm) {
  size_t size = 0;
  if (chorusCommDump(comm, nullptr, &size) != chorusSuccess) return "size query failed";
  std::string buf(size, '\0');
  if (chorusCommDump(comm, buf.data(), &size) != chorusSuccess) return "dump failed";
  buf.resize(size - 1);
  return buf;
}

int occurrences(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// =========================================================================================================
// Worker side

chorusComm_t initOrDie() {
  chorusComm_t comm = nullptr;
  if (chorusCommInitFromEnv(&comm) != chorusSuccess) {
    say("@@INITFAIL %s", chorusGetLastError(nullptr));
    finish(20);
  }
  return comm;
}

// Five AllReduces; then every rank but FLIGHT_SKIPPER calls a sixth, which times out (CHORUS_TIMEOUT) for them,
// while the skipper sits idle until the test signals it.
int workerSkip() {
  chorusComm_t comm = initOrDie();
  const int rank = envInt("CHORUS_RANK", -1);
  for (int i = 0; i < 5; ++i) {
    int32_t v[3] = {1, 2, 3};
    if (chorusAllReduce(v, v, 3, chorusInt32, chorusSum, comm, nullptr) != chorusSuccess) finish(21);
  }
  say("@@READY 1");
  if (rank == envInt("FLIGHT_SKIPPER", -1)) {
    for (;;) pause();  // the test ends it (its SIGUSR1 only interrupts the pause)
  }
  int32_t v[3] = {1, 2, 3};
  const chorusResult_t rc = chorusAllReduce(v, v, 3, chorusInt32, chorusSum, comm, nullptr);
  say("@@ERR %d %s", int(rc), chorusGetLastError(comm));
  finish(0);
}

std::atomic<int> gOwnHandlerRuns{0};
void ownHandler(int) { gOwnHandlerRuns.fetch_add(1); }

// The application handles SIGUSR1 itself before creating a communicator with CHORUS_DUMP_SIGNAL=USR1.
int workerOwnHandler() {
  struct sigaction sa{};
  sa.sa_handler = ownHandler;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, nullptr);
  chorusComm_t comm = initOrDie();
  raise(SIGUSR1);
  usleep(200000);
  say("@@HANDLED %d", gOwnHandlerRuns.load());
  chorusCommDestroy(comm);
  finish(0);
}

int runWorker(const std::string& which) {
  if (which == "skip") return workerSkip();
  if (which == "own") return workerOwnHandler();
  say("@@UNKNOWN %s", which.c_str());
  return 2;
}

// =========================================================================================================
// Parent side

std::vector<std::string> jobEnv(int r, int n, int port, uint64_t secret, const std::vector<std::string>& extra) {
  std::vector<std::string> env = rankEnv(r, n, port, secret);
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// The dump holds the last CHORUS_FLIGHT_RECORDER operations, oldest first, each with its state and algorithm.
TEST(Flight, DumpHoldsTheLastOperations) {
  setenv("CHORUS_FLIGHT_RECORDER", "4", 1);
  auto errors = runRanks(3, [&](int r, chorusComm_t& comm) {
    std::vector<float> buf(1000, 1.0f);
    for (int i = 0; i < 9; ++i)
      check(chorusAllReduce(buf.data(), buf.data(), buf.size(), chorusFloat32, chorusSum, comm, nullptr), comm,
            "allreduce");
    check(chorusBroadcast(buf.data(), buf.data(), 7, chorusFloat32, 1, comm, nullptr), comm, "broadcast");
    const std::string d = dumpOf(comm);
    auto expect = [&](bool ok, const std::string& what) {
      if (!ok) throw std::runtime_error("rank " + std::to_string(r) + ": " + what + " in " + d);
    };
    expect(d.rfind("{\"chorus_flight_recorder\":1,", 0) == 0, "the marker first");
    expect(d.find("\"rank\":" + std::to_string(r) + ",\"nranks\":3") != std::string::npos, "rank and size");
    expect(occurrences(d, "\"seq\":") == 4, "4 operations");
    expect(d.find("\"seq\":5,") == std::string::npos && d.find("\"seq\":6,\"op\":\"AllReduce\"") != std::string::npos,
           "#6 the oldest kept");
    expect(d.find("\"seq\":9,\"op\":\"Broadcast\",\"count\":7,\"dtype\":\"float32\",\"root\":1,\"algo\":\"chain\","
                  "\"state\":\"done\"") != std::string::npos, "the Broadcast last, done");
    expect(d.find("\"redop\":\"sum\",\"algo\":\"") != std::string::npos, "the AllReduce's op and algorithm");
    expect(d.find("\"last_recv_from\":") != std::string::npos, "the receives it posted");
    expect(d.find("\"state\":\"running\"") == std::string::npos, "nothing running");
  });
  unsetenv("CHORUS_FLIGHT_RECORDER");
  EXPECT_TRUE(errors.empty()) << errors.front();
}

TEST(Flight, DumpArgumentsAreChecked) {
  auto errors = runRanks(1, [&](int, chorusComm_t& comm) {
    if (chorusCommDump(comm, nullptr, nullptr) != chorusInvalidArgument ||
        std::strstr(chorusGetLastError(comm), "size") == nullptr)
      throw std::runtime_error(std::string("NULL size: ") + chorusGetLastError(comm));
    size_t size = 0;
    check(chorusCommDump(comm, nullptr, &size), comm, "size query");
    const size_t need = size;
    char small[8];
    size = sizeof small;
    if (chorusCommDump(comm, small, &size) != chorusInvalidArgument || size != need ||
        std::strstr(chorusGetLastError(comm), "too small") == nullptr)
      throw std::runtime_error(std::string("small buffer: ") + chorusGetLastError(comm));
    if (chorusCommDump(nullptr, nullptr, &size) != chorusInvalidArgument)
      throw std::runtime_error("a NULL comm was accepted");
  });
  EXPECT_TRUE(errors.empty()) << errors.front();
}

// A rank skips a call: the others time out in it and dump, the skipper dumps on SIGUSR1, and chorus_hang.py says
// who is stuck where.
TEST(Flight, TheHangScriptNamesTheRankThatNeverIssuedTheCall) {
  Watchdog dog(120, killAllChildren);
  const int n = 3, skipper = 2;
  Procs procs;
  const int port = freePort();
  const uint64_t secret = randomSecret();
  for (int r = 0; r < n; ++r)
    procs.spawn({selfExe(), "--worker=skip"},
                jobEnv(r, n, port, secret, {"CHORUS_TIMEOUT=3", "CHORUS_DUMP_SIGNAL=USR1",
                                            "FLIGHT_SKIPPER=" + std::to_string(skipper)}));
  auto said = [&](int r, const char* key) { return procs[static_cast<size_t>(r)].field(key).has_value(); };
  ASSERT_TRUE(procs.pumpUntil([&] { return said(0, "READY") && said(1, "READY") && said(2, "READY"); }, 30))
      << procs.dump();
  ASSERT_TRUE(procs.pumpUntil([&] { return said(0, "ERR") && said(1, "ERR"); }, 30)) << procs.dump();
  kill(procs[skipper].pid, SIGUSR1);
  ASSERT_TRUE(procs.pumpUntil([&] { return procs[skipper].output().find("\"reason\":\"signal\"") != std::string::npos; },
                              10)) << "no dump on SIGUSR1\n" << procs.dump();
  for (int r = 0; r < n; ++r) {
    if (r == skipper) continue;
    EXPECT_NE(procs[static_cast<size_t>(r)].output().find("\"reason\":\"failure: "), std::string::npos)
        << "rank " << r << " did not dump on its timeout\n" << procs.dump();
  }
  const std::string log = std::string(testing::TempDir()) + "flight_hang.log";
  {
    std::ofstream out(log);
    for (int r = 0; r < n; ++r) out << procs[static_cast<size_t>(r)].output();
  }
  const char* src = std::getenv("TEST_SOURCE_DIR");
  const RunResult verdict = runShell("python3 " + std::string(src ? src : "..") + "/scripts/chorus_hang.py " + log);
  EXPECT_EQ(verdict.status, 0) << verdict.output;
  EXPECT_NE(verdict.output.find("rank 0 and rank 1 are in AllReduce #5"), std::string::npos) << verdict.output;
  EXPECT_NE(verdict.output.find("rank 2 never issued #5 (last: AllReduce #4, done)"), std::string::npos)
      << verdict.output;
  procs.killAll();
  std::remove(log.c_str());
}

TEST(Flight, AnApplicationsOwnSignalHandlerIsKept) {
  Watchdog dog(60, killAllChildren);
  Procs procs;
  procs.spawn({selfExe(), "--worker=own"}, jobEnv(0, 1, freePort(), randomSecret(), {"CHORUS_DUMP_SIGNAL=USR1"}));
  ASSERT_TRUE(procs.waitAllExited(30)) << procs.dump();
  EXPECT_EQ(procs[0].field("HANDLED").value_or(""), "1") << procs.dump();
  EXPECT_NE(procs[0].output().find("handles signal 10"), std::string::npos) << procs.dump();
  EXPECT_EQ(procs[0].output().find("chorus_flight_recorder"), std::string::npos) << procs.dump();
}

TEST(Flight, AMalformedDumpSignalFailsCreationNamingIt) {
  Watchdog dog(60, killAllChildren);
  Procs procs;
  procs.spawn({selfExe(), "--worker=own"}, jobEnv(0, 1, freePort(), randomSecret(), {"CHORUS_DUMP_SIGNAL=USR9"}));
  ASSERT_TRUE(procs.waitAllExited(30)) << procs.dump();
  EXPECT_NE(procs[0].output().find("@@INITFAIL CHORUS_DUMP_SIGNAL=USR9 is not a signal"), std::string::npos)
      << procs.dump();
}

}  // namespace

int main(int argc, char** argv) { return chorus::test::testsOrWorker(argc, argv, runWorker); }
