// chorusCommSplit with ncclCommSplit's semantics: one communicator per color, ranks ordered by key and then by
// their rank in the parent, CHORUS_SPLIT_NOCOLOR joining none; the parent's settings kept unless a config is
// given; bad arguments refused by name, and a refused rank failing the others at once; collectives on the new
// communicators side by side with the parent's.
// chorusCommShrink with ncclCommShrink's: the survivors renumbered in order, on a healthy and on a failed parent,
// CHORUS_SHRINK_ABORT ending the parent's pending work, survivors that disagree failing within the creation
// timeout instead of forming a wrong communicator. (A real rank killed, 100 times over: recovery_loop.cc.)
//
// Every test runs under a watchdog: a test that takes longer than 20 s prints its name and ends the process.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "lib/comm/comm.h"
#include "test/comms.h"
#include "test/error_checks.h"
#include "test/ranks.h"
#include "test/watchdog.h"

namespace {

using chorus::test::check;
using chorus::test::destroyAll;
using chorus::test::makeComms;
using chorus::test::onAll;
using chorus::test::Watchdog;

// Five ranks: color r % 2, but rank 4 opts out; color 0 ordered by key -r (reversed), color 1 by equal keys
// (so by parent rank). Then an AllReduce on each new communicator and on the parent, concurrently per rank.
TEST(Split, ColorsFormCommunicatorsOrderedByKeyThenRank) {
  Watchdog wd;
  const int n = 5;
  auto comms = makeComms(n);
  std::vector<chorusComm_t> sub(n, nullptr);
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    const int color = r == 4 ? CHORUS_SPLIT_NOCOLOR : r % 2;
    check(chorusCommSplit(c, color, color == 0 ? -r : 7, &sub[r], nullptr), nullptr, "chorusCommSplit");
  });
  ASSERT_TRUE(errs.empty()) << errs[0];
  EXPECT_EQ(sub[4], nullptr);
  const int wantRank[4] = {1, 0, 0, 1};  // color 0: ranks 2, 0; color 1: ranks 1, 3
  for (int r = 0; r < 4; ++r) {
    ASSERT_NE(sub[r], nullptr) << "rank " << r;
    int rank = -1, count = -1;
    EXPECT_OK(chorusCommUserRank(sub[r], &rank));
    EXPECT_OK(chorusCommCount(sub[r], &count));
    EXPECT_EQ(rank, wantRank[r]) << "rank " << r;
    EXPECT_EQ(count, 2) << "rank " << r;
  }
  errs = onAll(comms, [&](int r, chorusComm_t c) {
    std::vector<double> mine(1001, r + 1.0), all(1001, r + 1.0);
    if (sub[r] != nullptr) {
      check(chorusAllReduce(mine.data(), mine.data(), mine.size(), chorusFloat64, chorusSum, sub[r], nullptr),
            nullptr, "AllReduce on the new communicator");
      const double want = r % 2 == 0 ? 1 + 3 : 2 + 4;
      for (double v : mine)
        if (v != want) throw std::runtime_error("new communicator's AllReduce: " + std::to_string(v));
    }
    check(chorusAllReduce(all.data(), all.data(), all.size(), chorusFloat64, chorusSum, c, nullptr), nullptr,
          "AllReduce on the parent");
    for (double v : all)
      if (v != 15) throw std::runtime_error("parent's AllReduce: " + std::to_string(v));
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
  destroyAll(sub);
  destroyAll(comms);
}

// Rows then columns of a 2 x 3 grid, ten times over one parent, each rank going on as soon as its own split is
// done: a rank of a finished color reaches the next round's host while that host may still serve the last
// round's root on the same port (Note [Rendezvous]); it must join the right one.
TEST(Split, BackToBackSplitsOfOneParentMeetTheRightRoots) {
  Watchdog wd;
  const int n = 6;
  auto comms = makeComms(n);
  // A rank that fails leaves the others waiting for it until the creation timeout: one well inside the watchdog's
  // bound makes the run report the first failure instead of a hang.
  chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
  config.initTimeoutSec = 8;
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    for (int round = 0; round < 10; ++round)
      for (int byRow : {1, 0}) {
        chorusComm_t sub = nullptr;
        check(chorusCommSplit(c, byRow ? r / 3 : r % 3, r, &sub, &config), nullptr, "chorusCommSplit");
        int32_t v = r, want = 0;
        for (int q = 0; q < n; ++q)
          if (byRow ? q / 3 == r / 3 : q % 3 == r % 3) want += q;
        check(chorusAllReduce(&v, &v, 1, chorusInt32, chorusSum, sub, nullptr), nullptr, "AllReduce");
        if (v != want) throw std::runtime_error("sum " + std::to_string(v) + ", expected " + std::to_string(want));
        check(chorusCommDestroy(sub), nullptr, "chorusCommDestroy");
      }
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
  destroyAll(comms);
}

TEST(Split, KeepsTheParentsSettingsUnlessGivenAConfig) {
  Watchdog wd;
  auto comms = makeComms(2);
  std::vector<chorusComm_t> kept(2, nullptr), given(2, nullptr);
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    check(chorusCommSplit(c, 0, r, &kept[r], nullptr), nullptr, "split without config");
    chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
    config.timeoutSec = 3.5;
    check(chorusCommSplit(c, 0, r, &given[r], &config), nullptr, "split with config");
  });
  ASSERT_TRUE(errs.empty()) << errs[0];
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(kept[r]->config().timeoutSec, comms[r]->config().timeoutSec);
    EXPECT_EQ(given[r]->config().timeoutSec, 3.5);
  }
  destroyAll(kept);
  destroyAll(given);
  destroyAll(comms);
}

TEST(Split, RefusesABadColorAndANullOutputByName) {
  Watchdog wd;
  auto comms = makeComms(1);
  chorusComm_t out = reinterpret_cast<chorusComm_t>(&out);  // must come back NULL
  EXPECT_REFUSED(chorusCommSplit(comms[0], -5, 0, &out, nullptr), chorusInvalidArgument, nullptr, "color=-5");
  EXPECT_EQ(out, nullptr);
  EXPECT_REFUSED(chorusCommSplit(comms[0], 0, 0, nullptr, nullptr), chorusInvalidArgument, nullptr, "newcomm");
  chorusConfig_t bad = CHORUS_CONFIG_INITIALIZER;
  bad.timeoutSec = -1;
  EXPECT_REFUSED(chorusCommSplit(comms[0], 0, 0, &out, &bad), chorusInvalidArgument, nullptr, "timeoutSec");
  EXPECT_REFUSED(chorusCommSplit(nullptr, 0, 0, &out, nullptr), chorusInvalidArgument, nullptr, "comm");
  // The communicator still works, and the refused calls' rounds left the next split able to meet.
  EXPECT_OK(chorusCommSplit(comms[0], 0, 0, &out, nullptr));
  ASSERT_NE(out, nullptr);
  EXPECT_OK(chorusCommDestroy(out));
  destroyAll(comms);
}

// Every rank of comms that is not excluded checks an AllReduce over `sub`, whose members are `members` (ranks of
// the parent, in their new order).
void expectSumOver(const std::vector<chorusComm_t>& sub, const std::vector<int>& members) {
  double want = 0;
  for (int m : members) want += m + 1.0;
  std::vector<chorusComm_t> live;
  for (int m : members) live.push_back(sub[m]);
  auto errs = onAll(live, [&](int i, chorusComm_t c) {
    int rank = -1, count = -1;
    check(chorusCommUserRank(c, &rank), nullptr, "chorusCommUserRank");
    check(chorusCommCount(c, &count), nullptr, "chorusCommCount");
    if (rank != i || count != static_cast<int>(members.size()))
      throw std::runtime_error("rank " + std::to_string(rank) + " of " + std::to_string(count));
    std::vector<double> v(1001, members[i] + 1.0);
    check(chorusAllReduce(v.data(), v.data(), v.size(), chorusFloat64, chorusSum, c, nullptr), nullptr,
          "AllReduce on the shrunk communicator");
    for (double x : v)
      if (x != want) throw std::runtime_error("shrunk communicator's AllReduce: " + std::to_string(x));
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
}

// Rank 1 passes a bad color, then a bad config; the others pass good ones. Each time rank 1 is refused by name and
// the others fail with chorusRemoteError naming rank 1 and its reason, well before the creation timeout (60 s
// here, past the watchdog's 20). Then every rank's next split meets: the refused rank took its part in the rounds.
TEST(Split, ARankRefusingItsArgumentsFailsEveryRankAtOnceAndTheNextSplitMeets) {
  Watchdog wd;
  const int n = 3;
  auto comms = makeComms(n);
  chorusConfig_t good = CHORUS_CONFIG_INITIALIZER, bad = CHORUS_CONFIG_INITIALIZER;
  good.initTimeoutSec = 60;
  bad.initTimeoutSec = -3;
  std::vector<chorusResult_t> rc(n, chorusSuccess);
  std::vector<std::string> text(n);
  std::vector<chorusComm_t> sub(n, nullptr);
  for (const char* reason : {"color=-7", "initTimeoutSec=-3"}) {
    const bool badColor = std::string(reason) == "color=-7";
    auto errs = onAll(comms, [&](int r, chorusComm_t c) {
      const bool refused = r == 1;
      rc[r] = chorusCommSplit(c, refused && badColor ? -7 : 0, r, &sub[r], refused && !badColor ? &bad : &good);
      text[r] = chorusGetLastError(nullptr);
    });
    ASSERT_TRUE(errs.empty()) << errs[0];
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(sub[r], nullptr) << "rank " << r;
      EXPECT_EQ(rc[r], r == 1 ? chorusInvalidArgument : chorusRemoteError) << "rank " << r << ": " << text[r];
      EXPECT_NE(text[r].find(reason), std::string::npos) << "rank " << r << ": " << text[r];
      if (r != 1) {
        EXPECT_NE(text[r].find("rank 1 refused"), std::string::npos) << "rank " << r << ": " << text[r];
      }
    }
  }
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    check(chorusCommSplit(c, 0, r, &sub[r], &good), nullptr, "chorusCommSplit after the refusals");
  });
  ASSERT_TRUE(errs.empty()) << errs[0];
  expectSumOver(sub, {0, 1, 2});
  destroyAll(sub);
  destroyAll(comms);
}

// Five ranks without 1 and 3 (listed in either order): 0, 2, 4 become 0, 1, 2. The parent, shrunk with the
// default flag while healthy, still works for all five afterwards.
TEST(Shrink, SurvivorsFormACommunicatorWithoutTheExcludedRanks) {
  Watchdog wd;
  const int n = 5;
  auto comms = makeComms(n);
  std::vector<chorusComm_t> sub(n, nullptr);
  const std::vector<int> survivors = {0, 2, 4};
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    if (r == 1 || r == 3) return;
    int excluded[2] = {3, 1};
    if (r == 2) std::swap(excluded[0], excluded[1]);
    check(chorusCommShrink(c, excluded, 2, &sub[r], nullptr, CHORUS_SHRINK_DEFAULT), nullptr, "chorusCommShrink");
  });
  ASSERT_TRUE(errs.empty()) << errs[0];
  expectSumOver(sub, survivors);
  errs = onAll(comms, [&](int r, chorusComm_t c) {
    std::vector<int32_t> v(17, r);
    check(chorusAllReduce(v.data(), v.data(), v.size(), chorusInt32, chorusSum, c, nullptr), nullptr, "parent");
    if (v[16] != 10) throw std::runtime_error("parent's AllReduce: " + std::to_string(v[16]));
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
  destroyAll(sub);
  destroyAll(comms);
}

// Rank 3 goes silent (its watchers' verdict is injected, as Note [Liveness] would give it) while rank 0 waits in an
// AllReduce nobody else joins. The survivors shrink with CHORUS_SHRINK_ABORT: rank 0's pending AllReduce fails,
// and they go on without rank 3 — twice over the same failed parent (each shrink is a round of its own). Then all
// four, rank 3 too, split the failed parent.
TEST(Shrink, SurvivorsGoOnFromAFailedCommunicatorAndSplitWorksOnItToo) {
  Watchdog wd;
  const int n = 4;
  auto comms = makeComms(n);
  chorusStream_t stream = nullptr;
  ASSERT_EQ(chorusStreamCreate(comms[0], &stream), chorusSuccess) << chorusGetLastError(nullptr);
  std::vector<int32_t> pending(1000, 1);
  ASSERT_EQ(chorusAllReduce(pending.data(), pending.data(), pending.size(), chorusInt32, chorusSum, comms[0],
                            stream), chorusSuccess);
  for (int r = 1; r < 3; ++r) comms[r]->failFromOutside(chorusRemoteError, "rank 3 stopped answering (test)");
  const std::vector<int> survivors = {0, 1, 2};
  for (int round = 0; round < 2; ++round) {
    std::vector<chorusComm_t> sub(n, nullptr);
    auto errs = onAll(comms, [&](int r, chorusComm_t c) {
      if (r == 3) return;
      int excluded = 3;
      check(chorusCommShrink(c, &excluded, 1, &sub[r], nullptr, CHORUS_SHRINK_ABORT), nullptr, "chorusCommShrink");
    });
    ASSERT_TRUE(errs.empty()) << errs[0];
    if (round == 0) {
      EXPECT_EQ(chorusStreamSynchronize(stream), chorusInvalidUsage);
      EXPECT_NE(std::string(chorusGetLastError(nullptr)).find("CHORUS_SHRINK_ABORT"), std::string::npos)
          << chorusGetLastError(nullptr);
    }
    expectSumOver(sub, survivors);
    destroyAll(sub);
  }
  EXPECT_EQ(chorusStreamDestroy(stream), chorusSuccess);
  std::vector<chorusComm_t> halves(n, nullptr);
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    check(chorusCommSplit(c, r / 2, 0, &halves[r], nullptr), nullptr, "chorusCommSplit of the failed parent");
  });
  ASSERT_TRUE(errs.empty()) << errs[0];
  expectSumOver(halves, {0, 1});
  expectSumOver(halves, {2, 3});
  destroyAll(halves);
  destroyAll(comms);
}

// Ranks 0 and 1 exclude rank 3, ranks 2 and 3 exclude rank 1: both groups would be led by rank 0, but their
// secrets differ, so nobody joins the wrong communicator and every caller fails within the creation timeout.
TEST(Shrink, SurvivorsThatDisagreeFailInsteadOfFormingAWrongCommunicator) {
  Watchdog wd;
  const int n = 4;
  auto comms = makeComms(n);
  chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
  config.initTimeoutSec = 2;
  std::vector<chorusComm_t> sub(n, nullptr);
  std::vector<chorusResult_t> rc(n, chorusSuccess);
  const auto t0 = chorus::test::Clock::now();
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    int excluded = r < 2 ? 3 : 1;
    rc[r] = chorusCommShrink(c, &excluded, 1, &sub[r], &config, CHORUS_SHRINK_DEFAULT);
  });
  EXPECT_LT(chorus::test::secondsSince(t0), 10.0);
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(rc[r], chorusSuccess) << "rank " << r;
    EXPECT_EQ(sub[r], nullptr) << "rank " << r;
  }
  destroyAll(comms);
}

TEST(Shrink, RefusesBadArgumentsByName) {
  Watchdog wd;
  auto comms = makeComms(2);
  chorusComm_t out = reinterpret_cast<chorusComm_t>(&out);  // must come back NULL
  int list[2] = {1, 1};
  EXPECT_REFUSED(chorusCommShrink(comms[0], list, 1, &out, nullptr, 7), chorusInvalidArgument, nullptr,
                 "shrinkFlags=7");
  EXPECT_EQ(out, nullptr);
  EXPECT_REFUSED(chorusCommShrink(comms[0], list, 1, nullptr, nullptr, 0), chorusInvalidArgument, nullptr, "newcomm");
  EXPECT_REFUSED(chorusCommShrink(comms[0], nullptr, 1, &out, nullptr, 0), chorusInvalidArgument, nullptr,
                 "excludeRanksList");
  EXPECT_REFUSED(chorusCommShrink(comms[0], list, -1, &out, nullptr, 0), chorusInvalidArgument, nullptr,
                 "excludeRanksCount=-1");
  EXPECT_REFUSED(chorusCommShrink(comms[0], list, 2, &out, nullptr, 0), chorusInvalidArgument, nullptr,
                 "excludeRanksCount=2");
  list[0] = 2;
  EXPECT_REFUSED(chorusCommShrink(comms[0], list, 1, &out, nullptr, 0), chorusInvalidArgument, nullptr,
                 "excludeRanksList[0]=2");
  list[0] = 0;
  EXPECT_REFUSED(chorusCommShrink(comms[0], list, 1, &out, nullptr, 0), chorusInvalidArgument, nullptr,
                 "excludeRanksList[0]=0", "calling rank");
  chorusConfig_t bad = CHORUS_CONFIG_INITIALIZER;
  bad.initTimeoutSec = -1;
  EXPECT_REFUSED(chorusCommShrink(comms[0], nullptr, 0, &out, &bad, 0), chorusInvalidArgument, nullptr,
                 "initTimeoutSec");
  EXPECT_REFUSED(chorusCommShrink(nullptr, nullptr, 0, &out, nullptr, 0), chorusInvalidArgument, nullptr, "comm");
  // Nothing was sent: excluding nobody gives a copy, and the parent still works.
  EXPECT_OK(chorusCommShrink(comms[1], list, 1, &out, nullptr, 0));
  ASSERT_NE(out, nullptr);
  EXPECT_OK(chorusCommDestroy(out));
  destroyAll(comms);
}

}  // namespace
