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

// Ping-pong between the leaders of hosts 2k and 2k+1: the even one measures and returns {alpha us, us per MiB
// beyond alpha}; every other rank returns zeros.
void measureNet(Comm& comm, const std::vector<int>& leaders, double* alphaUs, double* usPerMiB) {
  const int hosts = static_cast<int>(leaders.size());
  const int h = comm.hostOf()[static_cast<size_t>(comm.rank())];
  if (leaders[static_cast<size_t>(h)] != comm.rank() || (h % 2 == 0 && h + 1 >= hosts)) return;
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
  for (int i = 0; i < 9; ++i) small.push_back(pingPong(8));
  pingPong(kBig);
  for (int i = 0; i < 3; ++i) big.push_back(pingPong(kBig));
  if (!measuring) return;
  *alphaUs = medianOf(small) / 2;
  *usPerMiB = std::max(1.0, medianOf(big) - 2 * *alphaUs);
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

  // {alpha us, us per MiB, oversubscribed ranks}: summed over all ranks (only one leader per pair of hosts
  // measures), so the model uses the mean link and knows whether any host runs more ranks than cores.
  double agreed[3] = {0, 0, oversubscribedHere ? 1.0 : 0.0};
  if (m.hosts > 1) measureNet(comm, leaders, &agreed[0], &agreed[1]);
  algo::CollArgs a;
  a.kind = OpKind::AllReduce;
  a.sendbuff = agreed;
  a.recvbuff = agreed;
  a.count = 3;
  a.dtype = chorusFloat64;
  a.op = chorusSum;
  algo::ringAllReduce(comm, calibrationTag(), a);
  m.local = algo::CostModel::localTable(comm.localPairsOverShm(), agreed[2] != 0);
  const double pairs = m.hosts / 2;
  if (m.hosts > 1) m.net = {agreed[0] / pairs, static_cast<double>(1 << 20) / (agreed[1] / pairs * 1e3)};
  CHORUS_INFO(kInit, "cost model: {}", m.describe());
  return m;
}

}  // namespace chorus
