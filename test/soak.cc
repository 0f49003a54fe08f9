// soak: one rank of a long randomized run (issue 16), started by chorusrun: `chorusrun -n 4 soak --seconds 1800`.
// Every rank draws the same sequence from one seed: which communicator (the world's, the cost model's choice over
// shm and TCP; and splits of it forced to RING, to TREE, and to TCP only), which collective (AllReduce, Reduce,
// Broadcast, AllGather, ReduceScatter, AllToAll, a Send/Recv ring shift, Barrier), datatype, op, size (1 B to
// 8 MiB, log-uniform), root and in place or not. Inputs come from test/reference.h and every element of every
// result is checked exactly (integers, and floats whose values and sums are exactly representable; float AVG,
// which rounds, is left out). CHORUS_PEER_TIMEOUT stays at its default, so a false failure would show.
//
// Prints a line a minute and a summary; exits 0 when every call succeeded and every element was right, 1 on a
// failed call, 3 on a wrong element (both named).
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "test/reference.h"

using namespace chorus::test;

namespace {

double nowSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

struct Variant {
  const char* name;
  const char* algo;  // CHORUS_ALGO while it is formed
  bool tcpOnly;      // CHORUS_SHM_DISABLE=1 while it is formed
  chorusComm_t comm = nullptr;
};

enum Coll { kAllReduce, kReduce, kBroadcast, kAllGather, kReduceScatter, kAllToAll, kShift, kBarrier, kColls };
const char* kCollNames[] = {"AllReduce", "Reduce", "Broadcast", "AllGather", "ReduceScatter", "AllToAll",
                            "SendRecv shift", "Barrier"};

int rank = 0, nranks = 0;

[[noreturn]] void callFailed(const std::string& what, chorusResult_t rc, chorusComm_t comm) {
  std::printf("soak: rank %d: %s failed: %s: %s\n", rank, what.c_str(), chorusGetErrorString(rc),
              chorusGetLastError(comm));
  std::fflush(stdout);
  std::exit(1);
}

[[noreturn]] void wrong(const std::string& what, size_t index, chorusDataType_t dt, uint64_t got, uint64_t want) {
  std::printf("soak: rank %d: %s: element %zu is %s, expected %s\n", rank, what.c_str(), index,
              showRaw(dt, got).c_str(), showRaw(dt, want).c_str());
  std::fflush(stdout);
  std::exit(3);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 60;
  uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
    else if (std::strcmp(argv[i], "--seed") == 0) seed = std::strtoull(argv[i + 1], nullptr, 10);
    else return std::fprintf(stderr, "usage: soak [--seconds S] [--seed N]\n"), 2;
  }
  chorusComm_t world = nullptr;
  if (chorusCommInitFromEnv(&world) != chorusSuccess)
    return std::printf("soak: init: %s\n", chorusGetLastError(nullptr)), 1;
  chorusCommCount(world, &nranks);
  chorusCommUserRank(world, &rank);
  std::vector<Variant> variants = {{"auto", nullptr, false}, {"ring", "RING", false}, {"tree", "TREE", false},
                                   {"tcp", nullptr, true}};
  variants[0].comm = world;
  for (size_t v = 1; v < variants.size(); ++v) {
    if (variants[v].algo != nullptr) setenv("CHORUS_ALGO", variants[v].algo, 1);
    if (variants[v].tcpOnly) setenv("CHORUS_SHM_DISABLE", "1", 1);
    chorusConfig_t fromEnv = CHORUS_CONFIG_INITIALIZER;  // a config: the environment read now, not the parent's
    chorusResult_t rc = chorusCommSplit(world, 0, rank, &variants[v].comm, &fromEnv);
    if (rc != chorusSuccess) callFailed(std::string("split for ") + variants[v].name, rc, world);
    unsetenv("CHORUS_ALGO");
    unsetenv("CHORUS_SHM_DISABLE");
  }
  std::mt19937_64 rng(seed);
  const double start = nowSeconds();
  double nextReport = start + 60;
  uint64_t ops = 0, bytes = 0, elements = 0;
  std::vector<uint64_t> perColl(kColls, 0);
  std::vector<uint8_t> send, recv;
  for (uint64_t iter = 1;; ++iter) {
    if (iter % 32 == 0) {  // everyone stops together: rank 0's clock decides
      int32_t stop = rank == 0 && nowSeconds() - start >= seconds;
      chorusResult_t rc = chorusBroadcast(&stop, &stop, 1, chorusInt32, 0, world, nullptr);
      if (rc != chorusSuccess) callFailed("the stop broadcast", rc, world);
      if (stop) break;
    }
    Variant& var = variants[rng() % variants.size()];
    const Coll coll = Coll(rng() % kColls);
    const chorusDataType_t dt = kAllTypes[rng() % std::size(kAllTypes)];
    chorusRedOp_t op = kAllOps[rng() % std::size(kAllOps)];
    if (isFloat(dt) && op == chorusAvg) op = chorusSum;  // float AVG rounds: not exactly checkable
    const size_t es = typeSize(dt);
    const size_t maxBytes = (coll == kAllGather || coll == kReduceScatter || coll == kAllToAll) ? (8u << 20) / nranks
                                                                                                   : 8u << 20;
    const size_t wantBytes = std::min<size_t>(maxBytes, (size_t{1} << (rng() % 24)) + rng() % 4096);
    const size_t count = std::max<size_t>(1, wantBytes / es);
    const int root = int(rng() % uint64_t(nranks));
    const bool inPlace = rng() % 2 == 0 && coll != kAllToAll;
    const bool reduces = coll == kAllReduce || coll == kReduce || coll == kReduceScatter;
    const int inOp = reduces ? int(op) : kMovement;
    chorusComm_t comm = var.comm;
    const size_t sendCount = (coll == kReduceScatter || coll == kAllToAll) ? count * nranks : count;
    const size_t recvCount = (coll == kAllGather || coll == kAllToAll) ? count * nranks : count;
    send.resize(sendCount * es);
    for (size_t i = 0; i < sendCount; ++i) writeRaw(send.data() + i * es, es, inputRaw(dt, inOp, iter, rank, i));
    recv.assign(std::max(sendCount, recvCount) * es, 0xA5);
    // In place: the output is the input buffer (AllGather's and ReduceScatter's as NCCL places them).
    uint8_t* out = recv.data();
    const uint8_t* in = send.data();
    if (inPlace && coll != kShift && coll != kBarrier) {
      std::vector<uint8_t> big(std::max(sendCount, recvCount) * es, 0xA5);
      if (coll == kAllGather) std::memcpy(big.data() + size_t(rank) * count * es, send.data(), count * es);
      else std::memcpy(big.data(), send.data(), sendCount * es);
      recv.swap(big);
      in = out = recv.data();
      if (coll == kAllGather) in = out + size_t(rank) * count * es;
      if (coll == kReduceScatter) out += size_t(rank) * count * es;
    }
    std::string what = std::string(kCollNames[coll]) + " #" + std::to_string(iter) + " on " + var.name + " (" +
                       typeName(dt) + (reduces ? std::string(" ") + opName(op) : "") + ", count " +
                       std::to_string(count) + (inPlace ? ", in place" : "") + ", root " + std::to_string(root) + ")";
    chorusResult_t rc = chorusSuccess;
    switch (coll) {
      case kAllReduce: rc = chorusAllReduce(in, out, count, dt, op, comm, nullptr); break;
      case kReduce: rc = chorusReduce(in, out, count, dt, op, root, comm, nullptr); break;
      case kBroadcast: rc = chorusBroadcast(in, out, count, dt, root, comm, nullptr); break;
      case kAllGather: rc = chorusAllGather(in, out, count, dt, comm, nullptr); break;
      case kReduceScatter: rc = chorusReduceScatter(in, out, count, dt, op, comm, nullptr); break;
      case kAllToAll: rc = chorusAllToAll(in, out, count, dt, comm, nullptr); break;
      case kShift:
        chorusGroupStart();
        chorusSend(in, count, dt, (rank + 1) % nranks, comm, nullptr);
        chorusRecv(out, count, dt, (rank + nranks - 1) % nranks, comm, nullptr);
        rc = chorusGroupEnd();
        break;
      case kBarrier: rc = chorusBarrier(comm, nullptr); break;
      case kColls: break;
    }
    if (rc != chorusSuccess) callFailed(what, rc, comm);
    auto expectAt = [&](size_t index, uint64_t want) {
      const uint64_t got = readRaw(out + index * es, es);
      if (got != truncRaw(dt, want)) wrong(what, index, dt, got, want);
    };
    auto reduced = [&](uint64_t index) {
      return referenceReduce(dt, op, nranks, [&](int q) { return inputRaw(dt, inOp, iter, q, index); }).raw;
    };
    switch (coll) {
      case kAllReduce:
        for (size_t i = 0; i < count; ++i) expectAt(i, reduced(i));
        break;
      case kReduce:
        if (rank == root)
          for (size_t i = 0; i < count; ++i) expectAt(i, reduced(i));
        break;
      case kBroadcast:
        for (size_t i = 0; i < count; ++i) expectAt(i, inputRaw(dt, inOp, iter, root, i));
        break;
      case kAllGather:
        for (int q = 0; q < nranks; ++q)
          for (size_t i = 0; i < count; ++i) expectAt(size_t(q) * count + i, inputRaw(dt, inOp, iter, q, i));
        break;
      case kReduceScatter:
        for (size_t i = 0; i < count; ++i) {
          const size_t at = size_t(rank) * count + i;
          const uint64_t want = reduced(at);
          const uint64_t got = readRaw(out + i * es, es);
          if (got != truncRaw(dt, want)) wrong(what, i, dt, got, want);
        }
        break;
      case kAllToAll:
        for (int q = 0; q < nranks; ++q)
          for (size_t i = 0; i < count; ++i)
            expectAt(size_t(q) * count + i, inputRaw(dt, inOp, iter, q, size_t(rank) * count + i));
        break;
      case kShift:
        for (size_t i = 0; i < count; ++i) expectAt(i, inputRaw(dt, inOp, iter, (rank + nranks - 1) % nranks, i));
        break;
      case kBarrier: case kColls: break;
    }
    ++ops;
    ++perColl[coll];
    bytes += coll == kBarrier ? 0 : sendCount * es;
    elements += coll == kBarrier ? 0 : recvCount;
    if (rank == 0 && nowSeconds() >= nextReport) {
      nextReport += 60;
      std::printf("soak: %.0f s: %llu operations, %.2f GiB sent by rank 0, 0 wrong\n", nowSeconds() - start,
                  (unsigned long long)ops, double(bytes) / (1u << 30));
      std::fflush(stdout);
    }
  }
  for (size_t v = 1; v < variants.size(); ++v) chorusCommDestroy(variants[v].comm);
  chorusCommDestroy(world);
  if (rank == 0) {
    std::string mix;
    for (int c = 0; c < kColls; ++c)
      mix += std::string(c ? ", " : "") + kCollNames[c] + " " + std::to_string(perColl[size_t(c)]);
    std::printf("soak: %d ranks, %.0f s, seed %llu: %llu operations (%s), %.2f GiB sent by rank 0, %llu elements "
                "checked by rank 0, 0 wrong, 0 failed calls\n", nranks, nowSeconds() - start,
                (unsigned long long)seed, (unsigned long long)ops, mix.c_str(), double(bytes) / (1u << 30),
                (unsigned long long)elements);
  }
  return 0;
}
