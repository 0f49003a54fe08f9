// all_reduce_perf: chorusAllReduce, as nccl-tests' all_reduce_perf.
#include "harness.h"

namespace {
using namespace bench;

void getCounts(size_t count, int, Counts& c) {
  c.send = c.recv = c.param = count;
  c.sendInplace = c.recvInplace = 0;
}
double busFactor(int n) { return 2.0 * (n - 1) / n; }
chorusResult_t run(const Ctx& x, const void* s, void* r) {
  return chorusAllReduce(s, r, x.c.param, x.type, x.op, x.comm, x.stream);
}
void fill(const Ctx& x, void* s) { fillInput(x, s, x.c.param, x.rank, 0); }
int64_t check(const Ctx& x, const void* r) { return wrongReduced(x, r, x.c.param, 0); }

}  // namespace

int main(int argc, char** argv) {
  return benchMain(argc, argv, {.name = "AllReduce", .usesOp = true, .usesRoot = false, .reduces = true,
                                .inplace = true, .busFactor = busFactor, .getCounts = getCounts, .run = run,
                                .fill = fill, .check = check});
}
