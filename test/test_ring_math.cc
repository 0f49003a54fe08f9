// The ring's pure topology functions (algorithms/ring.h): segments partition the buffer, what a rank forwards
// is what it received, and reduce-scatter leaves each segment fully reduced on exactly one rank.
#include <gtest/gtest.h>

#include <set>

#include "algorithms/ring.h"

using namespace chorus::algo;

TEST(RingMath, SegmentsPartitionEveryCount) {
  for (int n = 1; n <= 64; ++n)
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(n - 1), size_t(1000003)}) {
      size_t next = 0;
      for (int s = 0; s < n; ++s) {
        EXPECT_EQ(segmentOffset(count, n, s), next);
        size_t len = segmentLength(count, n, s);
        EXPECT_LE(len, count / n + 1);
        EXPECT_GE(len, count / n);
        next += len;
      }
      EXPECT_EQ(next, count) << "n=" << n;
    }
}

TEST(RingMath, ChunksPartitionASegment) {
  for (size_t len : {size_t(0), size_t(1), size_t(5), size_t(1000)})
    for (size_t chunks : {size_t(1), size_t(3), size_t(7)}) {
      EXPECT_EQ(chunkBegin(len, chunks, 0), 0u);
      EXPECT_EQ(chunkBegin(len, chunks, chunks), len);
      for (size_t c = 0; c < chunks; ++c) EXPECT_LE(chunkBegin(len, chunks, c), chunkBegin(len, chunks, c + 1));
    }
}

TEST(RingMath, ForwardWhatWasReceivedAndNeighboursAgree) {
  for (int n = 2; n <= 16; ++n)
    for (int shift : {0, -1})
      for (int r = 0; r < n; ++r)
        for (int j = 0; j + 1 < 2 * n; ++j) {
          EXPECT_EQ(ringSendSegment(r, j + 1, shift, n), ringRecvSegment(r, j, shift, n));
          // what r sends at step j is what r+1 receives at step j
          EXPECT_EQ(ringSendSegment(r, j, shift, n), ringRecvSegment(mod(r + 1, n), j, shift, n));
        }
}

TEST(RingMath, ReduceScatterVisitsEverySegmentOnceAndEndsOnTheOwner) {
  for (int n = 2; n <= 16; ++n)
    for (int shift : {0, -1})
      for (int r = 0; r < n; ++r) {
        std::set<int> received;
        for (int j = 0; j < n - 1; ++j) received.insert(ringRecvSegment(r, j, shift, n));
        EXPECT_EQ(received.size(), static_cast<size_t>(n - 1));  // each segment reduced at most once here
        int final = ringRecvSegment(r, n - 2, shift, n);
        EXPECT_EQ(final, shift == 0 ? mod(r + 1, n) : r);  // allreduce owns r+1; reduce-scatter owns r
        EXPECT_EQ(received.count(ringSendSegment(r, 0, shift, n)), 0u);  // own first segment never comes back
      }
}
