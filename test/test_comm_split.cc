// chorusCommSplit with ncclCommSplit's semantics: one communicator per color, ranks ordered by key and then by
// their rank in the parent, CHORUS_SPLIT_NOCOLOR joining none; the parent's settings kept unless a config is
// given; bad arguments refused by name; collectives on the new communicators side by side with the parent's.
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
  // Nothing was sent: the communicator still works.
  EXPECT_OK(chorusCommSplit(comms[0], 0, 0, &out, nullptr));
  ASSERT_NE(out, nullptr);
  EXPECT_OK(chorusCommDestroy(out));
  destroyAll(comms);
}

}  // namespace
