#include "lib/comm/tuning.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/tree_shape.h"
#include "lib/comm/comm.h"
#include "lib/base/log.h"

namespace chorus {

namespace {

// Messages of the calibration carry this tag; no call can have it (sequence numbers start at 0).
OpTag calibrationTag() {
  OpTag t;
  t.seq = ~uint64_t{0};
  t.kind = OpKind::None;
  return t;
}

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Ping-pong between the leaders of hosts 2k and 2k+1: the even one returns the microseconds 1 MiB takes beyond
// the latency (an 8-byte round trip); every other rank returns 0.
double measureUsPerMiB(Comm& comm, const std::vector<int>& leaders) {
  const int hosts = static_cast<int>(leaders.size());
  const int h = comm.hostOf()[static_cast<size_t>(comm.rank())];
  if (leaders[static_cast<size_t>(h)] != comm.rank() || (h % 2 == 0 && h + 1 >= hosts)) return 0;
  const bool measuring = h % 2 == 0;
  const int partner = leaders[static_cast<size_t>(measuring ? h + 1 : h - 1)];
  constexpr size_t kBig = 1 << 20;
  std::vector<uint8_t> buf(kBig, 1);
  const OpTag tag = calibrationTag();
  // One exchange: `bytes` one way, 8 bytes back; returns the round trip in us (measuring side).
  auto pingPong = [&](size_t bytes) {
    auto t0 = std::chrono::steady_clock::now();
    Request q;
    if (measuring) {
      comm.isend(partner, buf.data(), bytes, tag, &q);
      comm.wait(q, tag);
      q = Request{};
      comm.irecv(partner, buf.data(), 8, tag, &q);
    } else {
      comm.irecv(partner, buf.data(), bytes, tag, &q);
      comm.wait(q, tag);
      q = Request{};
      comm.isend(partner, buf.data(), 8, tag, &q);
    }
    comm.wait(q, tag);
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<double> small, big;
  pingPong(8);
  for (int i = 0; i < 5; ++i) small.push_back(pingPong(8));
  pingPong(kBig);
  for (int i = 0; i < 5; ++i) big.push_back(pingPong(kBig));
  return measuring ? std::max(1.0, medianOf(big) - medianOf(small)) : 0;
}

// Rounds in which every host leader sends 8 bytes to the next leader and receives from the previous one, all
// at once, as in a ring collective's step; each round waits for the previous one, so they run in lockstep.
// Leader 0 returns the median of 5 batches' mean round of 8 (after 2 warm-up rounds), 0 on every other rank.
// Unlike a ping-pong between two ranks it includes what a collective's step pays when every host is busy. Means
// of batches, since a round that follows a late one finds its message waiting (the median round came out 11-220
// us on 8 simulated hosts, a step of the benchmark costs 630-660); their median, since ranks that have just
// started are sometimes descheduled for milliseconds (the mean of one batch was 1.4-2.9 ms in 2 of 6 inits).
double measureStep(Comm& comm, const std::vector<int>& leaders) {
  const int hosts = static_cast<int>(leaders.size());
  const int h = comm.hostOf()[static_cast<size_t>(comm.rank())];
  if (leaders[static_cast<size_t>(h)] != comm.rank()) return 0;
  const int next = leaders[static_cast<size_t>((h + 1) % hosts)];
  const int prev = leaders[static_cast<size_t>((h - 1 + hosts) % hosts)];
  const OpTag tag = calibrationTag();
  uint64_t out = 0, in = 0;
  auto round = [&] {
    Request s, r;
    comm.irecv(prev, &in, sizeof in, tag, &r);
    comm.isend(next, &out, sizeof out, tag, &s);
    comm.waitUntil([&] { return s.done && r.done; }, tag);
  };
  round();
  round();
  std::vector<double> us;
  for (int batch = 0; batch < 5; ++batch) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 8; ++i) round();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 8);
  }
  return h == 0 ? medianOf(us) : 0;
}

}  // namespace

algo::CostModel buildCostModel(Comm& comm, bool oversubscribedHere) {
  algo::CostModel m;
  const std::vector<int>& hostOf = comm.hostOf();
  m.nranks = comm.nranks();
  m.hosts = *std::max_element(hostOf.begin(), hostOf.end()) + 1;
  std::vector<int> perHost(static_cast<size_t>(m.hosts), 0), leaders(static_cast<size_t>(m.hosts), -1);
  for (int r = 0; r < m.nranks; ++r) {
    const size_t h = static_cast<size_t>(hostOf[static_cast<size_t>(r)]);
    if (perHost[h]++ == 0) leaders[h] = r;
  }
  m.maxPerHost = *std::max_element(perHost.begin(), perHost.end());
  const algo::DoubleTreeStats trees = algo::doubleTreeStats(m.hosts);
  m.hostTreeDepth = trees.depth;
  // A chain inside a host adds its child in each tree to the head's load, and a rank inside a chain sends up and
  // down in both trees.
  m.treeLoad = m.maxPerHost > 1 ? std::max(trees.load + 2, 4) : trees.load;
  m.treeHostLoad = trees.load;
  m.rdLocalSteps = algo::recursiveDoublingLocalSteps(hostOf);
  m.reduceOnReceive = comm.reduceOnReceive();
  m.directAllowed = m.reduceOnReceive && m.nranks > 2;
  m.chunks = comm.chunkSteps();

  // {us per MiB, step us, oversubscribed ranks}: summed over all ranks (only one leader per pair of hosts, or
  // leader 0, measures each), so every rank knows them alike. On one host nothing is measured and every rank
  // counts the same ranks on it, so no agreement is needed. (With it, a rank that exits right after creation
  // made survivors of test_failures' RankExitsWithoutDestroy blame the wrong peer in 40% of runs over TCP.)
  double agreed[3] = {0, 0, oversubscribedHere ? 1.0 : 0.0};
  if (m.hosts > 1) {
    agreed[0] = measureUsPerMiB(comm, leaders);
    agreed[1] = measureStep(comm, leaders);
  }
  CollArgs a;
  a.kind = OpKind::AllReduce;
  a.sendbuff = agreed;
  a.recvbuff = agreed;
  a.count = 3;
  a.dtype = chorusFloat64;
  a.op = chorusSum;
  if (m.hosts > 1) algo::ringAllReduce(comm, calibrationTag(), a);
  if (const auto& link = comm.localLink())
    m.local = agreed[2] != 0 ? algo::LinkCost{link->alphaUsOversubscribed, link->gbpsOversubscribed}
                             : algo::LinkCost{link->alphaUs, link->gbps};
  // alpha: a lockstep round of all leaders (what a collective's step costs); beta: the pairs' mean.
  const double pairs = m.hosts / 2;
  if (m.hosts > 1) m.net = {agreed[1], static_cast<double>(1 << 20) / (agreed[0] / pairs * 1e3)};
  CHORUS_INFO(kInit, "cost model: {}", m.describe());
  return m;
}

ChunkSteps chooseChunks(const std::vector<const transport::LinkTraits*>& used, int maxPerHost, bool crossHost,
                        bool oversubscribed) {
  auto stepsOf = [&](const transport::LinkTraits* t) -> const ChunkSteps& {
    return oversubscribed && !t->chunksOversubscribed.empty() ? t->chunksOversubscribed : t->chunks;
  };
  std::vector<size_t> starts{0};  // where any transport's step begins, in bytes touched on one host
  for (const transport::LinkTraits* t : used)
    for (const ChunkStep& s : stepsOf(t)) starts.push_back(s.fromBytes);
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  const size_t perHost = static_cast<size_t>(std::max(1, maxPerHost));
  ChunkSteps out;
  for (size_t hostBytes : starts) {
    size_t chunk = 0;
    for (const transport::LinkTraits* t : used) {
      const size_t c = chunkAt(stepsOf(t), hostBytes);
      if (c != 0) chunk = chunk == 0 ? c : std::min(chunk, c);
    }
    if (chunk == 0) chunk = 1024 * 1024;  // no transport serves a pair: a single rank
    if (crossHost) chunk = std::min(chunk, kCrossHostMaxChunk);
    if (out.empty() || out.back().chunkBytes != chunk) out.push_back({(hostBytes + perHost - 1) / perHost, chunk});
  }
  return out;
}

}  // namespace chorus
