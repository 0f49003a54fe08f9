// The shared-memory transport on its own terms: the wake-up protocol under heavy oversubscription, transport
// choice by host identity (shm and tcp serving one communicator), the direct-copy path between processes, and
// nothing left in /dev/shm. The collective matrix itself runs over shm and tcp (test/meson.build).
#include <gtest/gtest.h>
#include <dirent.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test/procs.h"
#include "test/ranks.h"
#include "test/shell.h"
#include "test/watchdog.h"

using chorus::test::check;
using chorus::test::Child;
using chorus::test::freePort;
using chorus::test::killAllChildren;
using chorus::test::Procs;
using chorus::test::randomSecret;
using chorus::test::rankEnv;
using chorus::test::say;
using chorus::test::selfExe;
using chorus::test::runRanks;
using chorus::test::runShell;
using chorus::test::buildDir;
using chorus::test::RunResult;
using chorus::test::Watchdog;

namespace {

// Every data row of an nccl-tests-style table (lines starting with a size) with its #wrong columns; returns
// the number of rows and adds every nonzero #wrong to *wrong.
int tableRows(const std::string& out, int* wrong) {
  std::istringstream in(out);
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    size_t b = line.find(']');
    std::string body = b == std::string::npos ? line : line.substr(b + 1);
    std::istringstream ls(body);
    std::vector<std::string> f;
    for (std::string w; ls >> w;) f.push_back(w);
    if (f.size() < 13 || f[0].find_first_not_of("0123456789") != std::string::npos) continue;
    ++rows;
    for (size_t i : {size_t(8), size_t(12)})  // out-of-place and in-place #wrong
      if (f[i] != "0" && f[i] != "N/A") *wrong += 1;
  }
  return rows;
}

std::set<std::string> devShm() {
  std::set<std::string> names;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) names.insert(e->d_name);
    closedir(d);
  }
  return names;
}

// Worker "fences" (two processes, so that membarrier() and the segment join two address spaces): phases in which
// one rank comes 60 ms late to each small AllReduce, so the other sleeps in every wait, alternate with phases of
// large AllReduces back to back, in which hundreds of slots arrive between sleeps: the test has ranks spin 20 ms
// before they sleep, so that no wait of a busy phase sleeps even in the sanitizer builds (Note [Patience] shrinks
// the spin after the long waits, and the busy phase's short ones grow it back). Note [Fenced publishes]: the
// sleeper asks for fences in the first kind of phase and withdraws the request in the second. Every result is
// checked; "@@SLOW n" counts the small calls that took more than 100 ms (a sleeper whose wake-up is lost waits out
// the 100 ms poll timeout: about 120 ms in all, against the peer's 60).
int workerFences() {
  chorusComm_t comm = nullptr;
  if (chorusCommInitFromEnv(&comm) != chorusSuccess) {
    say("@@FAILED init: %s", chorusGetLastError(nullptr));
    return 1;
  }
  int rank = 0;
  chorusCommUserRank(comm, &rank);
  std::vector<float> big(size_t(4) << 20);
  int slow = 0;
  for (int phase = 0; phase < 6; ++phase) {
    for (int it = 0; it < (phase % 2 == 0 ? 6 : 8); ++it) {
      if (phase % 2 == 0) {
        if (rank == it % 2) usleep(60000);
        int64_t v = rank + it;
        auto t0 = std::chrono::steady_clock::now();
        if (chorusAllReduce(&v, &v, 1, chorusInt64, chorusSum, comm, nullptr) != chorusSuccess || v != 2 * it + 1) {
          say("@@FAILED small %d/%d: %s", phase, it, chorusGetLastError(comm));
          return 1;
        }
        if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(100)) ++slow;
      } else {
        std::fill(big.begin(), big.end(), static_cast<float>(rank + 1));
        if (chorusAllReduce(big.data(), big.data(), big.size(), chorusFloat32, chorusSum, comm, nullptr) !=
                chorusSuccess ||
            big.front() != 3.0f || big.back() != 3.0f || big[big.size() / 2 + 7] != 3.0f) {
          say("@@FAILED big %d/%d: %s", phase, it, chorusGetLastError(comm));
          return 1;
        }
      }
    }
  }
  chorusCommDestroy(comm);
  say("@@SLOW %d", slow);
  return 0;
}

int runWorker(const std::string& name) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  if (name == "fences") return workerFences();
  std::fprintf(stderr, "unknown worker scenario '%s'\n", name.c_str());
  return 2;
}

int lines(const Child& c, const std::string& text) {
  int n = 0;
  for (const auto& l : c.lines) n += l.text.find(text) != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace

// Note [Fenced publishes], between processes: a rank that sleeps on every wait asks its peer to fence, withdraws
// the request when it stops sleeping, and asks again, with no wake-up lost on the way (the DEBUG log says when
// it asks; the worker checks every result and counts the calls that waited out a poll timeout).
TEST(Shm, FenceRequestsFollowHowOftenARankSleeps) {
  Watchdog wd(120, killAllChildren);
  const int n = 2, port = freePort();
  const uint64_t secret = randomSecret();
  Procs p;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> env = rankEnv(r, n, port, secret);
    env.insert(env.end(), {"CHORUS_DEBUG=DEBUG", "CHORUS_DEBUG_SUBSYS=NET", "CHORUS_SPIN_US=20000"});
    p.spawn({selfExe(), "--worker=fences"}, env);
  }
  ASSERT_TRUE(p.waitAllExited(90)) << p.dump();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(p[r].exitCode(), 0) << p.dump();
    ASSERT_TRUE(p[r].field("SLOW").has_value()) << p.dump();
    EXPECT_LE(std::stoi(*p[r].field("SLOW")), 2) << "small calls of rank " << r << " that waited out a poll timeout";
    // three sleepy phases: a request in each, withdrawn in the busy phases between them
    EXPECT_GE(lines(p[r], "asks its shared-memory peers to fence"), 3) << p[r].output();
    EXPECT_GE(lines(p[r], "no longer asks its shared-memory peers to fence"), 2) << p[r].output();
  }
}

// No spinning and no yielding: every wait goes straight to sleep, so each message must wake its receiver
// (and each released slot its sender). 8 ranks on this machine's cores; a lost wake-up shows as a 100 ms
// poll timeout per operation and fails the time bound, a hang trips the watchdog.
TEST(Shm, EveryWaitSleepsAndIsWokenWithEightRanks) {
  Watchdog wd(120);
  setenv("CHORUS_SPIN_US", "0", 1);
  setenv("CHORUS_YIELD_US", "0", 1);
  const int n = 8, iters = 300;
  auto t0 = std::chrono::steady_clock::now();
  auto errors = runRanks(n, [&](int r, chorusComm_t& comm) {
    for (int it = 0; it < iters; ++it) {
      size_t count = it % 3 == 0 ? 70001 : static_cast<size_t>(it % 17 + 1);  // FIFO-filling and one-slot messages
      std::vector<int64_t> buf(count);
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<int64_t>(r + 1) * static_cast<int64_t>(i + it);
      check(chorusAllReduce(buf.data(), buf.data(), count, chorusInt64, chorusSum, comm, nullptr), comm, "allreduce");
      for (size_t i = 0; i < count; ++i)
        if (buf[i] != static_cast<int64_t>(n * (n + 1) / 2) * static_cast<int64_t>(i + it))
          throw std::runtime_error("wrong sum at iteration " + std::to_string(it));
    }
  });
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  unsetenv("CHORUS_SPIN_US");
  unsetenv("CHORUS_YIELD_US");
  EXPECT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
  // 300 operations; even one lost wake-up per 10 operations would cost 3 s.
  EXPECT_LT(secs, 30.0) << "8 sleeping ranks took " << secs << " s for " << iters << " allreduces";
}

// The same with work on a stream (run by the communicator's worker thread) between blocking calls, as the DDP
// layer issues it: a small and a FIFO-sized AllReduce on a stream, then a blocking one. A wake frame read while
// arming for sleep once left the sleeper's flag down (the peer clears it when it wakes us), so the next publish
// woke nobody: about one operation in five waited out the 100 ms poll timeout. Counted per iteration, not as a
// total time, so that one slow scheduling moment does not fail it.
TEST(Shm, SleepingWaitersAreWokenBetweenStreamAndBlockingWork) {
  Watchdog wd(120);
  setenv("CHORUS_SPIN_US", "0", 1);
  setenv("CHORUS_YIELD_US", "0", 1);
  std::vector<int> stalls(2, 0);
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    chorusStream_t stream = nullptr;
    check(chorusStreamCreate(comm, &stream), comm, "stream");
    std::vector<float> big(140000, 1.0f);
    int32_t control[2] = {1, 1};
    double x = 1;
    for (int it = 0; it < 200; ++it) {
      auto t0 = std::chrono::steady_clock::now();
      check(chorusAllReduce(control, control, 2, chorusInt32, chorusSum, comm, stream), comm, "control");
      check(chorusAllReduce(big.data(), big.data(), big.size(), chorusFloat32, chorusAvg, comm, stream), comm, "big");
      check(chorusStreamSynchronize(stream), comm, "sync");
      check(chorusAllReduce(&x, &x, 1, chorusFloat64, chorusMax, comm, nullptr), comm, "blocking");
      if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(90)) ++stalls[static_cast<size_t>(r)];
    }
    check(chorusStreamDestroy(stream), comm, "stream destroy");
  });
  unsetenv("CHORUS_SPIN_US");
  unsetenv("CHORUS_YIELD_US");
  EXPECT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
  EXPECT_LE(stalls[0] + stalls[1], 2) << "iterations that waited out a poll timeout: " << stalls[0] << " + "
                                      << stalls[1] << " of 200 per rank";
}

// Two "hosts" of two ranks each on this machine: pairs inside a host use shm, pairs across use tcp, and every
// collective is still right.
TEST(Shm, MixedHostsShareOneCommunicator) {
  Watchdog wd(300);
  const std::string dir = buildDir();
  const std::string wrap = "sh -c 'CHORUS_HOSTID=host$((CHORUS_RANK / 2)) exec \"$0\" \"$@\"'";
  const char* benches[] = {"all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "broadcast_perf",
                           "reduce_perf", "alltoall_perf", "sendrecv_perf", "tagged_sendrecv_perf"};
  for (const char* b : benches) {
    SCOPED_TRACE(b);
    std::string cmd = "CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=INIT " + dir + "/scripts/chorusrun -n 4 -- " + wrap +
                      " " + dir + "/bench/" + b + " -b 8 -e 4M -f 8 -n 2 -w 1 -c 1 -z 0";
    RunResult r = runShell(cmd);
    ASSERT_EQ(r.status, 0) << r.output;
    int wrong = 0;
    EXPECT_GE(tableRows(r.output, &wrong), 7) << r.output;
    EXPECT_EQ(wrong, 0) << r.output;
    if (std::string(b) != "all_reduce_perf") continue;
    // Rank 0's choices: rank 1 shares its host, ranks 2 and 3 do not.
    EXPECT_NE(r.output.find("rank 0 (pid"), std::string::npos);
    std::istringstream in(r.output);
    int shm = 0, tcp = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("[0]", 0) != 0 || line.find("transport") == std::string::npos) continue;
      if (line.find("-> rank 1 ") != std::string::npos && line.find("transport shm") != std::string::npos) ++shm;
      if ((line.find("-> rank 2 ") != std::string::npos || line.find("-> rank 3 ") != std::string::npos) &&
          line.find("transport tcp") != std::string::npos)
        ++tcp;
    }
    EXPECT_EQ(shm, 1) << r.output;
    EXPECT_EQ(tcp, 2) << r.output;
  }
}

// Large messages read straight from the sender's memory (process_vm_readv) between processes: right results
// for every collective, in place and out of place, across sizes on both sides of the threshold.
TEST(Shm, DirectCopyBetweenProcesses) {
  Watchdog wd(300);
  const std::string dir = buildDir();
  for (const char* b : {"all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "broadcast_perf",
                        "alltoall_perf", "sendrecv_perf", "tagged_sendrecv_perf"}) {
    SCOPED_TRACE(b);
    std::string cmd = "CHORUS_SHM_DIRECT_BYTES=4K CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=NET " + dir +
                      "/scripts/chorusrun -n 3 -- " + dir + "/bench/" + b + " -b 1 -e 8M -f 8 -n 2 -w 1 -c 1";
    RunResult r = runShell(cmd);
    ASSERT_EQ(r.status, 0) << r.output;
    int wrong = 0;
    EXPECT_GE(tableRows(r.output, &wrong), 7) << r.output;
    EXPECT_EQ(wrong, 0) << r.output;
    EXPECT_NE(r.output.find("read directly with process_vm_readv"), std::string::npos)
        << "the direct path was not enabled between processes\n" << r.output;
  }
}

// Segments are memfds passed over the control socket: nothing is ever created in /dev/shm, so ranks killed
// mid-operation cannot leave anything there.
TEST(Shm, KilledRanksLeaveNothingInDevShm) {
  Watchdog wd(120);
  const std::string dir = buildDir();
  std::set<std::string> before = devShm();
  // Two of four ranks kill themselves in the middle of a long run; chorusrun stops the rest.
  std::string cmd = dir + "/scripts/chorusrun -n 4 -- sh -c 'if [ $CHORUS_RANK -ge 2 ]; then (sleep 1; kill -9 $$) & fi; "
                    "exec \"$0\" \"$@\"' " + dir + "/bench/all_reduce_perf -b 64K -e 64K -n 1000000 -w 1 -c 0";
  RunResult r = runShell(cmd);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("killed"), std::string::npos) << r.output;
  std::set<std::string> after = devShm();
  for (const std::string& name : after)
    EXPECT_TRUE(before.count(name)) << "/dev/shm/" << name << " appeared during the run";
}

// Threads of one process share one address space: large messages are copied with memcpy, and the results are
// the same as through the FIFO.
TEST(Shm, DirectCopyBetweenThreads) {
  Watchdog wd(120);
  setenv("CHORUS_SHM_DIRECT_BYTES", "1K", 1);
  const size_t count = 300007;
  auto errors = runRanks(3, [&](int r, chorusComm_t& comm) {
    std::vector<float> in(count), out(count);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((i + static_cast<size_t>(r)) % 11);
    check(chorusAllReduce(in.data(), out.data(), count, chorusFloat32, chorusSum, comm, nullptr), comm, "allreduce");
    for (size_t i = 0; i < count; ++i) {
      float want = static_cast<float>(i % 11) + static_cast<float>((i + 1) % 11) + static_cast<float>((i + 2) % 11);
      if (out[i] != want) throw std::runtime_error("wrong at " + std::to_string(i));
    }
  });
  unsetenv("CHORUS_SHM_DIRECT_BYTES");
  EXPECT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
}

int main(int argc, char** argv) { return chorus::test::testsOrWorker(argc, argv, runWorker); }
