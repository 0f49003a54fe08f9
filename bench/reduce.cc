// reduce_perf: chorusReduce to -r root, as nccl-tests' reduce_perf. Only the root's output is checked.
#include "harness.h"

namespace {
using namespace bench;

void getCounts(size_t count, int, Counts& c) {
  c.send = c.recv = c.param = count;
  c.sendInplace = c.recvInplace = 0;
}
double busFactor(int) { return 1.0; }
chorusResult_t run(const Ctx& x, const void* s, void* r) {
  return chorusReduce(s, r, x.c.param, x.type, x.op, x.root, x.comm, x.stream);
}
void fill(const Ctx& x, void* s) { fillInput(x, s, x.c.param, x.rank, 0); }
int64_t check(const Ctx& x, const void* r) { return x.rank == x.root ? wrongReduced(x, r, x.c.param, 0) : 0; }

}  // namespace

int main(int argc, char** argv) {
  return benchMain(argc, argv, {.name = "Reduce", .usesOp = true, .usesRoot = true, .reduces = true,
                                .inplace = true, .busFactor = busFactor, .getCounts = getCounts, .run = run,
                                .fill = fill, .check = check});
}
