// all_gather_perf: chorusAllGather, as nccl-tests' all_gather_perf. Size = the whole gathered output.
#include "harness.h"

namespace {
using namespace bench;

void getCounts(size_t count, int n, Counts& c) {
  size_t per = count / static_cast<size_t>(n);
  c.send = c.param = per;
  c.recv = per * static_cast<size_t>(n);
  c.sendInplace = per;  // in-place: send = recv + rank*sendcount
  c.recvInplace = 0;
}
double busFactor(int n) { return static_cast<double>(n - 1) / n; }
chorusResult_t run(const Ctx& x, const void* s, void* r) {
  return chorusAllGather(s, r, x.c.param, x.type, x.comm, x.stream);
}
void fill(const Ctx& x, void* s) { fillInput(x, s, x.c.param, x.rank, 0); }
int64_t check(const Ctx& x, const void* r) {
  int64_t wrong = 0;
  for (int p = 0; p < x.nranks; p++)
    wrong += wrongFrom(x, at(r, x, static_cast<size_t>(p) * x.c.param), x.c.param, p, 0);
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  return benchMain(argc, argv, {.name = "AllGather", .usesOp = false, .usesRoot = false, .reduces = false,
                                .inplace = true, .busFactor = busFactor, .getCounts = getCounts, .run = run,
                                .fill = fill, .check = check});
}
