// reduce_scatter_perf: chorusReduceScatter, as nccl-tests' reduce_scatter_perf. Size = the whole input.
#include "harness.h"

namespace {
using namespace bench;

void getCounts(size_t count, int n, Counts& c) {
  size_t per = count / static_cast<size_t>(n);
  c.recv = c.param = per;
  c.send = per * static_cast<size_t>(n);
  c.sendInplace = 0;
  c.recvInplace = per;  // in-place: recv = send + rank*recvcount
}
double busFactor(int n) { return static_cast<double>(n - 1) / n; }
chorusResult_t run(const Ctx& x, const void* s, void* r) {
  return chorusReduceScatter(s, r, x.c.param, x.type, x.op, x.comm, x.stream);
}
void fill(const Ctx& x, void* s) { fillInput(x, s, x.c.send, x.rank, 0); }
int64_t check(const Ctx& x, const void* r) {
  return wrongReduced(x, r, x.c.param, static_cast<size_t>(x.rank) * x.c.param);
}

}  // namespace

int main(int argc, char** argv) {
  return benchMain(argc, argv, {.name = "ReduceScatter", .usesOp = true, .usesRoot = false, .reduces = true,
                                .inplace = true, .busFactor = busFactor, .getCounts = getCounts, .run = run,
                                .fill = fill, .check = check});
}
