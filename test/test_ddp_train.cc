// The demo trainer under chorusrun: N-rank DDP training equals single-process training (--check), for N = 1..4,
// with and without gradient_as_bucket_view, no_sync micro-batches, an unused branch, uneven data with Join,
// compression; its flags are validated.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "test/shell.h"

using chorus::test::buildDir;
using chorus::test::runShell;

namespace {

std::string trainer(int n, const std::string& flags) {
  return buildDir() + "/scripts/chorusrun -n " + std::to_string(n) + " " + buildDir() +
         "/ddp/trainer/chorus_ddp_train --steps 6 --width 64 --batch 24 --bucket-cap-mb 0.02 --first-bucket-mb 0.01 "
         "--check --quiet " + flags;
}

// Runs and checks the trainer's own verdict: exit 0, the check line within the limit, replicas bit-identical.
void expectEqualToOneProcess(int n, const std::string& flags, double limit = 1e-5) {
  const std::string cmd = trainer(n, flags);
  auto r = runShell(cmd);
  ASSERT_EQ(r.status, 0) << cmd << "\n" << r.output;
  const auto at = r.output.find("max relative difference to the single-process reference ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const double diff = std::atof(r.output.c_str() + at + 57);
  EXPECT_LE(diff, limit) << cmd << "\n" << r.output;
  if (flags.find("--uneven") == std::string::npos) {
    EXPECT_NE(r.output.find("replicas bit-identical"), std::string::npos) << r.output;
  }
}

class Ranks : public ::testing::TestWithParam<int> {};

TEST_P(Ranks, EqualsOneProcess) { expectEqualToOneProcess(GetParam(), ""); }
TEST_P(Ranks, EqualsOneProcessWithGradientAsBucketView) { expectEqualToOneProcess(GetParam(), "--view"); }
TEST_P(Ranks, NoSyncMicroBatchesEqualOneBigBatch) { expectEqualToOneProcess(GetParam(), "--no-sync 3"); }
TEST_P(Ranks, UnusedBranchWithFindUnused) {
  expectEqualToOneProcess(GetParam(), "--find-unused --unused-every 2");
}
TEST_P(Ranks, UnevenDataJoins) { expectEqualToOneProcess(GetParam(), "--uneven --view"); }

INSTANTIATE_TEST_SUITE_P(N, Ranks, ::testing::Values(1, 2, 3, 4), [](const auto& i) {
  return std::to_string(i.param) + "ranks";
});

TEST(Trainer, CompressionStaysClose) {
  expectEqualToOneProcess(3, "--compress fp16", 1e-2);
  expectEqualToOneProcess(3, "--compress bf16", 1e-2);
}

TEST(Trainer, NoOverlapAndTraceStillEqual) {
  const std::string path = "/tmp/chorus_test_trace_" + std::to_string(::getpid()) + ".json";
  expectEqualToOneProcess(2, "--no-overlap --trace " + path);
  auto r = runShell("python3 -c \"import json,sys; d=json.load(open('" + path +
                    "')); x=[e for e in d['traceEvents'] if e['ph']=='X']; "
                    "sys.exit(0 if {e['pid'] for e in x}=={0,1} and {e['tid'] for e in x}=={1,2} else 1)\"");
  EXPECT_EQ(r.status, 0) << r.output;
  std::remove(path.c_str());
}

TEST(Trainer, BadFlagsAreNamed) {
  auto r = runShell(buildDir() + "/ddp/trainer/chorus_ddp_train --unused-every 2");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--unused-every needs --find-unused"), std::string::npos) << r.output;
  r = runShell(buildDir() + "/ddp/trainer/chorus_ddp_train --compress fp8");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--compress=fp8 must be fp16 or bf16"), std::string::npos) << r.output;
}

}  // namespace
