// Chorus called from exit handlers (Note [Immortal statics] in lib/base/immortal.h): torch destroys its process
// groups, and so their communicators, from libtorch's exit-time destructors, which run after the static destructors
// of libchorus.so. Each case runs in a fresh process (a threadsafe death test re-executes this binary) that
// registers its exit handler before its first Chorus call, so that every static Chorus makes afterwards would be
// destroyed before the handler runs. The handler then destroys live communicators, reads and sets error texts and
// creates streams; the process must exit normally (before the fix: SIGSEGV in the shm segments' registry).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "test/ranks.h"

namespace {

constexpr int kRanks = 3;
// What the exit handler tears down. Made before the handler is registered, so destroyed only after it ran.
std::vector<chorusComm_t> gComms;

// Writes to stderr and leaves with code 3 where the handler sees something wrong (a death test reads the code).
[[noreturn]] void bad(const std::string& what) {
  std::fprintf(stderr, "exit handler: %s\n", what.c_str());
  std::_Exit(3);
}

void tearDownAtExit() {
  // A call that fails sets this thread's error text, after the thread's destructors ran.
  if (chorusAllReduce(nullptr, nullptr, 1, chorusFloat32, chorusSum, gComms[0], nullptr) != chorusInvalidArgument)
    bad("a NULL sendbuff was not refused");
  if (std::strstr(chorusGetLastError(nullptr), "sendbuff") == nullptr)
    bad(std::string("the error text does not name sendbuff: ") + chorusGetLastError(nullptr));
  chorusStream_t stream = nullptr;
  if (chorusStreamCreate(gComms[0], &stream) != chorusSuccess || chorusStreamDestroy(stream) != chorusSuccess)
    bad(std::string("a stream: ") + chorusGetLastError(nullptr));
  // Destroyed concurrently, as the ranks of one process would be.
  std::vector<std::thread> threads;
  std::vector<chorusResult_t> rcs(gComms.size(), chorusInternalError);
  for (size_t r = 0; r < gComms.size(); ++r) threads.emplace_back([r, &rcs] { rcs[r] = chorusCommDestroy(gComms[r]); });
  for (std::thread& t : threads) t.join();
  for (size_t r = 0; r < rcs.size(); ++r)
    if (rcs[r] != chorusSuccess) bad("chorusCommDestroy of rank " + std::to_string(r) + " failed");
}

// In the child: the handler first, then communicators that have done some work, then exit().
[[noreturn]] void runAndExit(bool pendingWork) {
  if (std::atexit(tearDownAtExit) != 0) std::_Exit(4);
  setenv("CHORUS_SOCKET_IFNAME", "=lo", 0);
  chorusUniqueId id;
  if (chorusGetUniqueId(&id) != chorusSuccess) std::_Exit(5);
  gComms.assign(kRanks, nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      chorus::test::check(chorusCommInitRank(&gComms[static_cast<size_t>(r)], kRanks, id, r), nullptr, "init");
      std::vector<float> v(1 << 16, 1.0f);
      chorusComm_t comm = gComms[static_cast<size_t>(r)];
      chorus::test::check(chorusAllReduce(v.data(), v.data(), v.size(), chorusFloat32, chorusSum, comm, nullptr),
                          comm, "allreduce");
      if (v[0] != float(kRanks)) std::_Exit(6);
    });
  for (std::thread& t : threads) t.join();
  if (pendingWork) {
    // A barrier left on a stream that nobody synchronizes or destroys: the destroy at exit waits for it.
    for (chorusComm_t comm : gComms) {
      chorusStream_t stream = nullptr;
      if (chorusStreamCreate(comm, &stream) != chorusSuccess || chorusBarrier(comm, stream) != chorusSuccess)
        std::_Exit(7);
    }
  }
  std::exit(0);
}

class ExitHandlers : public ::testing::TestWithParam<bool> {};

TEST_P(ExitHandlers, DestroyFromAnExitHandlerAfterStaticDestructors) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(runAndExit(GetParam()), ::testing::ExitedWithCode(0), "");
}

INSTANTIATE_TEST_SUITE_P(Exit, ExitHandlers, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "WorkPending" : "Idle"; });

}  // namespace
