// The executor's task storage (Note [Allocation-free queueing]): Ring against std::deque as the reference, across
// growth at every offset of the front within its block; InlineFunction's in-place and heap cases, moves, and that
// every callable it took is destroyed exactly once.
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lib/base/inline_function.h"
#include "lib/base/ring.h"

namespace {

using chorus::InlineFunction;
using chorus::Ring;

struct Item {
  int value = -1;
  std::vector<int> kept;  // a buffer a reused slot keeps
};

// Random pushes and pops, biased to grow then to drain, so the ring grows with its front at every offset.
TEST(Ring, MatchesADequeThroughGrowthAndReuse) {
  std::mt19937 rng(7);
  for (int round = 0; round < 40; ++round) {
    Ring<Item, 8> ring;
    std::deque<int> want;
    int next = 0;
    for (int step = 0; step < 3000; ++step) {
      const bool growing = (step / 500) % 2 == 0;
      const bool push = want.empty() || std::uniform_int_distribution<int>(0, 99)(rng) < (growing ? 70 : 30);
      if (push) {
        Item& slot = ring.push_back();
        slot.value = next;
        slot.kept.assign(3, next);
        want.push_back(next++);
      } else {
        ASSERT_EQ(ring.front().value, want.front()) << "round " << round << " step " << step;
        ASSERT_EQ(ring.front().kept, std::vector<int>(3, want.front()));
        ring.pop_front();
        want.pop_front();
      }
      ASSERT_EQ(ring.size(), want.size());
      ASSERT_EQ(ring.empty(), want.empty());
    }
    while (!want.empty()) {
      ASSERT_EQ(ring.front().value, want.front());
      ring.pop_front();
      want.pop_front();
    }
  }
}

// Growth when full with the front in the middle of its block, at each offset: order is kept.
TEST(Ring, GrowsWhenFullWithTheFrontAtAnyOffset) {
  for (int offset = 0; offset < 8; ++offset) {
    Ring<Item, 8> ring;
    std::deque<int> want;
    int next = 0;
    for (int i = 0; i < 16; ++i) {  // two blocks, full
      ring.push_back().value = next;
      want.push_back(next++);
    }
    for (int i = 0; i < offset; ++i) {  // move the front, then fill again
      ring.pop_front();
      want.pop_front();
      ring.push_back().value = next;
      want.push_back(next++);
    }
    for (int i = 0; i < 5; ++i) {  // grows here
      ring.push_back().value = next;
      want.push_back(next++);
    }
    for (int w : want) {
      ASSERT_EQ(ring.front().value, w) << "offset " << offset;
      ring.pop_front();
    }
    EXPECT_TRUE(ring.empty());
  }
}

// Counts live copies of itself, to check that each callable is destroyed once.
struct Counted {
  static int live;
  int id;
  explicit Counted(int i) : id(i) { ++live; }
  Counted(const Counted& o) : id(o.id) { ++live; }
  Counted(Counted&& o) noexcept : id(o.id) { ++live; }
  ~Counted() { --live; }
};
int Counted::live = 0;

TEST(InlineFunction, KeepsSmallCallablesInPlaceAndLargeOnesOnTheHeap) {
  using Fn = InlineFunction<int(int), 32>;
  auto small = [c = Counted(1)](int x) { return x + c.id; };
  struct Big {
    Counted c{2};
    char pad[64] = {};
    int operator()(int x) const { return x * 10 + c.id; }
  };
  static_assert(Fn::fitsInline<decltype(small)>);
  static_assert(!Fn::fitsInline<Big>);
  {
    Fn a = small, b = Big{};
    EXPECT_EQ(a(4), 5);
    EXPECT_EQ(b(4), 42);
    Fn c = std::move(a), d = std::move(b);  // both kinds move
    EXPECT_FALSE(a);
    EXPECT_FALSE(b);
    EXPECT_EQ(c(1), 2);
    EXPECT_EQ(d(1), 12);
    std::swap(c, d);
    EXPECT_EQ(c(1), 12);
    EXPECT_EQ(d(1), 2);
    c = nullptr;
    EXPECT_FALSE(c);
    d = Fn([](int x) { return -x; });  // the in-place one it held is destroyed
    EXPECT_EQ(d(3), -3);
  }
  EXPECT_EQ(Counted::live, 1);  // only `small` itself remains
}

TEST(InlineFunction, RunsAMoveOnlyMutableCallable) {
  InlineFunction<std::string(), 48> f = [p = std::make_unique<std::string>("moved")]() mutable {
    return p ? *std::exchange(p, nullptr) : std::string("empty");
  };
  EXPECT_EQ(f(), "moved");
  EXPECT_EQ(f(), "empty");
}

}  // namespace
