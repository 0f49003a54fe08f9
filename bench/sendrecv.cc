// sendrecv_perf: ring shift with chorusSend/chorusRecv in one group, as nccl-tests' sendrecv_perf.
// Out-of-place only: the header does not say a Send and a Recv of the same buffer in one group are safe.
// Built with CHORUS_BENCH_TAGGED, it is tagged_sendrecv_perf: the same shift with chorusSendTagged /
// chorusRecvTagged (tag 1) outside any group, to compare MPI-style matching with the ordered calls.
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
#ifdef CHORUS_BENCH_TAGGED
constexpr const char* kName = "TaggedSendRecv";
chorusResult_t run(const Ctx& x, const void* s, void* r) {
  chorusResult_t rs = chorusSendTagged(s, x.c.param, x.type, next(x), 1, x.comm, x.stream);
  if (rs != chorusSuccess) return rs;
  return chorusRecvTagged(r, x.c.param, x.type, prev(x), 1, nullptr, x.comm, x.stream);
}
#else
constexpr const char* kName = "SendRecv";
chorusResult_t run(const Ctx& x, const void* s, void* r) {
  chorusResult_t res = chorusGroupStart();
  if (res != chorusSuccess) return res;
  chorusResult_t rs = chorusSend(s, x.c.param, x.type, next(x), x.comm, x.stream);
  chorusResult_t rr = rs == chorusSuccess ? chorusRecv(r, x.c.param, x.type, prev(x), x.comm, x.stream) : rs;
  res = chorusGroupEnd();  // always close the group, even after a failed call
  return rs != chorusSuccess ? rs : rr != chorusSuccess ? rr : res;
}
#endif
void fill(const Ctx& x, void* s) { fillInput(x, s, x.c.param, x.rank, 0); }
int64_t check(const Ctx& x, const void* r) { return wrongFrom(x, r, x.c.param, prev(x), 0); }

}  // namespace

int main(int argc, char** argv) {
  return benchMain(argc, argv, {.name = kName, .usesOp = false, .usesRoot = false, .reduces = false,
                                .inplace = false, .busFactor = busFactor, .getCounts = getCounts, .run = run,
                                .fill = fill, .check = check});
}
