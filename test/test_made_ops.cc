// Reduction ops a user makes (chorusRedOpCreatePreMulSum, chorusRedOpDestroy; Note [Made ops] in
// lib/comm/made_ops.h): every bad argument is refused with the code and a text naming it, an op is refused once
// destroyed, on another communicator and with another datatype; values are not reused while live; a call keeps
// its scalar when the op is destroyed after the call was issued or recorded in a group; ops are made, destroyed
// and used from several threads at once. The results themselves are test_collectives' and test_gather_scatter's.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "test/comms.h"
#include "test/error_checks.h"
#include "test/ranks.h"
#include "test/watchdog.h"

namespace {

using chorus::test::check;
using chorus::test::runRanks;
using chorus::test::Watchdog;

// Only refused calls are made on its communicators from this thread, so they never communicate.
class MadeOps : public chorus::test::TwoIdleRanks {};

TEST_F(MadeOps, CreateRefusesEachBadArgumentNamingIt) {
  const float half = 0.5f;
  chorusRedOp_t op = chorusSum;
  EXPECT_REFUSED(chorusRedOpCreatePreMulSum(nullptr, &half, chorusFloat32, c0()), chorusInvalidArgument, c0(),
                 "chorusRedOpCreatePreMulSum", "rank 0", "op (the output) is NULL");
  EXPECT_REFUSED(chorusRedOpCreatePreMulSum(&op, nullptr, chorusFloat32, c1()), chorusInvalidArgument, c1(),
                 "rank 1", "scalar is NULL", "float32");
  EXPECT_REFUSED(chorusRedOpCreatePreMulSum(&op, &half, static_cast<chorusDataType_t>(42), c0()),
                 chorusInvalidArgument, c0(), "datatype=42");
  EXPECT_REFUSED(chorusRedOpCreatePreMulSum(&op, &half, chorusFloat32, nullptr), chorusInvalidArgument, nullptr,
                 "comm is NULL");
  EXPECT_EQ(op, chorusSum);  // untouched by every refused call
}

TEST_F(MadeOps, DestroyRefusesBuiltInDestroyedAndForeignOps) {
  const int32_t three = 3;
  chorusRedOp_t op = chorusSum;
  EXPECT_REFUSED(chorusRedOpDestroy(chorusSum, c0()), chorusInvalidArgument, c0(), "chorusRedOpDestroy",
                 "op=0 (sum) is a built-in op");
  EXPECT_REFUSED(chorusRedOpDestroy(chorusBxor, c0()), chorusInvalidArgument, c0(), "op=7 (bxor)");
  EXPECT_REFUSED(chorusRedOpDestroy(static_cast<chorusRedOp_t>(-4), c0()), chorusInvalidArgument, c0(), "op=-4");
  EXPECT_REFUSED(chorusRedOpDestroy(static_cast<chorusRedOp_t>(1 << 30), c1()), chorusInvalidArgument, c1(),
                 "op=1073741824", "not an op of this communicator");
  ASSERT_OK(chorusRedOpCreatePreMulSum(&op, &three, chorusInt32, c1()));
  EXPECT_GE(static_cast<int>(op), static_cast<int>(chorusNumOps));
  EXPECT_REFUSED(chorusRedOpDestroy(op, c0()), chorusInvalidArgument, c0(), "not an op of this communicator");
  EXPECT_OK(chorusRedOpDestroy(op, c1()));
  EXPECT_REFUSED(chorusRedOpDestroy(op, c1()), chorusInvalidArgument, c1(), "destroyed already");
  EXPECT_REFUSED(chorusRedOpDestroy(op, nullptr), chorusInvalidArgument, nullptr, "comm is NULL");
}

TEST_F(MadeOps, CallsRefuseADestroyedForeignOrOtherDatatypeOpNamingIt) {
  const float quarter = 0.25f;
  chorusRedOp_t op = chorusSum, dead = chorusSum;
  ASSERT_OK(chorusRedOpCreatePreMulSum(&op, &quarter, chorusFloat32, c0()));
  ASSERT_OK(chorusRedOpCreatePreMulSum(&dead, &quarter, chorusFloat32, c0()));
  ASSERT_OK(chorusRedOpDestroy(dead, c0()));
  const std::string opText = "op=" + std::to_string(static_cast<int>(op));
  const std::string deadText = "op=" + std::to_string(static_cast<int>(dead));
  const size_t counts[2] = {2, 2};
  // Another datatype: both named.
  EXPECT_REFUSED(chorusAllReduce(a_, b_, 4, chorusFloat64, op, c0(), nullptr), chorusInvalidArgument, c0(),
                 "chorusAllReduce", opText, "made for datatype=7 (float32)", "datatype=8 (float64)");
  EXPECT_REFUSED(chorusReduceScatterV(a_, b_, counts, chorusBfloat16, op, c0(), nullptr), chorusInvalidArgument,
                 c0(), opText, "datatype=9 (bfloat16)");
  // Destroyed, or another communicator's (rank 1's communicator is another one, of the same ranks).
  EXPECT_REFUSED(chorusReduce(a_, b_, 4, chorusFloat32, dead, 0, c0(), nullptr), chorusInvalidArgument, c0(),
                 deadText, "destroyed by chorusRedOpDestroy");
  EXPECT_REFUSED(chorusReduceScatter(a_, b_, 2, chorusFloat32, op, c1(), nullptr), chorusInvalidArgument, c1(),
                 opText, "made on another communicator");
  // Count 0 excuses nothing; a refused call leaves the op alive.
  EXPECT_REFUSED(chorusAllReduce(nullptr, nullptr, 0, chorusInt8, op, c0(), nullptr), chorusInvalidArgument, c0(),
                 opText);
  EXPECT_OK(chorusRedOpDestroy(op, c0()));
}

TEST_F(MadeOps, ValuesAreNotReusedWhileLive) {
  const double one = 1.0;
  std::vector<chorusRedOp_t> live;
  std::set<int> seen;
  for (int i = 0; i < 300; ++i) {
    chorusRedOp_t op;
    ASSERT_OK(chorusRedOpCreatePreMulSum(&op, &one, chorusFloat64, i % 2 ? c0() : c1()));
    EXPECT_TRUE(seen.insert(static_cast<int>(op)).second) << "op " << op << " handed out twice";
    live.push_back(op);
  }
  for (size_t i = 0; i < live.size(); ++i) ASSERT_OK(chorusRedOpDestroy(live[i], i % 2 ? c0() : c1()));
}

// Rank r's scalar is r + 1; the op is destroyed right after the call is issued on a stream, and before the
// GroupEnd of a group that recorded a call with it: each call keeps the scalar it was given.
TEST(MadeOpsAcrossRanks, ACallKeepsItsScalarWhenTheOpIsDestroyedAfterIssue) {
  Watchdog wd;
  const int n = 3;
  const size_t k = 4099;
  auto errors = runRanks(n, [&](int r, chorusComm_t& comm) {
    const int64_t scalar = r + 1;
    chorusStream_t s = nullptr;
    check(chorusStreamCreate(comm, &s), comm, "stream create");
    std::vector<int64_t> in(k), streamed(k, -1), grouped(k, -1);
    for (size_t i = 0; i < k; ++i) in[i] = static_cast<int64_t>(i) - 7;
    chorusRedOp_t op;
    check(chorusRedOpCreatePreMulSum(&op, &scalar, chorusInt64, comm), comm, "create");
    check(chorusAllReduce(in.data(), streamed.data(), k, chorusInt64, op, comm, s), comm, "allreduce on a stream");
    check(chorusRedOpDestroy(op, comm), comm, "destroy after issue");
    check(chorusRedOpCreatePreMulSum(&op, &scalar, chorusInt64, comm), comm, "create again");
    check(chorusGroupStart(), comm, "group start");
    check(chorusAllReduce(in.data(), grouped.data(), k, chorusInt64, op, comm, nullptr), comm, "allreduce grouped");
    check(chorusRedOpDestroy(op, comm), comm, "destroy inside the group");
    check(chorusGroupEnd(), comm, "group end");
    check(chorusStreamSynchronize(s), comm, "synchronize");
    check(chorusStreamDestroy(s), comm, "stream destroy");
    for (size_t i = 0; i < k; ++i) {
      const int64_t want = in[i] * (1 + 2 + 3);  // every rank's input is the same
      if (streamed[i] != want || grouped[i] != want)
        throw std::runtime_error("element " + std::to_string(i) + ": " + std::to_string(streamed[i]) + " and " +
                                 std::to_string(grouped[i]) + ", expected " + std::to_string(want));
    }
  });
  EXPECT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
}

// Threads make and destroy ops on one communicator while another validates calls with its own op (each refused
// for its datatype, so nothing communicates): no race (TSan), no op lost or confused.
TEST_F(MadeOps, ThreadsMakeDestroyAndUseOpsAtOnce) {
  const float two = 2.0f;
  chorusRedOp_t mine;
  ASSERT_OK(chorusRedOpCreatePreMulSum(&mine, &two, chorusFloat32, c0()));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        chorusRedOp_t op;
        if (chorusRedOpCreatePreMulSum(&op, &two, chorusFloat32, c0()) != chorusSuccess ||
            chorusRedOpDestroy(op, c0()) != chorusSuccess)
          ++failures;
      }
    });
  threads.emplace_back([&] {
    for (int i = 0; i < 500; ++i)
      if (chorusAllReduce(a_, b_, 4, chorusFloat16, mine, c0(), nullptr) != chorusInvalidArgument) ++failures;
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_OK(chorusRedOpDestroy(mine, c0()));
}

}  // namespace
