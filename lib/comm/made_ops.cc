#include "lib/comm/made_ops.h"

#include <atomic>
#include <climits>

namespace chorus {

namespace {
std::atomic<int> gNext{chorusNumOps};  // Note [Made ops]
}  // namespace

chorusRedOp_t MadeOps::create(const PreMulSumOp& op) {
  std::lock_guard<std::mutex> g(mu_);
  int v = 0;
  do {
    v = gNext.fetch_add(1, std::memory_order_relaxed);
    if (v < chorusNumOps || v == INT_MAX) {  // wrapped: start again (only one thread's store wins, which is enough)
      gNext.store(chorusNumOps + 1, std::memory_order_relaxed);
      v = chorusNumOps;
    }
  } while (live_.count(v) != 0);
  live_.emplace(v, op);
  return static_cast<chorusRedOp_t>(v);
}

bool MadeOps::destroy(chorusRedOp_t op) {
  std::lock_guard<std::mutex> g(mu_);
  return live_.erase(static_cast<int>(op)) != 0;
}

std::optional<PreMulSumOp> MadeOps::find(chorusRedOp_t op) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = live_.find(static_cast<int>(op));
  if (it == live_.end()) return std::nullopt;
  return it->second;
}

}  // namespace chorus
