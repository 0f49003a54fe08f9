// Failures while calls run, with in-process ranks (threads): ranks that make different calls get an error on
// every rank within seconds naming both ranks and both calls (never a hang), chorusCommAbort unblocks a call that
// can never complete, a communicator's own timeoutSec bounds a call that makes no progress, an exception of any
// type inside an operation becomes an error code (never std::terminate, never a stuck executor), and
// chorusGetLastError is safe for concurrent callers.
//
// Every test runs under a watchdog: a test that takes longer than 20 s prints its name and ends the process.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "lib/comm/comm.h"
#include "test/comms.h"
#include "test/error_checks.h"
#include "test/watchdog.h"

namespace {

using chorus::test::Clock;
using chorus::test::codeName;
using chorus::test::destroyAll;
using chorus::test::EnvGuard;
using chorus::test::makeComms;
using chorus::test::onAll;
using chorus::test::secondsSince;
using chorus::test::Watchdog;

// ---------------------------------------------------------------------------------------------------------
// Cross-rank mismatches: an error on every rank within seconds, naming both ranks and both calls.

struct Outcome {
  chorusResult_t rc = chorusSuccess;
  std::string msg;
  double seconds = 0;
};

// Runs one call per rank on fresh communicators; the communicators are then destroyed (or, when broken,
// destroyed all the same: a destroy must not hang on a failed communicator).
std::vector<Outcome> runMismatch(int n, const std::function<chorusResult_t(int, chorusComm_t)>& call) {
  auto comms = makeComms(n);
  std::vector<Outcome> out(static_cast<size_t>(n));
  onAll(comms, [&](int r, chorusComm_t c) {
    auto t0 = Clock::now();
    out[r].rc = call(r, c);
    out[r].seconds = secondsSince(t0);
    out[r].msg = chorusGetLastError(nullptr);
  });
  destroyAll(comms);
  return out;
}

bool errorLike(chorusResult_t rc) { return rc == chorusInvalidUsage || rc == chorusRemoteError; }

bool contains(const std::string& s, std::initializer_list<const char*> needles) {
  for (const char* n : needles)
    if (s.find(n) == std::string::npos) return false;
  return true;
}

TEST(Mismatch, AllReduceCounts100And101) {
  Watchdog wd;
  std::vector<float> bufs[2] = {std::vector<float>(101, 1.0f), std::vector<float>(101, 1.0f)};
  auto out = runMismatch(2, [&](int r, chorusComm_t c) {
    return chorusAllReduce(bufs[r].data(), bufs[r].data(), r == 0 ? 100 : 101, chorusFloat32, chorusSum, c,
                           nullptr);
  });
  int naming = 0;
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + codeName(out[r].rc) + ": " + out[r].msg);
    EXPECT_TRUE(errorLike(out[r].rc));
    EXPECT_LT(out[r].seconds, 5.0);
    if (contains(out[r].msg, {"rank 0", "rank 1", "count 100", "count 101", "AllReduce"})) ++naming;
  }
  // The rank that detects it says InvalidUsage and names both calls; the peer learns it from the abort.
  EXPECT_TRUE(out[0].rc == chorusInvalidUsage || out[1].rc == chorusInvalidUsage);
  EXPECT_GE(naming, 1) << "no rank's message names both ranks and both calls";
}

// Ranks that pass different recvcounts (Note [Counts in tags]): an error on every rank within seconds, never a
// hang nor wrong data, naming both calls, whatever they disagree on: the split of one total, or a rank that
// believes every count is 0 (so that it would move nothing) against ranks that do not.
void expectCountsMismatch(const std::vector<Outcome>& out, const char* kind) {
  int naming = 0, invalid = 0;
  for (size_t r = 0; r < out.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + codeName(out[r].rc) + ": " + out[r].msg);
    EXPECT_TRUE(errorLike(out[r].rc));
    EXPECT_LT(out[r].seconds, 5.0);
    invalid += out[r].rc == chorusInvalidUsage;
    if (contains(out[r].msg, {"mismatched calls", kind, "recvcounts totalling", "fingerprint"})) ++naming;
  }
  EXPECT_GE(invalid, 1);
  EXPECT_GE(naming, 1) << "no rank's message names both calls";
}

TEST(Mismatch, AllGatherVCountsSplitDifferently) {
  Watchdog wd;
  std::vector<int32_t> send[3], recv[3];
  auto out = runMismatch(3, [&](int r, chorusComm_t c) {
    const size_t mine[3] = {1, 2, 3}, theirs[3] = {2, 1, 3};  // rank 2 differs, with the same total
    const size_t* counts = r == 2 ? theirs : mine;
    send[r].assign(3, r);
    recv[r].assign(6, -1);
    return chorusAllGatherV(send[r].data(), recv[r].data(), counts, chorusInt32, c, nullptr);
  });
  expectCountsMismatch(out, "AllGatherV");
}

TEST(Mismatch, ReduceScatterVAllZeroAgainstSomeCounts) {
  Watchdog wd;
  std::vector<float> bufs[2] = {std::vector<float>(8, 1.0f), std::vector<float>(8, 1.0f)};
  auto out = runMismatch(2, [&](int r, chorusComm_t c) {
    const size_t zeros[2] = {0, 0}, some[2] = {0, 5};
    return chorusReduceScatterV(bufs[r].data(), bufs[r].data(), r == 0 ? zeros : some, chorusFloat32, chorusSum, c,
                                nullptr);
  });
  expectCountsMismatch(out, "ReduceScatterV");
}

// Sum against PreMulSum: the calls reduce alike, but their tags differ (Note [PreMulSum] in
// lib/comm/collectives.cc).
TEST(Mismatch, SumAgainstPreMulSum) {
  Watchdog wd;
  std::vector<float> bufs[2] = {std::vector<float>(64, 1.0f), std::vector<float>(64, 1.0f)};
  auto out = runMismatch(2, [&](int r, chorusComm_t c) {
    chorusRedOp_t op = chorusSum;
    const float half = 0.5f;
    if (r == 1 && chorusRedOpCreatePreMulSum(&op, &half, chorusFloat32, c) != chorusSuccess) return chorusInternalError;
    return chorusAllReduce(bufs[r].data(), bufs[r].data(), 64, chorusFloat32, op, c, nullptr);
  });
  int naming = 0;
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + codeName(out[r].rc) + ": " + out[r].msg);
    EXPECT_TRUE(errorLike(out[r].rc));
    EXPECT_LT(out[r].seconds, 5.0);
    if (contains(out[r].msg, {"rank 0", "rank 1", "float32, sum)", "float32, premulsum)"})) ++naming;
  }
  EXPECT_GE(naming, 1) << "no rank's message names both ops";
}

// Rank 0 broadcasts (root 0) while rank 1 all-reduces. Rank 1 receives rank 0's Broadcast data and must name
// both calls. Rank 0, the root, only sends: see the note below for what it may return. A 3 s CHORUS_TIMEOUT
// turns a hang of the root into chorusTimeout, which fails the test.
enum class RootOutcome { Error, MissedIt, Hung };
RootOutcome broadcastVersusAllReduce(size_t k) {
  std::vector<float> bufs[2] = {std::vector<float>(k, 1.0f), std::vector<float>(k, 1.0f)};
  std::vector<chorusComm_t> comms;
  {
    EnvGuard env;
    env.set("CHORUS_TIMEOUT", "3");
    comms = makeComms(2);
  }
  std::vector<Outcome> out(2);
  Outcome followUp;
  onAll(comms, [&](int r, chorusComm_t c) {
    auto t0 = Clock::now();
    out[r].rc = r == 0 ? chorusBroadcast(bufs[0].data(), bufs[0].data(), k, chorusFloat32, 0, c, nullptr)
                       : chorusAllReduce(bufs[1].data(), bufs[1].data(), k, chorusFloat32, chorusSum, c, nullptr);
    out[r].seconds = secondsSince(t0);
    out[r].msg = chorusGetLastError(nullptr);
    if (r == 0 && out[r].rc == chorusSuccess) {  // the error must at least surface on the next call
      t0 = Clock::now();
      followUp.rc = chorusBarrier(c, nullptr);
      followUp.seconds = secondsSince(t0);
      followUp.msg = chorusGetLastError(nullptr);
    }
  });
  destroyAll(comms);
  {
    SCOPED_TRACE("rank 1 (AllReduce): " + std::string(codeName(out[1].rc)) + ": " + out[1].msg);
    EXPECT_EQ(out[1].rc, chorusInvalidUsage);
    EXPECT_LT(out[1].seconds, 5.0);
    // Either rank 1 saw the Broadcast frame itself, or rank 0's next call (the Barrier) met rank 1's AllReduce
    // first and rank 0's abort reason arrived: both name both ranks and both calls.
    EXPECT_TRUE(contains(out[1].msg, {"rank 0", "rank 1", "Broadcast", "AllReduce"}) ||
                contains(out[1].msg, {"rank 0", "rank 1", "Barrier", "AllReduce"}));
  }
  SCOPED_TRACE("rank 0 (Broadcast root): " + std::string(codeName(out[0].rc)) + ": " + out[0].msg);
  if (out[0].rc == chorusTimeout) return RootOutcome::Hung;
  EXPECT_LT(out[0].seconds, 5.0);
  if (out[0].rc == chorusSuccess) {
    SCOPED_TRACE("rank 0's next call (Barrier): " + std::string(codeName(followUp.rc)) + ": " + followUp.msg);
    EXPECT_TRUE(errorLike(followUp.rc));
    EXPECT_LT(followUp.seconds, 5.0);
    return RootOutcome::MissedIt;
  }
  EXPECT_TRUE(errorLike(out[0].rc));
  return RootOutcome::Error;
}

// A rank that only sends in the mismatched call (here the Broadcast root, whose message fits in the socket
// buffers) cannot see its peer's different call, so it may return chorusSuccess; the error then surfaces on its
// next call (documented in chorus.h). It must never hang: a larger message ends in an error within seconds.
TEST(Mismatch, BroadcastVersusAllReduceSmall) {
  Watchdog wd;
  RootOutcome o = broadcastVersusAllReduce(1000);
  EXPECT_NE(o, RootOutcome::Hung);
}

TEST(Mismatch, BroadcastVersusAllReduceLarge) {
  Watchdog wd;
  RootOutcome o = broadcastVersusAllReduce(size_t(8) << 20);  // 32 MiB: more than the socket buffers hold
  EXPECT_NE(o, RootOutcome::Hung);
}

// ---------------------------------------------------------------------------------------------------------
// chorusCommAbort from another thread

TEST(Abort, UnblocksACallThePeerNeverJoins) {
  Watchdog wd;
  auto comms = makeComms(2);
  const size_t k = 1 << 20;
  std::vector<float> buf(k, 1.0f);
  std::atomic<bool> returned{false};
  Outcome stuck;
  Clock::time_point returnedAt;
  std::thread t([&] {
    stuck.rc = chorusAllReduce(buf.data(), buf.data(), k, chorusFloat32, chorusSum, comms[0], nullptr);
    returnedAt = Clock::now();
    stuck.msg = chorusGetLastError(nullptr);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE(returned.load()) << "the AllReduce returned although rank 1 never joined: " << codeName(stuck.rc);
  auto abortAt = Clock::now();
  chorusResult_t ar = chorusCommAbort(comms[0]);
  double abortTook = secondsSince(abortAt);
  t.join();
  EXPECT_EQ(ar, chorusSuccess) << chorusGetLastError(nullptr);
  EXPECT_NE(stuck.rc, chorusSuccess);
  EXPECT_EQ(stuck.rc, chorusInvalidUsage) << codeName(stuck.rc);
  double unblock = std::chrono::duration<double>(returnedAt - abortAt).count();
  EXPECT_LT(unblock, 1.0) << "the stuck call returned " << unblock << " s after the abort";
  EXPECT_LT(abortTook, 2.0);
  EXPECT_NE(stuck.msg.find("chorusCommAbort"), std::string::npos) << stuck.msg;
  EXPECT_NE(stuck.msg.find("AllReduce"), std::string::npos) << stuck.msg;
  comms[0] = nullptr;  // freed by the abort
  EXPECT_OK(chorusCommDestroy(comms[1]));
}

// A communicator's own timeoutSec bounds a call that makes no progress (CHORUS_TIMEOUT is 120 s here).
TEST(Timeout, ConfigTimeoutBoundsACallThePeerNeverJoins) {
  Watchdog wd;
  chorusUniqueId id;
  ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess) << chorusGetLastError(nullptr);
  chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
  config.timeoutSec = 1;
  chorusComm_t comms[2] = {nullptr, nullptr};
  chorusResult_t rcs[2];
  std::thread other([&] { rcs[1] = chorusCommInitRankConfig(&comms[1], 2, id, 1, &config); });
  rcs[0] = chorusCommInitRankConfig(&comms[0], 2, id, 0, &config);
  other.join();
  ASSERT_EQ(rcs[0], chorusSuccess) << chorusGetLastError(nullptr);
  ASSERT_EQ(rcs[1], chorusSuccess);
  std::vector<float> buf(1000, 1.0f);
  auto t0 = Clock::now();
  chorusResult_t rc = chorusAllReduce(buf.data(), buf.data(), buf.size(), chorusFloat32, chorusSum, comms[0], nullptr);
  double took = secondsSince(t0);
  std::string msg = chorusGetLastError(nullptr);
  EXPECT_EQ(rc, chorusTimeout) << codeName(rc) << ": " << msg;
  EXPECT_NE(msg.find("made no progress for 1 s"), std::string::npos) << msg;
  EXPECT_GE(took, 0.9);
  EXPECT_LT(took, 10.0);
  EXPECT_OK(chorusCommDestroy(comms[0]));
  EXPECT_OK(chorusCommDestroy(comms[1]));
}

TEST(Abort, UnblocksAStreamedCall) {
  Watchdog wd;
  auto comms = makeComms(2);
  const size_t k = 1 << 16;
  std::vector<float> buf(k, 1.0f);
  chorusStream_t s = nullptr;
  ASSERT_EQ(chorusStreamCreate(comms[0], &s), chorusSuccess);
  ASSERT_EQ(chorusAllReduce(buf.data(), buf.data(), k, chorusFloat32, chorusSum, comms[0], s), chorusSuccess)
      << chorusGetLastError(comms[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(chorusStreamQuery(s), chorusInProgress);
  auto abortAt = Clock::now();
  std::thread aborter([&] { EXPECT_EQ(chorusCommAbort(comms[0]), chorusSuccess); });
  chorusResult_t rc = chorusStreamSynchronize(s);
  double took = secondsSince(abortAt);
  aborter.join();
  EXPECT_NE(rc, chorusSuccess);
  EXPECT_LT(took, 1.0);
  EXPECT_NE(std::string(chorusGetLastError(nullptr)).find("chorusCommAbort"), std::string::npos)
      << chorusGetLastError(nullptr);
  EXPECT_OK(chorusStreamDestroy(s));
  comms[0] = nullptr;
  EXPECT_OK(chorusCommDestroy(comms[1]));
}

// ---------------------------------------------------------------------------------------------------------
// The executor's boundary: whatever an operation throws (a transport's own exception, a failed hook, something
// that is not even a std::exception) ends as an error code on the communicator, on either path.

TEST(Boundary, AnExceptionOfUnknownTypeOnTheCallersThreadBecomesAnErrorAndFreesTheExecutor) {
  Watchdog wd;
  auto comms = makeComms(1);
  chorus::Comm& comm = *comms[0];
  try {
    comm.executor().runBlocking([] { throw 42; });  // the inline path: the executor is idle
    ADD_FAILURE() << "runBlocking returned normally";
  } catch (const chorus::Error& e) {
    EXPECT_EQ(e.code(), chorusInternalError) << e.what();
    EXPECT_TRUE(contains(e.what(), {"rank 0", "unknown type"})) << e.what();
  }
  comm.executor().drain();  // returns only once the executor is no longer busy
  float x = 1;  // the communicator is failed: later calls say why instead of hanging or running
  EXPECT_EQ(chorusAllReduce(&x, &x, 1, chorusFloat32, chorusSum, comms[0], nullptr), chorusInternalError);
  EXPECT_TRUE(contains(chorusGetLastError(nullptr), {"unknown type"})) << chorusGetLastError(nullptr);
  EXPECT_OK(chorusCommAbort(comms[0]));
}

TEST(Boundary, AStandardExceptionOnTheWorkerReachesTheStreamAndTheCommunicator) {
  Watchdog wd;
  auto comms = makeComms(1);
  chorusStream_t s = nullptr;
  ASSERT_EQ(chorusStreamCreate(comms[0], &s), chorusSuccess);
  comms[0]->executor().enqueue([] { throw std::logic_error("injected by the test"); }, std::span<chorusStream* const>(&s, 1));
  EXPECT_EQ(chorusStreamSynchronize(s), chorusInternalError);
  EXPECT_TRUE(contains(chorusGetLastError(nullptr), {"rank 0", "injected by the test"})) << chorusGetLastError(nullptr);
  chorusResult_t async = chorusSuccess;
  EXPECT_OK(chorusCommGetAsyncError(comms[0], &async));
  EXPECT_EQ(async, chorusInternalError);
  EXPECT_OK(chorusStreamDestroy(s));
  EXPECT_OK(chorusCommAbort(comms[0]));
}

// ---------------------------------------------------------------------------------------------------------
// chorusGetLastError from several threads while the text changes: each caller reads a whole text of its own
// (with one buffer per communicator, readers rewrote each other's text while it was read: TSan and ASan see it).

TEST(LastError, ConcurrentReadersEachGetAWholeTextWhileItChanges) {
  Watchdog wd;
  auto comms = makeComms(1);
  const std::string a(200, 'a'), b(3000, 'b');
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) comms[0]->setLastError(i % 2 != 0 ? a : b);
  });
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t)
    readers.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        const std::string got = chorusGetLastError(comms[0]);
        if (!got.empty() && got != a && got != b) torn.fetch_add(1);
      }
    });
  for (auto& r : readers) r.join();
  stop = true;
  writer.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_OK(chorusCommDestroy(comms[0]));
}

}  // namespace
