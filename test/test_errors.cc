// Bad input, one rule at a time, with in-process ranks (threads): every API call must refuse it with the
// exact result code and a chorusGetLastError() text that names the argument at fault, and a refused call must
// leave the communicator usable. Also: exact wire bytes of the ring AllReduce. Failures while calls run
// (cross-rank mismatches, chorusCommAbort, a communicator's timeout) are test_runtime_errors.cc's.
//
// Every test runs under a watchdog: a test that takes longer than 20 s prints its name and ends the process
// (a hang cannot be turned into an ordinary failure from inside the hung test).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lib/comm/comm.h"
#include "test/comms.h"
#include "test/error_checks.h"
#include "test/ranks.h"
#include "test/watchdog.h"

namespace {

using chorus::test::check;
using chorus::test::runRanks;
using chorus::test::Watchdog;
using chorus::test::EnvGuard;
using chorus::test::makeComms;
using chorus::test::onAll;
using chorus::test::Clock;
using chorus::test::codeName;
using chorus::test::Refused;
using chorus::test::secondsSince;


constexpr auto kBadType = static_cast<chorusDataType_t>(42);
constexpr auto kBadOp = static_cast<chorusRedOp_t>(42);

// The validation tests' refused calls, made on either rank's handle of one shared communicator.
class Validation : public chorus::test::TwoIdleRanks {};

// ---------------------------------------------------------------------------------------------------------
// Version and error strings

TEST(Basics, VersionAndErrorStrings) {
  Watchdog wd;
  int v = -1;
  EXPECT_OK(chorusGetVersion(&v));
  EXPECT_EQ(v, CHORUS_VERSION_CODE);
  EXPECT_EQ(v, CHORUS_MAJOR * 10000 + CHORUS_MINOR * 100 + CHORUS_PATCH);
  EXPECT_REFUSED(chorusGetVersion(nullptr), chorusInvalidArgument, nullptr, "version");
  for (int code = chorusSuccess; code <= chorusTimeout; ++code) {
    const char* s = chorusGetErrorString(static_cast<chorusResult_t>(code));
    ASSERT_NE(s, nullptr) << code;
    EXPECT_GT(std::strlen(s), 0u) << code;
  }
  const char* unknown = chorusGetErrorString(static_cast<chorusResult_t>(99));
  ASSERT_NE(unknown, nullptr);
  EXPECT_GT(std::strlen(unknown), 0u);
  EXPECT_NE(chorusGetLastError(nullptr), nullptr);
}

// ---------------------------------------------------------------------------------------------------------
// NULL communicator and NULL pointers

TEST_F(Validation, NullComm) {
  chorusStream_t s = nullptr;
  int i = 0;
  chorusResult_t ae;
  EXPECT_REFUSED(chorusAllReduce(a_, b_, 4, chorusFloat32, chorusSum, nullptr, nullptr), chorusInvalidArgument,
                 nullptr, "comm is NULL");
  EXPECT_REFUSED(chorusBroadcast(a_, b_, 4, chorusFloat32, 0, nullptr, nullptr), chorusInvalidArgument, nullptr,
                 "comm is NULL");
  EXPECT_REFUSED(chorusReduce(a_, b_, 4, chorusFloat32, chorusSum, 0, nullptr, nullptr), chorusInvalidArgument,
                 nullptr, "comm is NULL");
  EXPECT_REFUSED(chorusAllGather(a_, b_, 4, chorusFloat32, nullptr, nullptr), chorusInvalidArgument, nullptr,
                 "comm is NULL");
  EXPECT_REFUSED(chorusReduceScatter(a_, b_, 4, chorusFloat32, chorusSum, nullptr, nullptr),
                 chorusInvalidArgument, nullptr, "comm is NULL");
  EXPECT_REFUSED(chorusAllToAll(a_, b_, 4, chorusFloat32, nullptr, nullptr), chorusInvalidArgument, nullptr,
                 "comm is NULL");
  EXPECT_REFUSED(chorusSend(a_, 4, chorusFloat32, 1, nullptr, nullptr), chorusInvalidArgument, nullptr,
                 "comm is NULL");
  EXPECT_REFUSED(chorusRecv(a_, 4, chorusFloat32, 1, nullptr, nullptr), chorusInvalidArgument, nullptr,
                 "comm is NULL");
  EXPECT_REFUSED(chorusBarrier(nullptr, nullptr), chorusInvalidArgument, nullptr, "comm is NULL");
  const size_t counts[2] = {4, 4};
  EXPECT_REFUSED(chorusGather(a_, b_, 4, chorusFloat32, 0, nullptr, nullptr), chorusInvalidArgument, nullptr,
                 "comm is NULL");
  EXPECT_REFUSED(chorusScatter(a_, b_, 4, chorusFloat32, 0, nullptr, nullptr), chorusInvalidArgument, nullptr,
                 "comm is NULL");
  EXPECT_REFUSED(chorusAllGatherV(a_, b_, counts, chorusFloat32, nullptr, nullptr), chorusInvalidArgument, nullptr,
                 "comm is NULL");
  EXPECT_REFUSED(chorusReduceScatterV(a_, b_, counts, chorusFloat32, chorusSum, nullptr, nullptr),
                 chorusInvalidArgument, nullptr, "comm is NULL");
  EXPECT_REFUSED(chorusCommCount(nullptr, &i), chorusInvalidArgument, nullptr, "comm is NULL");
  EXPECT_REFUSED(chorusCommUserRank(nullptr, &i), chorusInvalidArgument, nullptr, "comm is NULL");
  EXPECT_REFUSED(chorusCommGetAsyncError(nullptr, &ae), chorusInvalidArgument, nullptr, "comm is NULL");
  EXPECT_REFUSED(chorusStreamCreate(nullptr, &s), chorusInvalidArgument, nullptr, "comm is NULL");
  EXPECT_REFUSED(chorusCommDestroy(nullptr), chorusInvalidArgument, nullptr, "comm is NULL");
  EXPECT_REFUSED(chorusCommAbort(nullptr), chorusInvalidArgument, nullptr, "comm is NULL");
}

TEST_F(Validation, NullBuffersWithCount) {
  const size_t n = 10;
  // Rank 0 is the root where the root matters.
  EXPECT_REFUSED(chorusAllReduce(nullptr, b_, n, chorusFloat32, chorusSum, c0(), nullptr), chorusInvalidArgument,
                 c0(), "sendbuff is NULL", "40 bytes", "chorusAllReduce", "rank 0");
  EXPECT_REFUSED(chorusAllReduce(a_, nullptr, n, chorusFloat32, chorusSum, c0(), nullptr), chorusInvalidArgument,
                 c0(), "recvbuff is NULL");
  EXPECT_REFUSED(chorusBroadcast(nullptr, b_, n, chorusFloat32, 0, c0(), nullptr), chorusInvalidArgument, c0(),
                 "sendbuff", "NULL");
  EXPECT_REFUSED(chorusBroadcast(a_, nullptr, n, chorusFloat32, 0, c0(), nullptr), chorusInvalidArgument, c0(),
                 "recvbuff is NULL");
  EXPECT_REFUSED(chorusBroadcast(nullptr, nullptr, n, chorusFloat32, 0, c1(), nullptr), chorusInvalidArgument,
                 c1(), "recvbuff is NULL", "rank 1");
  EXPECT_REFUSED(chorusReduce(nullptr, b_, n, chorusFloat32, chorusSum, 0, c0(), nullptr), chorusInvalidArgument,
                 c0(), "sendbuff is NULL");
  EXPECT_REFUSED(chorusReduce(nullptr, nullptr, n, chorusFloat32, chorusSum, 0, c1(), nullptr),
                 chorusInvalidArgument, c1(), "sendbuff is NULL");
  EXPECT_REFUSED(chorusReduce(a_, nullptr, n, chorusFloat32, chorusSum, 0, c0(), nullptr), chorusInvalidArgument,
                 c0(), "recvbuff", "NULL");
  EXPECT_REFUSED(chorusAllGather(nullptr, b_, n, chorusFloat32, c0(), nullptr), chorusInvalidArgument, c0(),
                 "sendbuff is NULL");
  EXPECT_REFUSED(chorusAllGather(a_, nullptr, n, chorusFloat32, c0(), nullptr), chorusInvalidArgument, c0(),
                 "recvbuff is NULL", "80 bytes");
  EXPECT_REFUSED(chorusReduceScatter(nullptr, b_, n, chorusFloat32, chorusSum, c0(), nullptr),
                 chorusInvalidArgument, c0(), "sendbuff is NULL", "80 bytes");
  EXPECT_REFUSED(chorusReduceScatter(a_, nullptr, n, chorusFloat32, chorusSum, c0(), nullptr),
                 chorusInvalidArgument, c0(), "recvbuff is NULL");
  EXPECT_REFUSED(chorusAllToAll(nullptr, b_, n, chorusFloat32, c0(), nullptr), chorusInvalidArgument, c0(),
                 "sendbuff is NULL");
  EXPECT_REFUSED(chorusAllToAll(a_, nullptr, n, chorusFloat32, c0(), nullptr), chorusInvalidArgument, c0(),
                 "recvbuff is NULL");
  EXPECT_REFUSED(chorusSend(nullptr, n, chorusFloat32, 1, c0(), nullptr), chorusInvalidArgument, c0(),
                 "sendbuff is NULL");
  EXPECT_REFUSED(chorusRecv(nullptr, n, chorusFloat32, 1, c0(), nullptr), chorusInvalidArgument, c0(),
                 "recvbuff is NULL");
  // Gather: recvbuff on the root only; Scatter: sendbuff on the root only.
  EXPECT_REFUSED(chorusGather(nullptr, b_, n, chorusFloat32, 0, c1(), nullptr), chorusInvalidArgument, c1(),
                 "sendbuff is NULL", "40 bytes", "chorusGather");
  EXPECT_REFUSED(chorusGather(a_, nullptr, n, chorusFloat32, 0, c0(), nullptr), chorusInvalidArgument, c0(),
                 "recvbuff (on the root) is NULL", "80 bytes");
  EXPECT_REFUSED(chorusScatter(nullptr, b_, n, chorusFloat32, 1, c1(), nullptr), chorusInvalidArgument, c1(),
                 "sendbuff (on the root) is NULL", "80 bytes", "chorusScatter");
  EXPECT_REFUSED(chorusScatter(nullptr, nullptr, n, chorusFloat32, 1, c0(), nullptr), chorusInvalidArgument, c0(),
                 "recvbuff is NULL", "40 bytes");
  // The V kinds: recvcounts itself, then this rank's block and all blocks.
  const size_t counts[2] = {3, 5};
  EXPECT_REFUSED(chorusAllGatherV(a_, b_, nullptr, chorusFloat32, c0(), nullptr), chorusInvalidArgument, c0(),
                 "recvcounts is NULL", "nranks=2", "chorusAllGatherV");
  EXPECT_REFUSED(chorusReduceScatterV(a_, b_, nullptr, chorusFloat32, chorusSum, c1(), nullptr),
                 chorusInvalidArgument, c1(), "recvcounts is NULL", "chorusReduceScatterV");
  EXPECT_REFUSED(chorusAllGatherV(nullptr, b_, counts, chorusFloat32, c1(), nullptr), chorusInvalidArgument, c1(),
                 "sendbuff is NULL", "20 bytes");
  EXPECT_REFUSED(chorusAllGatherV(a_, nullptr, counts, chorusFloat32, c0(), nullptr), chorusInvalidArgument, c0(),
                 "recvbuff is NULL", "32 bytes");
  EXPECT_REFUSED(chorusReduceScatterV(nullptr, b_, counts, chorusFloat32, chorusSum, c0(), nullptr),
                 chorusInvalidArgument, c0(), "sendbuff is NULL", "32 bytes");
  EXPECT_REFUSED(chorusReduceScatterV(a_, nullptr, counts, chorusFloat32, chorusSum, c0(), nullptr),
                 chorusInvalidArgument, c0(), "recvbuff is NULL", "12 bytes");
}

TEST_F(Validation, NullOutputPointers) {
  EXPECT_REFUSED(chorusCommCount(c0(), nullptr), chorusInvalidArgument, c0(), "count is NULL");
  EXPECT_REFUSED(chorusCommUserRank(c0(), nullptr), chorusInvalidArgument, c0(), "rank is NULL");
  EXPECT_REFUSED(chorusCommGetAsyncError(c0(), nullptr), chorusInvalidArgument, c0(), "asyncError is NULL");
  EXPECT_REFUSED(chorusStreamCreate(c0(), nullptr), chorusInvalidArgument, c0(), "stream");
  EXPECT_REFUSED(chorusGetUniqueId(nullptr), chorusInvalidArgument, nullptr, "uniqueId is NULL");
  chorusUniqueId id;
  std::memset(&id, 0, sizeof id);
  EXPECT_REFUSED(chorusCommInitRank(nullptr, 2, id, 0), chorusInvalidArgument, nullptr, "comm");
  EXPECT_REFUSED(chorusCommInitFromEnv(nullptr), chorusInvalidArgument, nullptr, "comm");
  EXPECT_REFUSED(chorusStreamSynchronize(nullptr), chorusInvalidArgument, nullptr, "stream is NULL");
  EXPECT_REFUSED(chorusStreamQuery(nullptr), chorusInvalidArgument, nullptr, "stream is NULL");
  EXPECT_REFUSED(chorusStreamDestroy(nullptr), chorusInvalidArgument, nullptr, "stream is NULL");
  int count = 0, rank = -1;
  EXPECT_OK(chorusCommCount(c1(), &count));
  EXPECT_OK(chorusCommUserRank(c1(), &rank));
  EXPECT_EQ(count, 2);
  EXPECT_EQ(rank, 1);
}

// ---------------------------------------------------------------------------------------------------------
// Ranks, datatypes, ops, sizes

TEST_F(Validation, RootAndPeerOutOfRange) {
  EXPECT_REFUSED(chorusBroadcast(a_, b_, 4, chorusFloat32, 7, c0(), nullptr), chorusInvalidArgument, c0(),
                 "root=7", "nranks=2", "chorusBroadcast");
  EXPECT_REFUSED(chorusBroadcast(a_, b_, 4, chorusFloat32, -1, c1(), nullptr), chorusInvalidArgument, c1(),
                 "root=-1");
  EXPECT_REFUSED(chorusReduce(a_, b_, 4, chorusFloat32, chorusSum, 2, c0(), nullptr), chorusInvalidArgument, c0(),
                 "root=2", "chorusReduce");
  EXPECT_REFUSED(chorusReduce(a_, b_, 4, chorusFloat32, chorusSum, -5, c1(), nullptr), chorusInvalidArgument,
                 c1(), "root=-5");
  EXPECT_REFUSED(chorusSend(a_, 4, chorusFloat32, 2, c0(), nullptr), chorusInvalidArgument, c0(), "peer=2",
                 "chorusSend");
  EXPECT_REFUSED(chorusSend(a_, 4, chorusFloat32, -1, c0(), nullptr), chorusInvalidArgument, c0(), "peer=-1");
  EXPECT_REFUSED(chorusRecv(a_, 4, chorusFloat32, 9, c1(), nullptr), chorusInvalidArgument, c1(), "peer=9",
                 "chorusRecv");
  // To self only inside a group (paired with a Recv from self); outside one it is a usage error.
  EXPECT_REFUSED(chorusSend(a_, 4, chorusFloat32, 0, c0(), nullptr), chorusInvalidUsage, c0(), "peer=0",
                 "itself");
  EXPECT_REFUSED(chorusRecv(a_, 4, chorusFloat32, 1, c1(), nullptr), chorusInvalidUsage, c1(), "peer=1",
                 "itself");
  // Count 0 does not excuse a bad root or peer.
  EXPECT_REFUSED(chorusBroadcast(nullptr, nullptr, 0, chorusFloat32, 7, c0(), nullptr), chorusInvalidArgument,
                 c0(), "root=7");
  EXPECT_REFUSED(chorusSend(nullptr, 0, chorusFloat32, 5, c0(), nullptr), chorusInvalidArgument, c0(), "peer=5");
  EXPECT_REFUSED(chorusGather(a_, b_, 4, chorusFloat32, 2, c0(), nullptr), chorusInvalidArgument, c0(), "root=2",
                 "chorusGather");
  EXPECT_REFUSED(chorusScatter(nullptr, nullptr, 0, chorusFloat32, -1, c1(), nullptr), chorusInvalidArgument, c1(),
                 "root=-1", "chorusScatter");
}

TEST_F(Validation, UnknownDatatypeAndOp) {
  auto bad = [&](chorusResult_t rc, chorusComm_t c) { return Refused(rc, chorusInvalidArgument, c, {"datatype=42"}); };
  EXPECT_TRUE(bad(chorusAllReduce(a_, b_, 4, kBadType, chorusSum, c0(), nullptr), c0()));
  EXPECT_TRUE(bad(chorusBroadcast(a_, b_, 4, kBadType, 0, c0(), nullptr), c0()));
  EXPECT_TRUE(bad(chorusReduce(a_, b_, 4, kBadType, chorusSum, 0, c0(), nullptr), c0()));
  EXPECT_TRUE(bad(chorusAllGather(a_, b_, 4, kBadType, c0(), nullptr), c0()));
  EXPECT_TRUE(bad(chorusReduceScatter(a_, b_, 4, kBadType, chorusSum, c0(), nullptr), c0()));
  EXPECT_TRUE(bad(chorusAllToAll(a_, b_, 4, kBadType, c0(), nullptr), c0()));
  EXPECT_TRUE(bad(chorusSend(a_, 4, kBadType, 1, c0(), nullptr), c0()));
  EXPECT_TRUE(bad(chorusRecv(a_, 4, kBadType, 0, c1(), nullptr), c1()));
  EXPECT_TRUE(bad(chorusAllReduce(nullptr, nullptr, 0, kBadType, chorusSum, c0(), nullptr), c0()));  // count 0 too
  EXPECT_REFUSED(chorusAllReduce(a_, b_, 4, static_cast<chorusDataType_t>(-1), chorusSum, c0(), nullptr),
                 chorusInvalidArgument, c0(), "datatype=-1");
  EXPECT_REFUSED(chorusAllReduce(a_, b_, 4, static_cast<chorusDataType_t>(10), chorusSum, c0(), nullptr),
                 chorusInvalidArgument, c0(), "datatype=10");

  EXPECT_REFUSED(chorusAllReduce(a_, b_, 4, chorusFloat32, kBadOp, c0(), nullptr), chorusInvalidArgument, c0(),
                 "op=42");
  EXPECT_REFUSED(chorusReduce(a_, b_, 4, chorusFloat32, kBadOp, 0, c0(), nullptr), chorusInvalidArgument, c0(),
                 "op=42");
  EXPECT_REFUSED(chorusReduceScatter(a_, b_, 4, chorusFloat32, kBadOp, c0(), nullptr), chorusInvalidArgument,
                 c0(), "op=42");
  EXPECT_REFUSED(chorusAllReduce(a_, b_, 4, chorusInt32, static_cast<chorusRedOp_t>(-3), c1(), nullptr),
                 chorusInvalidArgument, c1(), "op=-3");
  EXPECT_REFUSED(chorusAllReduce(a_, b_, 4, chorusInt32, static_cast<chorusRedOp_t>(1 << 30), c1(), nullptr),
                 chorusInvalidArgument, c1(), "op=1073741824", "nor an op of this communicator");
  const size_t counts[2] = {1, 1};
  EXPECT_TRUE(bad(chorusGather(a_, b_, 4, kBadType, 0, c0(), nullptr), c0()));
  EXPECT_TRUE(bad(chorusScatter(a_, b_, 4, kBadType, 0, c0(), nullptr), c0()));
  EXPECT_TRUE(bad(chorusAllGatherV(a_, b_, counts, kBadType, c0(), nullptr), c0()));
  EXPECT_TRUE(bad(chorusReduceScatterV(a_, b_, counts, kBadType, chorusSum, c0(), nullptr), c0()));
  EXPECT_REFUSED(chorusReduceScatterV(a_, b_, counts, chorusFloat32, kBadOp, c0(), nullptr), chorusInvalidArgument,
                 c0(), "op=42");
  // The bitwise ops take integer datatypes only; count 0 does not excuse them either.
  for (chorusDataType_t dt : {chorusFloat16, chorusFloat32, chorusFloat64, chorusBfloat16}) {
    EXPECT_REFUSED(chorusAllReduce(a_, b_, 4, dt, chorusBand, c0(), nullptr), chorusInvalidArgument, c0(),
                   "op=5 (band)", "integer datatypes only", "datatype=");
    EXPECT_REFUSED(chorusReduce(a_, b_, 0, dt, chorusBor, 0, c1(), nullptr), chorusInvalidArgument, c1(),
                   "op=6 (bor)", "datatype=");
    EXPECT_REFUSED(chorusReduceScatterV(a_, b_, counts, dt, chorusBxor, c0(), nullptr), chorusInvalidArgument, c0(),
                   "op=7 (bxor)", "datatype=");
  }
  EXPECT_REFUSED(chorusReduceScatter(a_, b_, 4, chorusBfloat16, chorusBxor, c0(), nullptr), chorusInvalidArgument,
                 c0(), "datatype=9 (bfloat16)");
}

TEST_F(Validation, CountTimesSizeOverflow) {
  const size_t half = std::numeric_limits<size_t>::max() / 2;
  const std::string halfText = std::to_string(half);
  EXPECT_REFUSED(chorusAllReduce(a_, b_, half, chorusFloat64, chorusSum, c0(), nullptr), chorusInvalidArgument,
                 c0(), "count=" + halfText, "overflows");
  EXPECT_REFUSED(chorusAllReduce(a_, b_, std::numeric_limits<size_t>::max(), chorusInt32,
                                 chorusSum, c0(), nullptr),
                 chorusInvalidArgument, c0(), "count=", "overflows");
  EXPECT_REFUSED(chorusBroadcast(a_, b_, half, chorusFloat64, 0, c0(), nullptr), chorusInvalidArgument, c0(),
                 "count=" + halfText);
  EXPECT_REFUSED(chorusReduce(a_, b_, half, chorusFloat64, chorusSum, 0, c0(), nullptr), chorusInvalidArgument,
                 c0(), "count=" + halfText);
  EXPECT_REFUSED(chorusSend(a_, half, chorusFloat64, 1, c0(), nullptr), chorusInvalidArgument, c0(),
                 "count=" + halfText);
  EXPECT_REFUSED(chorusRecv(a_, half, chorusFloat64, 1, c0(), nullptr), chorusInvalidArgument, c0(),
                 "count=" + halfText);
  // sendcount * 4 bytes fits, but nranks (2) times that does not.
  const size_t q = std::numeric_limits<size_t>::max() / 8 + 1;
  const std::string qText = std::to_string(q);
  EXPECT_REFUSED(chorusAllGather(a_, b_, q, chorusFloat32, c0(), nullptr), chorusInvalidArgument, c0(),
                 "sendcount=" + qText, "overflows");
  EXPECT_REFUSED(chorusReduceScatter(a_, b_, q, chorusFloat32, chorusSum, c0(), nullptr), chorusInvalidArgument,
                 c0(), "recvcount=" + qText, "overflows");
  EXPECT_REFUSED(chorusAllToAll(a_, b_, q, chorusFloat32, c0(), nullptr), chorusInvalidArgument, c0(),
                 "count=" + qText, "overflows");
  EXPECT_REFUSED(chorusGather(a_, b_, q, chorusFloat32, 0, c0(), nullptr), chorusInvalidArgument, c0(),
                 "count=" + qText, "overflows");
  EXPECT_REFUSED(chorusScatter(a_, b_, q, chorusFloat32, 0, c1(), nullptr), chorusInvalidArgument, c1(),
                 "count=" + qText, "overflows");
  // recvcounts whose sum overflows, and whose sum of bytes does.
  const size_t wrap[2] = {std::numeric_limits<size_t>::max(), 1}, big[2] = {q, q};
  EXPECT_REFUSED(chorusAllGatherV(a_, b_, wrap, chorusFloat32, c0(), nullptr), chorusInvalidArgument, c0(),
                 "recvcounts[0] + ... + recvcounts[1] overflows");
  EXPECT_REFUSED(chorusReduceScatterV(a_, b_, big, chorusFloat32, chorusSum, c1(), nullptr), chorusInvalidArgument,
                 c1(), "the sum of recvcounts=", "overflows");
}

TEST_F(Validation, OverlappingBuffersThatAreNotInPlace) {
  float* buf = a_;
  EXPECT_REFUSED(chorusAllReduce(buf, buf + 1, 10, chorusFloat32, chorusSum, c0(), nullptr), chorusInvalidArgument,
                 c0(), "sendbuff", "recvbuff", "overlap");
  EXPECT_REFUSED(chorusAllReduce(buf + 3, buf, 10, chorusFloat32, chorusSum, c1(), nullptr), chorusInvalidArgument,
                 c1(), "overlap");
  // One byte off is still an overlap.
  EXPECT_REFUSED(chorusAllReduce(reinterpret_cast<char*>(buf) + 1, buf, 10, chorusFloat32, chorusSum, c0(), nullptr),
                 chorusInvalidArgument, c0(), "overlap");
  EXPECT_REFUSED(chorusBroadcast(buf, buf + 2, 10, chorusFloat32, 0, c0(), nullptr), chorusInvalidArgument, c0(),
                 "overlap");
  EXPECT_REFUSED(chorusReduce(buf, buf + 2, 10, chorusFloat32, chorusSum, 1, c1(), nullptr), chorusInvalidArgument,
                 c1(), "overlap");
  // AllGather: in place means sendbuff == recvbuff + rank*sendcount.
  EXPECT_REFUSED(chorusAllGather(buf + 1, buf, 10, chorusFloat32, c0(), nullptr), chorusInvalidArgument, c0(),
                 "overlap", "in place means");
  EXPECT_REFUSED(chorusAllGather(buf, buf, 10, chorusFloat32, c1(), nullptr), chorusInvalidArgument, c1(),
                 "overlap");  // rank 1's in-place position is recvbuff + 10
  // ReduceScatter: in place means recvbuff == sendbuff + rank*recvcount.
  EXPECT_REFUSED(chorusReduceScatter(buf, buf + 5, 10, chorusFloat32, chorusSum, c0(), nullptr),
                 chorusInvalidArgument, c0(), "overlap");
  EXPECT_REFUSED(chorusReduceScatter(buf, buf, 10, chorusFloat32, chorusSum, c1(), nullptr), chorusInvalidArgument,
                 c1(), "overlap");
  // AllToAll: never in place.
  EXPECT_REFUSED(chorusAllToAll(buf, buf, 10, chorusFloat32, c0(), nullptr), chorusInvalidArgument, c0(),
                 "overlap", "not allowed");
  EXPECT_REFUSED(chorusAllToAll(buf, buf + 19, 10, chorusFloat32, c0(), nullptr), chorusInvalidArgument, c0(),
                 "overlap");
  // Gather: in place means sendbuff == recvbuff + root*count, on the root (elsewhere recvbuff is not looked at).
  EXPECT_REFUSED(chorusGather(buf + 1, buf, 10, chorusFloat32, 1, c1(), nullptr), chorusInvalidArgument, c1(),
                 "overlap", "in place means");
  // Scatter: in place means recvbuff == sendbuff + root*count.
  EXPECT_REFUSED(chorusScatter(buf, buf, 10, chorusFloat32, 1, c1(), nullptr), chorusInvalidArgument, c1(),
                 "overlap");
  // AllGatherV: sendbuff is this rank's block of recvbuff; ReduceScatterV: recvbuff is this rank's block of sendbuff.
  const size_t counts[2] = {6, 4};
  EXPECT_REFUSED(chorusAllGatherV(buf, buf, counts, chorusFloat32, c1(), nullptr), chorusInvalidArgument, c1(),
                 "overlap");  // rank 1's block starts 6 elements in
  EXPECT_REFUSED(chorusReduceScatterV(buf, buf + 5, counts, chorusFloat32, chorusSum, c1(), nullptr),
                 chorusInvalidArgument, c1(), "overlap");
}

// ---------------------------------------------------------------------------------------------------------
// Groups and streams

TEST_F(Validation, GroupMisuse) {
  EXPECT_REFUSED(chorusGroupEnd(), chorusInvalidUsage, nullptr, "chorusGroupEnd", "chorusGroupStart");
  EXPECT_OK(chorusGroupStart());
  EXPECT_REFUSED(chorusCommDestroy(c0()), chorusInvalidUsage, nullptr, "chorusCommDestroy", "chorusGroupStart");
  chorusComm_t extra = nullptr;
  chorusUniqueId id;
  std::memset(&id, 0, sizeof id);
  EXPECT_REFUSED(chorusCommInitRank(&extra, 2, id, 0), chorusInvalidUsage, nullptr, "chorusCommInitRank",
                 "chorusGroupStart");
  EXPECT_EQ(extra, nullptr);
  // A bad call inside a group is refused at once and records nothing.
  EXPECT_REFUSED(chorusAllReduce(a_, b_, 4, kBadType, chorusSum, c0(), nullptr), chorusInvalidArgument, c0(),
                 "datatype=42");
  EXPECT_OK(chorusGroupEnd());
  EXPECT_REFUSED(chorusGroupEnd(), chorusInvalidUsage, nullptr, "chorusGroupStart");
  int n = 0;
  EXPECT_OK(chorusCommCount(c0(), &n));  // still alive: the destroy was refused
  EXPECT_EQ(n, 2);
  // Groups nest; a stray GroupEnd after the outermost one is still refused.
  EXPECT_OK(chorusGroupStart());
  EXPECT_OK(chorusGroupStart());
  EXPECT_OK(chorusGroupEnd());
  EXPECT_OK(chorusGroupEnd());
  EXPECT_REFUSED(chorusGroupEnd(), chorusInvalidUsage, nullptr, "chorusGroupStart");
}

TEST_F(Validation, ForeignAndDestroyedStreams) {
  chorusStream_t s1 = nullptr, dead = nullptr;
  ASSERT_EQ(chorusStreamCreate(c1(), &s1), chorusSuccess) << chorusGetLastError(c1());
  ASSERT_EQ(chorusStreamCreate(c0(), &dead), chorusSuccess) << chorusGetLastError(c0());
  ASSERT_EQ(chorusStreamDestroy(dead), chorusSuccess);
  // No stream is created below, so the freed address cannot come back as a live stream.
  EXPECT_REFUSED(chorusAllReduce(a_, b_, 4, chorusFloat32, chorusSum, c0(), s1), chorusInvalidUsage, c0(),
                 "stream", "another communicator");
  EXPECT_REFUSED(chorusBarrier(c0(), s1), chorusInvalidUsage, c0(), "another communicator");
  EXPECT_REFUSED(chorusAllReduce(a_, b_, 4, chorusFloat32, chorusSum, c0(), dead), chorusInvalidUsage, c0(),
                 "stream", "not a live stream");
  EXPECT_REFUSED(chorusSend(a_, 4, chorusFloat32, 1, c0(), dead), chorusInvalidUsage, c0(), "not a live stream");
  EXPECT_REFUSED(chorusStreamSynchronize(dead), chorusInvalidUsage, nullptr, "not a live stream");
  EXPECT_REFUSED(chorusStreamQuery(dead), chorusInvalidUsage, nullptr, "not a live stream");
  EXPECT_REFUSED(chorusStreamDestroy(dead), chorusInvalidUsage, nullptr, "not a live stream");
  EXPECT_EQ(chorusStreamQuery(s1), chorusSuccess);  // nothing was enqueued on it
  EXPECT_OK(chorusStreamDestroy(s1));
}

// ---------------------------------------------------------------------------------------------------------
// Communicator creation

TEST(Init, BadRankNranksAndId) {
  Watchdog wd;
  chorusUniqueId id;
  ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess) << chorusGetLastError(nullptr);
  chorusComm_t c = reinterpret_cast<chorusComm_t>(0x1);
  EXPECT_REFUSED(chorusCommInitRank(&c, 0, id, 0), chorusInvalidArgument, nullptr, "nranks=0");
  EXPECT_EQ(c, nullptr);
  EXPECT_REFUSED(chorusCommInitRank(&c, -3, id, 0), chorusInvalidArgument, nullptr, "nranks=-3");
  EXPECT_REFUSED(chorusCommInitRank(&c, 4, id, 4), chorusInvalidArgument, nullptr, "rank=4", "nranks=4");
  EXPECT_REFUSED(chorusCommInitRank(&c, 4, id, -1), chorusInvalidArgument, nullptr, "rank=-1");
  EXPECT_EQ(c, nullptr);

  chorusUniqueId garbage;
  std::memset(&garbage, 0xAB, sizeof garbage);
  EXPECT_REFUSED(chorusCommInitRank(&c, 2, garbage, 0), chorusInvalidArgument, nullptr, "commId", "magic");
  std::memset(&garbage, 0, sizeof garbage);
  EXPECT_REFUSED(chorusCommInitRank(&c, 2, garbage, 0), chorusInvalidArgument, nullptr, "commId");
  chorusUniqueId wrongVersion = id;
  wrongVersion.internal[4] ^= 0x7F;  // the version field follows the 4-byte magic
  EXPECT_REFUSED(chorusCommInitRank(&c, 2, wrongVersion, 0), chorusInvalidArgument, nullptr, "commId", "version");
  chorusUniqueId badAddr = id;
  std::memset(badAddr.internal + 16, 0x7F, 4);  // the root address length
  EXPECT_REFUSED(chorusCommInitRank(&c, 2, badAddr, 0), chorusInvalidArgument, nullptr, "commId", "address");
  EXPECT_EQ(c, nullptr);
}

TEST(Init, ConfigIsCheckedNamingTheField) {
  Watchdog wd;
  chorusUniqueId id;
  ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess) << chorusGetLastError(nullptr);
  struct Bad {
    void (*bend)(chorusConfig_t&);
    const char* says;
  };
  const Bad bad[] = {
      {[](chorusConfig_t& c) { c.magic = 0; }, "CHORUS_CONFIG_INITIALIZER"},
      {[](chorusConfig_t& c) { c.size = 8; }, "size 8"},
      {[](chorusConfig_t& c) { c.timeoutSec = -1; }, "config->timeoutSec=-1"},
      {[](chorusConfig_t& c) { c.initTimeoutSec = std::nan(""); }, "config->initTimeoutSec=nan"},
      {[](chorusConfig_t& c) { c.peerTimeoutSec = -3; }, "config->peerTimeoutSec=-3"},
  };
  for (const Bad& b : bad) {
    chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
    b.bend(config);
    chorusComm_t c = nullptr;
    EXPECT_REFUSED(chorusCommInitRankConfig(&c, 1, id, 0, &config), chorusInvalidArgument, nullptr, b.says);
    EXPECT_EQ(c, nullptr);
  }
}

// A config of the first layout (before peerTimeoutSec) is still accepted; its peerTimeoutSec is not read.
TEST(Init, ConfigOfTheFirstLayoutIsAccepted) {
  Watchdog wd;
  chorusUniqueId id;
  ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess) << chorusGetLastError(nullptr);
  chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
  config.size = offsetof(chorusConfig_t, peerTimeoutSec);
  config.peerTimeoutSec = -1;  // past the caller's struct: never looked at
  chorusComm_t c = nullptr;
  ASSERT_EQ(chorusCommInitRankConfig(&c, 1, id, 0, &config), chorusSuccess) << chorusGetLastError(nullptr);
  EXPECT_EQ(chorusCommDestroy(c), chorusSuccess);
}

// A communicator's own initTimeoutSec bounds its creation (the environment's CHORUS_INIT_TIMEOUT is 120 s here).
TEST(Init, ConfigInitTimeoutBoundsCreation) {
  Watchdog wd;
  chorusUniqueId id;
  ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess) << chorusGetLastError(nullptr);
  chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
  config.initTimeoutSec = 1;
  chorusComm_t c = nullptr;
  auto t0 = Clock::now();
  chorusResult_t rc = chorusCommInitRankConfig(&c, 2, id, 0, &config);  // rank 1 never comes
  double took = secondsSince(t0);
  EXPECT_EQ(rc, chorusTimeout) << codeName(rc) << ": " << chorusGetLastError(nullptr);
  EXPECT_GE(took, 0.9);
  EXPECT_LT(took, 10.0);
  EXPECT_EQ(c, nullptr);
}

TEST(Init, FromEnvWithoutRankOrRoot) {
  Watchdog wd;
  EnvGuard env;
  for (const char* v : {"CHORUS_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "CHORUS_NRANKS",
                        "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "CHORUS_ROOT",
                        "MASTER_ADDR", "MASTER_PORT", "CHORUS_SECRET"})
    env.set(v, nullptr);
  chorusComm_t c = nullptr;
  EXPECT_REFUSED(chorusCommInitFromEnv(&c), chorusInvalidUsage, nullptr, "rank", "CHORUS_RANK");
  env.set("CHORUS_NRANKS", "2");
  EXPECT_REFUSED(chorusCommInitFromEnv(&c), chorusInvalidUsage, nullptr, "rank", "CHORUS_RANK");
  env.set("CHORUS_RANK", "abc");
  EXPECT_REFUSED(chorusCommInitFromEnv(&c), chorusInvalidArgument, nullptr, "CHORUS_RANK='abc'");
  env.set("CHORUS_RANK", "5");
  EXPECT_REFUSED(chorusCommInitFromEnv(&c), chorusInvalidArgument, nullptr, "CHORUS_RANK=5", "CHORUS_NRANKS=2");
  env.set("CHORUS_RANK", "1");
  EXPECT_REFUSED(chorusCommInitFromEnv(&c), chorusInvalidUsage, nullptr, "CHORUS_ROOT");
  env.set("CHORUS_ROOT", "127.0.0.1:1");
  env.set("CHORUS_SECRET", "not-hex");
  EXPECT_REFUSED(chorusCommInitFromEnv(&c), chorusInvalidArgument, nullptr, "CHORUS_SECRET='not-hex'");
  EXPECT_EQ(c, nullptr);
}

// A root address that another process listens on is refused as such (Error::sysErrno, not the message's text),
// not retried on every interface.
TEST(Init, FromEnvWithTheRootAddressTaken) {
  Watchdog wd;
  const int taken = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(taken, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(taken, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(taken, 1), 0);
  ASSERT_EQ(::getsockname(taken, reinterpret_cast<sockaddr*>(&a), &len), 0);
  EnvGuard env;
  env.set("CHORUS_RANK", "0");
  env.set("CHORUS_NRANKS", "2");
  const std::string root = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  env.set("CHORUS_ROOT", root.c_str());
  chorusComm_t c = nullptr;
  EXPECT_REFUSED(chorusCommInitFromEnv(&c), chorusSystemError, nullptr, "cannot listen at the root address",
                 root.c_str(), "CHORUS_ROOT");
  EXPECT_EQ(c, nullptr);
  ::close(taken);
}

TEST(Init, BogusAlgoAndNsocks) {
  Watchdog wd;
  chorusUniqueId id;
  ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess) << chorusGetLastError(nullptr);
  chorusComm_t c = nullptr;
  {
    EnvGuard env;
    env.set("CHORUS_ALGO", "BOGUS");
    EXPECT_REFUSED(chorusCommInitRank(&c, 2, id, 0), chorusInvalidArgument, nullptr, "CHORUS_ALGO", "BOGUS",
                   "RING", "AUTO");
    chorusUniqueId other;
    EXPECT_REFUSED(chorusGetUniqueId(&other), chorusInvalidArgument, nullptr, "CHORUS_ALGO", "RING", "AUTO");
  }
  {
    EnvGuard env;
    env.set("CHORUS_TRANSPORTS", "tcp");  // a transport reads its own settings (transports/registry.h)
    env.set("CHORUS_NSOCKS", "0");
    EXPECT_REFUSED(chorusCommInitRank(&c, 2, id, 0), chorusInvalidArgument, nullptr, "CHORUS_NSOCKS", "'0'");
  }
  {
    EnvGuard env;
    env.set("CHORUS_TRANSPORTS", "tcp");
    env.set("CHORUS_NSOCKS", "17");
    EXPECT_REFUSED(chorusCommInitRank(&c, 2, id, 0), chorusInvalidArgument, nullptr, "CHORUS_NSOCKS", "'17'");
  }
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(std::getenv("CHORUS_ALGO"), nullptr);
}

// ---------------------------------------------------------------------------------------------------------
// Dead handles

TEST(Lifecycle, DestroyedCommunicator) {
  Watchdog wd;
  auto comms = makeComms(2);
  chorusComm_t dead = comms[0];
  ASSERT_EQ(chorusCommDestroy(comms[0]), chorusSuccess) << chorusGetLastError(nullptr);
  ASSERT_EQ(chorusCommDestroy(comms[1]), chorusSuccess) << chorusGetLastError(nullptr);
  comms.clear();
  // No communicator is created below, so the freed address cannot come back as a live handle.
  float a[4] = {}, b[4] = {};
  int n = 0;
  chorusResult_t ae;
  chorusStream_t s = nullptr;
  EXPECT_REFUSED(chorusAllReduce(a, b, 4, chorusFloat32, chorusSum, dead, nullptr), chorusInvalidUsage, dead,
                 "not a live communicator");
  EXPECT_REFUSED(chorusBarrier(dead, nullptr), chorusInvalidUsage, dead, "not a live communicator");
  EXPECT_REFUSED(chorusSend(a, 4, chorusFloat32, 1, dead, nullptr), chorusInvalidUsage, dead, "not a live");
  EXPECT_REFUSED(chorusCommCount(dead, &n), chorusInvalidUsage, dead, "not a live communicator");
  EXPECT_REFUSED(chorusCommGetAsyncError(dead, &ae), chorusInvalidUsage, dead, "not a live communicator");
  EXPECT_REFUSED(chorusStreamCreate(dead, &s), chorusInvalidUsage, dead, "not a live communicator");
  EXPECT_REFUSED(chorusCommDestroy(dead), chorusInvalidUsage, dead, "not a live communicator");
  EXPECT_REFUSED(chorusCommAbort(dead), chorusInvalidUsage, dead, "not a live communicator");
  EXPECT_NE(chorusGetLastError(dead), nullptr);
}

TEST(Lifecycle, AbortedCommunicator) {
  Watchdog wd;
  auto comms = makeComms(2);
  chorusComm_t dead = comms[0];
  ASSERT_EQ(chorusCommAbort(comms[0]), chorusSuccess) << chorusGetLastError(nullptr);
  float a[4] = {}, b[4] = {};
  int n = 0;
  EXPECT_REFUSED(chorusAllReduce(a, b, 4, chorusFloat32, chorusSum, dead, nullptr), chorusInvalidUsage, dead,
                 "not a live communicator");
  EXPECT_REFUSED(chorusCommUserRank(dead, &n), chorusInvalidUsage, dead, "not a live communicator");
  EXPECT_REFUSED(chorusCommDestroy(dead), chorusInvalidUsage, dead, "not a live communicator");
  EXPECT_REFUSED(chorusCommAbort(dead), chorusInvalidUsage, dead, "not a live communicator");
  EXPECT_OK(chorusCommDestroy(comms[1]));
}

// ---------------------------------------------------------------------------------------------------------
// Valid edge cases

TEST(Valid, CountZeroIsANoOpForEveryCall) {
  Watchdog wd;
  auto errors = runRanks(3, [](int r, chorusComm_t& comm) {
    const int n = 3;
    check(chorusAllReduce(nullptr, nullptr, 0, chorusFloat32, chorusSum, comm, nullptr), comm, "allreduce");
    check(chorusBroadcast(nullptr, nullptr, 0, chorusFloat64, 1, comm, nullptr), comm, "broadcast");
    check(chorusReduce(nullptr, nullptr, 0, chorusInt32, chorusMax, 2, comm, nullptr), comm, "reduce");
    check(chorusAllGather(nullptr, nullptr, 0, chorusUint8, comm, nullptr), comm, "allgather");
    check(chorusReduceScatter(nullptr, nullptr, 0, chorusFloat16, chorusAvg, comm, nullptr), comm, "reducescatter");
    check(chorusAllToAll(nullptr, nullptr, 0, chorusBfloat16, comm, nullptr), comm, "alltoall");
    check(chorusGather(nullptr, nullptr, 0, chorusInt8, 1, comm, nullptr), comm, "gather");
    check(chorusScatter(nullptr, nullptr, 0, chorusUint64, 2, comm, nullptr), comm, "scatter");
    const size_t zeros[n] = {0, 0, 0};
    check(chorusAllGatherV(nullptr, nullptr, zeros, chorusFloat32, comm, nullptr), comm, "allgatherv");
    check(chorusReduceScatterV(nullptr, nullptr, zeros, chorusInt32, chorusBand, comm, nullptr), comm,
          "reducescatterv");
    check(chorusGroupStart(), comm, "groupstart");
    check(chorusSend(nullptr, 0, chorusInt64, (r + 1) % n, comm, nullptr), comm, "send");
    check(chorusRecv(nullptr, 0, chorusInt64, (r + n - 1) % n, comm, nullptr), comm, "recv");
    check(chorusGroupEnd(), comm, "groupend");
    // On a stream too.
    chorusStream_t s = nullptr;
    check(chorusStreamCreate(comm, &s), comm, "streamcreate");
    check(chorusAllReduce(nullptr, nullptr, 0, chorusFloat32, chorusProd, comm, s), comm, "allreduce on stream");
    check(chorusStreamSynchronize(s), comm, "sync");
    check(chorusStreamDestroy(s), comm, "streamdestroy");
    // Nothing desynchronised: a real call still lines up.
    int32_t in[5] = {r, r, r, r, r}, out[5] = {};
    check(chorusAllReduce(in, out, 5, chorusInt32, chorusSum, comm, nullptr), comm, "allreduce after");
    for (int32_t v : out)
      if (v != 0 + 1 + 2) throw std::runtime_error("wrong sum " + std::to_string(v));
    chorusResult_t ae = chorusInternalError;
    check(chorusCommGetAsyncError(comm, &ae), comm, "asyncerror");
    if (ae != chorusSuccess) throw std::runtime_error("async error after count-0 calls");
  });
  EXPECT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
}

TEST(Valid, InPlaceLayoutsAreAccepted) {
  Watchdog wd;
  const int n = 3;
  const size_t k = 1001;
  auto errors = runRanks(n, [&](int r, chorusComm_t& comm) {
    std::vector<int32_t> v(k, r + 1);
    check(chorusAllReduce(v.data(), v.data(), k, chorusInt32, chorusSum, comm, nullptr), comm, "allreduce");
    for (int32_t x : v)
      if (x != 6) throw std::runtime_error("in-place allreduce wrong");
    std::vector<int32_t> g(k * n, -1);
    std::fill(g.begin() + static_cast<long>(r * k), g.begin() + static_cast<long>((r + 1) * k), r);
    check(chorusAllGather(g.data() + r * k, g.data(), k, chorusInt32, comm, nullptr), comm, "allgather");
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i] != static_cast<int32_t>(i / k)) throw std::runtime_error("in-place allgather wrong");
    std::vector<int32_t> s(k * n, 1);
    check(chorusReduceScatter(s.data(), s.data() + r * k, k, chorusInt32, chorusSum, comm, nullptr), comm, "rs");
    for (size_t i = 0; i < k; ++i)
      if (s[r * k + i] != n) throw std::runtime_error("in-place reducescatter wrong");
    std::vector<int32_t> b(k, r == 2 ? 77 : 0);
    check(chorusBroadcast(b.data(), b.data(), k, chorusInt32, 2, comm, nullptr), comm, "broadcast");
    for (int32_t x : b)
      if (x != 77) throw std::runtime_error("in-place broadcast wrong");
  });
  EXPECT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
}

TEST(Valid, RefusedCallsDoNotBreakTheCommunicator) {
  Watchdog wd;
  const size_t k = 4099;
  auto errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    std::vector<float> in(k, static_cast<float>(r + 1)), out(k, 0.0f);
    chorusStream_t s = nullptr;
    check(chorusStreamCreate(comm, &s), comm, "streamcreate");
    auto expectRefused = [&](chorusResult_t rc, const char* what) {
      if (rc == chorusSuccess) throw std::runtime_error(std::string(what) + " was accepted");
    };
    expectRefused(chorusAllReduce(in.data(), out.data(), k, kBadType, chorusSum, comm, nullptr), "bad datatype");
    expectRefused(chorusAllReduce(in.data(), out.data(), k, chorusFloat32, kBadOp, comm, s), "bad op");
    expectRefused(chorusBroadcast(in.data(), out.data(), k, chorusFloat32, 7, comm, nullptr), "bad root");
    expectRefused(chorusAllReduce(nullptr, out.data(), k, chorusFloat32, chorusSum, comm, nullptr), "NULL sendbuff");
    expectRefused(chorusAllReduce(in.data(), in.data() + 1, k - 1, chorusFloat32, chorusSum, comm, nullptr),
                  "overlap");
    expectRefused(chorusSend(in.data(), k, chorusFloat32, r, comm, nullptr), "send to self");
    expectRefused(chorusAllGather(in.data(), out.data(), SIZE_MAX / 4, chorusFloat32, comm, nullptr), "overflow");
    expectRefused(chorusGroupEnd(), "stray group end");
    chorusResult_t ae = chorusInternalError;
    check(chorusCommGetAsyncError(comm, &ae), comm, "asyncerror");
    if (ae != chorusSuccess) throw std::runtime_error("a refused call set an async error");
    check(chorusAllReduce(in.data(), out.data(), k, chorusFloat32, chorusSum, comm, nullptr), comm, "allreduce");
    check(chorusAllReduce(in.data(), in.data(), k, chorusFloat32, chorusMax, comm, s), comm, "allreduce stream");
    check(chorusStreamSynchronize(s), comm, "sync");
    check(chorusStreamDestroy(s), comm, "streamdestroy");
    for (size_t i = 0; i < k; ++i)
      if (out[i] != 3.0f || in[i] != 2.0f) throw std::runtime_error("wrong result after refused calls");
  });
  EXPECT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
}

// ---------------------------------------------------------------------------------------------------------
// Wire bytes of the ring AllReduce

TEST(WireBytes, RingAllReduceSendsExactlyTheScheduledSegments) {
  Watchdog wd;
  const size_t count = 1000003;
  const size_t es = sizeof(float);
  for (int n : {2, 3, 4, 5}) {
    std::vector<uint64_t> sent(static_cast<size_t>(n), 0);
    auto errors = runRanks(n, [&](int r, chorusComm_t& comm) {
      std::vector<float> in(count, 1.0f), out(count, 0.0f);
      auto* c = static_cast<chorus::Comm*>(comm);
      uint64_t before = c->bytesSent();
      check(chorusAllReduce(in.data(), out.data(), count, chorusFloat32, chorusSum, comm, nullptr), comm, "ar");
      sent[static_cast<size_t>(r)] = c->bytesSent() - before;
      for (size_t i = 0; i < count; i += 997)
        if (out[i] != static_cast<float>(n)) throw std::runtime_error("wrong sum");
    });
    ASSERT_TRUE(errors.empty()) << "n=" << n << ": " << ::testing::PrintToString(errors);
    auto seg = [&](int s) { return count / n + (static_cast<size_t>(s) < count % n ? 1 : 0); };
    for (int r = 0; r < n; ++r) {
      uint64_t want = 0;
      for (int j = 0; j <= n - 2; ++j) want += seg(((r - j) % n + n) % n);      // reduce-scatter
      for (int j = 0; j <= n - 2; ++j) want += seg(((r + 1 - j) % n + n) % n);  // all-gather
      want *= es;
      EXPECT_EQ(sent[static_cast<size_t>(r)], want) << "n=" << n << " rank " << r;
      double ideal = 2.0 * (n - 1) / n * static_cast<double>(count * es);
      EXPECT_LE(std::abs(static_cast<double>(sent[static_cast<size_t>(r)]) - ideal), 0.01 * ideal)
          << "n=" << n << " rank " << r;
    }
  }
}

}  // namespace
