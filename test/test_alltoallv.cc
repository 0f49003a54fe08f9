// chorusAllToAllv: blocks of a size per pair (zero included), at displacements with gaps and in another order
// than the ranks', compared element by element with what each sender put there, for 1..5 ranks (non-powers of
// two), several datatypes, blocking and on a stream; the gaps stay untouched. Also: its argument errors, each
// naming the argument, and two ranks that disagree about a pair's size, which both get an error naming both.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "test/ranks.h"
#include "test/watchdog.h"

namespace {

using chorus::test::check;
using chorus::test::runRanks;
using chorus::test::Watchdog;

// Elements rank `from` sends rank `to`: 0..6, zero for some pairs and for some ranks' own block.
size_t countOf(int from, int to) { return static_cast<size_t>(from * 3 + to * 5) % 7; }

// Byte k of element i of the block from `from` to `to` (every byte distinct enough to catch a misplaced block).
uint8_t byteOf(int from, int to, size_t i, size_t k) {
  return static_cast<uint8_t>(from * 61 + to * 17 + i * 7 + k * 3 + 1);
}

constexpr uint8_t kGap = 0xEE;

struct Layout {
  std::vector<size_t> counts, displs;
  size_t elements = 0;  // the buffer's length, gaps included
};

// Blocks in reverse rank order with one element of gap before each, so displacements matter.
Layout layout(int n, const std::function<size_t(int)>& count) {
  Layout l;
  l.counts.resize(static_cast<size_t>(n));
  l.displs.resize(static_cast<size_t>(n));
  size_t at = 0;
  for (int p = n - 1; p >= 0; --p) {
    at += 1;
    l.counts[p] = count(p);
    l.displs[p] = at;
    at += l.counts[p];
  }
  l.elements = at + 1;
  return l;
}

void exchange(int n, chorusDataType_t dt, size_t es, bool onStream) {
  std::vector<std::string> errors = runRanks(n, [&](int r, chorusComm_t& comm) {
    Layout send = layout(n, [&](int p) { return countOf(r, p); });
    Layout recv = layout(n, [&](int p) { return countOf(p, r); });
    std::vector<uint8_t> in(send.elements * es, kGap), out(recv.elements * es, kGap);
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < send.counts[p]; ++i)
        for (size_t k = 0; k < es; ++k) in[(send.displs[p] + i) * es + k] = byteOf(r, p, i, k);
    chorusStream_t stream = nullptr;
    if (onStream) check(chorusStreamCreate(comm, &stream), comm, "chorusStreamCreate");
    check(chorusAllToAllv(in.data(), send.counts.data(), send.displs.data(), out.data(), recv.counts.data(),
                          recv.displs.data(), dt, comm, stream),
          comm, "chorusAllToAllv");
    if (onStream) {
      check(chorusStreamSynchronize(stream), comm, "chorusStreamSynchronize");
      check(chorusStreamDestroy(stream), comm, "chorusStreamDestroy");
    }
    std::vector<uint8_t> want(recv.elements * es, kGap);
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < recv.counts[p]; ++i)
        for (size_t k = 0; k < es; ++k) want[(recv.displs[p] + i) * es + k] = byteOf(p, r, i, k);
    for (size_t b = 0; b < want.size(); ++b)
      if (out[b] != want[b])
        throw std::runtime_error("rank " + std::to_string(r) + ": byte " + std::to_string(b) + " is " +
                                 std::to_string(out[b]) + ", expected " + std::to_string(want[b]));
  });
  for (const std::string& e : errors) ADD_FAILURE() << e;
}

class AllToAllv : public ::testing::TestWithParam<int> {};

TEST_P(AllToAllv, UnevenBlocksLandWhereTheDisplacementsSay) {
  Watchdog wd(300);
  const struct {
    chorusDataType_t dt;
    size_t es;
  } types[] = {{chorusInt8, 1}, {chorusBfloat16, 2}, {chorusFloat32, 4}, {chorusInt64, 8}};
  for (const auto& t : types) {
    SCOPED_TRACE(t.dt);
    exchange(GetParam(), t.dt, t.es, /*onStream=*/false);
  }
  exchange(GetParam(), chorusFloat64, 8, /*onStream=*/true);
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllToAllv, ::testing::Values(1, 2, 3, 4, 5));

TEST(AllToAllvErrors, EachBadArgumentIsNamed) {
  Watchdog wd(120);
  std::vector<std::string> errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    size_t counts[2] = {1, 1}, displs[2] = {0, 1}, other[2] = {2, 1};
    size_t huge[2] = {SIZE_MAX, 0};
    float a[4] = {}, b[4] = {};
    auto refused = [&](chorusResult_t rc, const char* says) {
      std::string text = chorusGetLastError(nullptr);
      if (rc != chorusInvalidArgument || text.find(says) == std::string::npos)
        throw std::runtime_error("rank " + std::to_string(r) + ": expected chorusInvalidArgument naming '" + says +
                                 "', got " + chorusGetErrorString(rc) + ": " + text);
    };
    refused(chorusAllToAllv(a, nullptr, displs, b, counts, displs, chorusFloat32, comm, nullptr), "sendcounts is NULL");
    refused(chorusAllToAllv(a, counts, nullptr, b, counts, displs, chorusFloat32, comm, nullptr), "sdispls is NULL");
    refused(chorusAllToAllv(a, counts, displs, b, nullptr, displs, chorusFloat32, comm, nullptr), "recvcounts is NULL");
    refused(chorusAllToAllv(a, counts, displs, b, counts, nullptr, chorusFloat32, comm, nullptr), "rdispls is NULL");
    refused(chorusAllToAllv(nullptr, counts, displs, b, counts, displs, chorusFloat32, comm, nullptr),
            "sendbuff is NULL");
    refused(chorusAllToAllv(a, counts, displs, b, counts, huge, chorusFloat32, comm, nullptr), "rdispls[0]");
    refused(chorusAllToAllv(a, counts, displs, a + 1, counts, displs, chorusFloat32, comm, nullptr), "overlap");
    // rank r's own block: other[r] != counts[r] only on rank 0
    if (r == 0)
      refused(chorusAllToAllv(a, other, displs, b, counts, displs, chorusFloat32, comm, nullptr), "sendcounts[0]=2");
    // refused calls sent nothing: the communicator still works
    check(chorusAllToAllv(a, counts, displs, b, counts, displs, chorusFloat32, comm, nullptr), comm, "a good call");
  });
  for (const std::string& e : errors) ADD_FAILURE() << e;
}

// Rank 0 sends rank 1 three elements; rank 1 expects four: both fail (rank 0, whose own part was whole, may fail
// at its next call), neither hangs, and the text names both ranks, the call and the sizes.
TEST(AllToAllvErrors, RanksThatDisagreeAboutAPairFail) {
  Watchdog wd(120);
  std::vector<chorusResult_t> rcs(2);
  std::vector<std::string> texts(2);
  std::vector<std::string> errors = runRanks(2, [&](int r, chorusComm_t& comm) {
    // rank 0 sends 1 to itself and 3 to rank 1; rank 1 sends 1 to each and expects 4 from rank 0
    size_t sendCounts[2] = {1, r == 0 ? 3u : 1u}, recvCounts[2] = {r == 0 ? 1u : 4u, 1}, displs[2] = {0, 8};
    std::vector<float> a(16, 1.0f), b(16, 0.0f);
    rcs[r] = chorusAllToAllv(a.data(), sendCounts, displs, b.data(), recvCounts, displs, chorusFloat32, comm, nullptr);
    texts[r] = chorusGetLastError(nullptr);
    if (rcs[r] == chorusSuccess) {  // its part was whole (README: such a rank gets the error from its next call)
      rcs[r] = chorusBarrier(comm, nullptr);
      texts[r] = chorusGetLastError(nullptr);
    }
  });
  for (const std::string& e : errors) ADD_FAILURE() << e;
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(rcs[r], chorusSuccess) << "rank " << r;
    for (const char* says : {"rank 0", "rank 1", "AllToAllv", "16 vs 12 bytes"})
      EXPECT_NE(texts[r].find(says), std::string::npos) << "rank " << r << ": " << texts[r];
  }
}

}  // namespace
