#include "lib/tuning.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "algorithms/collective.h"
#include "algorithms/tree_shape.h"
#include "lib/comm.h"
#include "lib/log.h"

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

// Round-trip-free ring rounds between host leaders: {alpha us, us per MiB beyond alpha}, zeros elsewhere.
void measureNet(Comm& comm, const std::vector<int>& leaders, double* alphaUs, double* usPerMiB) {
  const int hosts = static_cast<int>(leaders.size());
  const int h = comm.hostOf()[static_cast<size_t>(comm.rank())];
  if (leaders[static_cast<size_t>(h)] != comm.rank()) return;
  const int next = leaders[static_cast<size_t>((h + 1) % hosts)];
  const int prev = leaders[static_cast<size_t>((h - 1 + hosts) % hosts)];
  constexpr size_t kBig = 1 << 20;
  std::vector<uint8_t> out(kBig, 1), in(kBig);
  const OpTag tag = calibrationTag();
  auto round = [&](size_t bytes) {
    auto t0 = std::chrono::steady_clock::now();
    Request s, r;
    comm.irecv(prev, in.data(), bytes, tag, &r);
    comm.isend(next, out.data(), bytes, tag, &s);
    comm.waitUntil([&] { return s.done && r.done; }, tag);
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<double> small, big;
  round(8);
  for (int i = 0; i < 5; ++i) small.push_back(round(8));
  round(kBig);
  for (int i = 0; i < 3; ++i) big.push_back(round(kBig));
  *alphaUs = medianOf(small);
  *usPerMiB = std::max(1.0, medianOf(big) - *alphaUs);
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
  std::vector<int> oneEach(static_cast<size_t>(m.hosts));
  for (int h = 0; h < m.hosts; ++h) oneEach[static_cast<size_t>(h)] = h;
  for (int t = 0; t < 2; ++t) {
    std::vector<algo::TreeLinks> tree;
    for (int h = 0; h < m.hosts; ++h) tree.push_back(algo::hostTree(oneEach, h, t));
    m.hostTreeDepth = std::max(m.hostTreeDepth, algo::treeDepth(tree));
  }
  m.directAllowed = comm.allPeersOverShm() && m.nranks > 2;
  m.chunkBytes = comm.config().chunkBytes;

  // {alpha us, us per MiB, oversubscribed}: the worst over all ranks.
  double agreed[3] = {0, 0, oversubscribedHere ? 1.0 : 0.0};
  if (m.hosts > 1) measureNet(comm, leaders, &agreed[0], &agreed[1]);
  algo::CollArgs a;
  a.kind = OpKind::AllReduce;
  a.sendbuff = agreed;
  a.recvbuff = agreed;
  a.count = 3;
  a.dtype = chorusFloat64;
  a.op = chorusMax;
  algo::ringAllReduce(comm, calibrationTag(), a);
  m.local = algo::CostModel::localTable(comm.localPairsOverShm(), agreed[2] != 0);
  if (m.hosts > 1) m.net = {agreed[0], static_cast<double>(1 << 20) / (agreed[1] * 1e3)};
  CHORUS_INFO(kInit, "cost model: {}", m.describe());
  return m;
}

}  // namespace chorus
