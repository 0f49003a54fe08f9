#include "lib/comm/scratch_plan.h"

#include <algorithm>
#include <vector>

#include "lib/base/error.h"
#include "lib/comm/collectives.h"
#include "lib/kernels/reduce.h"

namespace chorus {

// Note [Scratch before the fence]:
// A call on an application's CUDA stream runs while its fence holds that stream (Note [Device streams] in
// stream.cc), and CUDA lists device allocations among the calls that may wait for every stream of the device: a
// cudaMalloc made by the worker in the middle of such a call (scratch growth: DDP's first step takes its buckets
// from 1 to 25 MiB) could wait for the stream that only the end of the same call releases, inside the driver, where
// no timeout of Chorus runs. Frees already wait for quiet (Note [Frees wait for quiet] in
// transports/plugin_memory.cc); an allocation cannot, as the call needs the memory now. So the thread that issues a
// call on device memory finds the scratch the call will ask for and allocates it before it queues the call's
// fences; the worker only adopts it. Every algorithm asks for its scratch before its first message (the ring's and
// the tree's slots, the partials of reduce-scatter, the buffers of direct, recursive doubling and halving-doubling,
// the PreMulSum pass), so running the call's algorithm (the one the worker will choose: a pure function of the
// size) against a context that records scratch() and stops at the first message, over a device whose data work
// does nothing, finds it exactly, at the cost of the algorithm's set-up (a few allocations of host vectors). Blocking
// calls do the same, so that a call running while another thread's later fence is held does not allocate either.
// Sizes only grow, and the issuing side keeps what it planned, so a size already planned allocates nothing.
// What this does not cover: ranks of one communicator on one device as threads of one process (NCCL refuses
// them), where a peer's fence may be held while this thread allocates and is released only by this rank's call;
// and the bounce buffers of staging and device IPC, which grow inside isend.
namespace {

// A device whose data work does nothing: the algorithm's copies and reductions before its first message (an
// in-place copy, the PreMulSum pass) cost nothing and touch no memory.
class InertDevice final : public mem::Device {
 public:
  const char* name() const override { return "scratch plan"; }
  void copy(void*, const void*, size_t) override {}
  void reduce(void*, const void*, const void*, size_t, chorusDataType_t, chorusRedOp_t) override {}
  void reduceN(void*, const void* const*, int, size_t, chorusDataType_t, chorusRedOp_t) override {}
  void scaleDivide(void*, size_t, chorusDataType_t, int) override {}
  void* allocate(size_t) override { refuse("allocate"); }
  void release(void*) override {}
  bool hostAccessible() const override { return false; }
  void* allocateHost(size_t) override { refuse("allocateHost"); }
  void releaseHost(void*) override {}
  uint64_t copyStart(void*, const void*, size_t) override { refuse("copyStart"); }
  bool copyDone(uint64_t) override { refuse("copyDone"); }
  bool hasIpc() const override { return false; }
  size_t ipcExport(const void*, uint8_t*) override { refuse("ipcExport"); }
  void* ipcOpen(const uint8_t*) override { refuse("ipcOpen"); }
  void ipcClose(const uint8_t*, void*) override {}
  bool hasReduceStart() const override { return false; }
  uint64_t reduceStart(void*, const void*, const void*, size_t, chorusDataType_t, chorusRedOp_t) override {
    refuse("reduceStart");
  }

 private:
  [[noreturn]] static void refuse(const char* what) {
    fail(chorusInternalError, "an algorithm called {} while its scratch was being planned", what);
  }
};

struct FirstMessage {};  // thrown by the probe where the algorithm would start to talk

class ScratchProbe final : public algo::Context {
 public:
  explicit ScratchProbe(const Comm& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int nranks() const override { return comm_.nranks(); }
  const std::vector<int>& hostOf() const override { return comm_.hostOf(); }
  size_t chunkBytes(size_t bytes) const override { return comm_.chunkBytesOf(true, bytes); }
  void isend(int, const void*, size_t, const OpTag&, Request*) override { throw FirstMessage{}; }
  void irecv(int, void*, size_t, const OpTag&, Request*) override { throw FirstMessage{}; }
  bool irecvReduce(const mem::Space&, int, void*, const void*, size_t, chorusDataType_t, chorusRedOp_t, const OpTag&,
                   Request*) override {
    throw FirstMessage{};
  }
  void waitUntil(FunctionRef<bool()>, const OpTag&) override { throw FirstMessage{}; }
  // An address the inert device never touches; aligned as a real block is.
  uint8_t* scratch(const mem::Space&, size_t bytes, int slot) override {
    if (slot < 0 || slot >= DeviceScratch::kSlots)
      fail(chorusInternalError, "scratch slot {} is not one of the {} there are", slot, DeviceScratch::kSlots);
    if (bytesBySlot.size() <= static_cast<size_t>(slot)) bytesBySlot.resize(static_cast<size_t>(slot) + 1);
    bytesBySlot[static_cast<size_t>(slot)] = std::max(bytesBySlot[static_cast<size_t>(slot)], bytes);
    return reinterpret_cast<uint8_t*>(uintptr_t{1} << 40);
  }
  std::vector<size_t> bytesBySlot;

 private:
  const Comm& comm_;
};

}  // namespace

DeviceScratch::Grant growScratchFor(Comm& comm, std::span<const CollArgs> calls) {
  DeviceScratch* scratch = comm.deviceScratch();
  if (scratch == nullptr) return {};
  InertDevice inert;
  ScratchProbe probe(comm);
  for (const CollArgs& a : calls) {
    if (a.space.isHost() || a.kind == OpKind::Send) continue;  // a Send or Recv asks for no scratch
    TaggedCall c{.args = a, .tag = {}};
    c.args.space = mem::Space(&inert);
    const algo::AllReduceAlgo choice = a.kind == OpKind::AllReduce
                                           ? allReduceAlgorithm(comm, a.count * kernels::dataTypeSize(a.dtype))
                                           : algo::AllReduceAlgo::Ring;
    try {
      runCall(probe, c, choice);
    } catch (const FirstMessage&) {  // from here on the algorithm only moves data
    }
  }
  return scratch->grow(probe.bytesBySlot);
}

}  // namespace chorus
