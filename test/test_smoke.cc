// Quick end-to-end checks of each collective on a few rank counts (the full matrix is test_collectives.cc).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "test/ranks.h"

using chorus::test::check;
using chorus::test::runRanks;

class Smoke : public ::testing::TestWithParam<int> {};

TEST_P(Smoke, AllReduceFloatSum) {
  int n = GetParam();
  // Counts that reach each AUTO choice: recursive doubling, halving-doubling (4+ ranks), ring.
  for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(65537), size_t(500001), size_t(1000003)}) {
    auto errors = runRanks(n, [&](int r, chorusComm_t& comm) {
      std::vector<float> in(count), out(count, -1.0f);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((i * 7 + r * 3) % 5);
      check(chorusAllReduce(in.data(), out.data(), count, chorusFloat32, chorusSum, comm, nullptr), comm, "allreduce");
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int q = 0; q < n; ++q) want += static_cast<float>((i * 7 + q * 3) % 5);
        if (out[i] != want) throw std::runtime_error("wrong at " + std::to_string(i));
      }
    });
    EXPECT_TRUE(errors.empty()) << "count " << count << ": " << ::testing::PrintToString(errors);
  }
}

TEST_P(Smoke, BroadcastReduceGatherScatterAllToAll) {
  int n = GetParam();
  const size_t count = 100003;
  auto errors = runRanks(n, [&](int r, chorusComm_t& comm) {
    std::vector<int32_t> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = r == 1 % n ? static_cast<int32_t>(i) : -1;
    check(chorusBroadcast(buf.data(), buf.data(), count, chorusInt32, 1 % n, comm, nullptr), comm, "bcast");
    for (size_t i = 0; i < count; ++i)
      if (buf[i] != static_cast<int32_t>(i)) throw std::runtime_error("bcast wrong");
    std::vector<int32_t> red(count, 0);
    check(chorusReduce(buf.data(), red.data(), count, chorusInt32, chorusSum, 0, comm, nullptr), comm, "reduce");
    if (r == 0)
      for (size_t i = 0; i < count; ++i)
        if (red[i] != static_cast<int32_t>(i) * n) throw std::runtime_error("reduce wrong");
    std::vector<int32_t> all(count * n);
    std::vector<int32_t> mine(count, r);
    check(chorusAllGather(mine.data(), all.data(), count, chorusInt32, comm, nullptr), comm, "allgather");
    for (size_t i = 0; i < all.size(); ++i)
      if (all[i] != static_cast<int32_t>(i / count)) throw std::runtime_error("allgather wrong");
    std::vector<int32_t> rs(count);
    check(chorusReduceScatter(all.data(), rs.data(), count, chorusInt32, chorusSum, comm, nullptr), comm, "rs");
    for (size_t i = 0; i < count; ++i)
      if (rs[i] != r * n) throw std::runtime_error("reducescatter wrong");
    std::vector<int32_t> a2a(count * n), got(count * n);
    for (size_t i = 0; i < a2a.size(); ++i) a2a[i] = r * 1000 + static_cast<int32_t>(i / count);
    check(chorusAllToAll(a2a.data(), got.data(), count, chorusInt32, comm, nullptr), comm, "alltoall");
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != static_cast<int32_t>(i / count) * 1000 + r) throw std::runtime_error("alltoall wrong");
    check(chorusBarrier(comm, nullptr), comm, "barrier");
  });
  EXPECT_TRUE(errors.empty()) << ::testing::PrintToString(errors);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Smoke, ::testing::Values(1, 2, 3, 4, 5, 8));
