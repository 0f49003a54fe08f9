// broadcast_perf: chorusBroadcast from -r root, as nccl-tests' broadcast_perf.
#include "harness.h"

namespace {
using namespace bench;

void getCounts(size_t count, int, Counts& c) {
  c.send = c.recv = c.param = count;
  c.sendInplace = c.recvInplace = 0;
}
double busFactor(int) { return 1.0; }
chorusResult_t run(const Ctx& x, const void* s, void* r) {
  return chorusBroadcast(s, r, x.c.param, x.type, x.root, x.comm, x.stream);
}
// Every rank fills its own pattern: a non-root in-place buffer that is not overwritten then counts as wrong.
void fill(const Ctx& x, void* s) { fillInput(x, s, x.c.param, x.rank, 0); }
int64_t check(const Ctx& x, const void* r) { return wrongFrom(x, r, x.c.param, x.root, 0); }

}  // namespace

int main(int argc, char** argv) {
  return benchMain(argc, argv, {.name = "Broadcast", .usesOp = false, .usesRoot = true, .reduces = false,
                                .inplace = true, .busFactor = busFactor, .getCounts = getCounts, .run = run,
                                .fill = fill, .check = check});
}
