// tagged_sendrecv_perf: sendrecv_perf's ring shift with tagged point-to-point (chorusSendTagged to the next rank,
// chorusRecvTagged from the previous one, tag 1), outside any group: what MPI-style matching costs against the
// ordered chorusSend/chorusRecv.
#include "harness.h"

namespace {
using namespace bench;

void getCounts(size_t count, int, Counts& c) {
  c.send = c.recv = c.param = count;
  c.sendInplace = c.recvInplace = 0;
}
double busFactor(int) { return 1.0; }
int next(const Ctx& x) { return (x.rank + 1) % x.nranks; }
int prev(const Ctx& x) { return (x.rank - 1 + x.nranks) % x.nranks; }
chorusResult_t run(const Ctx& x, const void* s, void* r) {
  chorusResult_t rs = chorusSendTagged(s, x.c.param, x.type, next(x), 1, x.comm, x.stream);
  if (rs != chorusSuccess) return rs;
  return chorusRecvTagged(r, x.c.param, x.type, prev(x), 1, nullptr, x.comm, x.stream);
}
void fill(const Ctx& x, void* s) { fillInput(x, s, x.c.param, x.rank, 0); }
int64_t check(const Ctx& x, const void* r) { return wrongFrom(x, r, x.c.param, prev(x), 0); }

}  // namespace

int main(int argc, char** argv) {
  return benchMain(argc, argv, {.name = "TaggedSendRecv", .usesOp = false, .usesRoot = false, .reduces = false,
                                .inplace = false, .busFactor = busFactor, .getCounts = getCounts, .run = run,
                                .fill = fill, .check = check});
}
