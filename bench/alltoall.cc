// alltoall_perf: chorusAllToAll, as nccl-tests' alltoall_perf. count = elements per peer; size = all of
// this rank's send bytes. chorusAllToAll is never in-place, so the in-place group prints N/A.
#include "harness.h"

namespace {
using namespace bench;

void getCounts(size_t count, int n, Counts& c) {
  size_t per = count / static_cast<size_t>(n);
  c.param = per;
  c.send = c.recv = per * static_cast<size_t>(n);
  c.sendInplace = c.recvInplace = 0;
}
double busFactor(int n) { return static_cast<double>(n - 1) / n; }
chorusResult_t run(const Ctx& x, const void* s, void* r) {
  return chorusAllToAll(s, r, x.c.param, x.type, x.comm, x.stream);
}
void fill(const Ctx& x, void* s) { fillInput(x, s, x.c.send, x.rank, 0); }
// Block p of recv is block `rank` of rank p's send buffer.
int64_t check(const Ctx& x, const void* r) {
  int64_t wrong = 0;
  const size_t per = x.c.param;
  for (int p = 0; p < x.nranks; p++)
    wrong += wrongFrom(x, at(r, x, static_cast<size_t>(p) * per), per, p, static_cast<size_t>(x.rank) * per);
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  return benchMain(argc, argv, {.name = "AllToAll", .usesOp = false, .usesRoot = false, .reduces = false,
                                .inplace = false, .busFactor = busFactor, .getCounts = getCounts, .run = run,
                                .fill = fill, .check = check});
}
