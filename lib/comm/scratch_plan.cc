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
// Messages staged through host memory take a pinned buffer each (cudaHostAlloc, also on CUDA's list) until they are
// done, so where a call stages, the probe runs the whole algorithm instead: each wait ends with as few of the
// messages posted before it done as its condition needs, sends left in flight first (a transport may finish a send
// long after the peer has it), the most staged messages of each size outstanding at once is what the pool must
// hold, and the issuing thread tops the pool up to it. That costs a pass over the algorithm's steps on the host per
// call, only where a call stages, beside copies of whole chunks through host memory.
// What this does not cover: ranks of one communicator on one device as threads of one process (NCCL refuses
// them), where a peer's fence may be held while this thread allocates and is released only by this rank's call;
// and device IPC's bounce buffers (for memory CUDA cannot export), which grow inside its isend.
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
  // whole: the algorithm runs to its end, each message complete at the next wait, counting staged messages.
  ScratchProbe(const Comm& comm, bool whole) : comm_(comm), whole_(whole) {}
  int rank() const override { return comm_.rank(); }
  int nranks() const override { return comm_.nranks(); }
  const std::vector<int>& hostOf() const override { return comm_.hostOf(); }
  size_t chunkBytes(size_t bytes) const override { return comm_.chunkBytesOf(true, bytes); }
  void isend(int peer, const void*, size_t len, const OpTag&, Request* req) override { post(peer, len, req, true); }
  void irecv(int peer, void*, size_t len, const OpTag&, Request* req) override { post(peer, len, req, false); }
  bool irecvReduce(const mem::Space&, int, void*, const void*, size_t, chorusDataType_t, chorusRedOp_t, const OpTag&,
                   Request*) override {
    if (!whole_) throw FirstMessage{};
    return false;  // device memory: received into scratch, then reduced
  }
  // The wait ends with as few messages done as it needs, sends left in flight first (a transport may finish a send
  // long after the peer has it), so that the staged messages outstanding at once are as many as a run can have.
  void waitUntil(FunctionRef<bool()> done, const OpTag& tag) override {
    if (!whole_) throw FirstMessage{};
    for (const Posted& p : posted_) p.req->done = true;
    if (!done())
      fail(chorusInternalError, "{}: planning {}: a wait that every message does not end (a bug)", comm_.name(),
           describe(tag));
    for (const bool sends : {true, false})
      for (const Posted& p : posted_)
        if (p.send == sends) {
          p.req->done = false;
          if (!done()) p.req->done = true;
        }
    std::erase_if(posted_, [&](const Posted& p) {
      if (p.req->done && p.sizeClass >= 0) --staged_[static_cast<size_t>(p.sizeClass)];
      return p.req->done;
    });
  }
  // After the algorithm: what it never waited for is gone with its frame.
  void forgetPosted() { posted_.clear(); }
  // An address the inert device never touches; aligned as a real block is.
  uint8_t* scratch(const mem::Space&, size_t bytes, int slot) override {
    DeviceScratch::checkSlot(slot);
    if (bytesBySlot.size() <= static_cast<size_t>(slot)) bytesBySlot.resize(static_cast<size_t>(slot) + 1);
    bytesBySlot[static_cast<size_t>(slot)] = std::max(bytesBySlot[static_cast<size_t>(slot)], bytes);
    return reinterpret_cast<uint8_t*>(uintptr_t{1} << 40);
  }
  std::vector<size_t> bytesBySlot;
  std::vector<int> mostStaged;  // by size class: the most staged messages outstanding at once

 private:
  struct Posted {
    Request* req;
    int sizeClass;  // of its staging buffer; -1: none
    bool send;
  };
  void post(int peer, size_t len, Request* req, bool send) {
    if (!whole_) throw FirstMessage{};
    req->done = false;
    int sizeClass = -1;
    if (len > 0 && comm_.stagesTo(peer)) {
      sizeClass = mem::bounceSizeClass(len);
      if (staged_.size() <= static_cast<size_t>(sizeClass)) {
        staged_.resize(static_cast<size_t>(sizeClass) + 1);
        mostStaged.resize(staged_.size());
      }
      const size_t c = static_cast<size_t>(sizeClass);
      mostStaged[c] = std::max(mostStaged[c], ++staged_[c]);
    }
    posted_.push_back({.req = req, .sizeClass = sizeClass, .send = send});
  }

  const Comm& comm_;
  const bool whole_;
  std::vector<Posted> posted_;  // since the last wait
  std::vector<int> staged_;  // by size class, outstanding now
};

}  // namespace

// Several calls (a group) run their messages together: the staged counts of each add up.
CallMemory growMemoryFor(Comm& comm, std::span<const CollArgs> calls) {
  if (comm.deviceScratch() == nullptr) return {};
  bool stages = false;
  for (int peer = 0; peer < comm.nranks(); ++peer) stages |= peer != comm.rank() && comm.stagesTo(peer);
  InertDevice inert;
  std::vector<size_t> bytesBySlot;
  std::vector<int> staged;
  for (const CollArgs& a : calls) {
    if (a.space.isHost() || (a.kind == OpKind::Send && !stages)) continue;  // a lone Send or Recv asks for no scratch
    ScratchProbe probe(comm, stages);
    TaggedCall c{.args = a, .tag = {}};
    c.args.space = mem::Space(&inert);
    const algo::AllReduceAlgo choice = a.kind == OpKind::AllReduce
                                           ? allReduceAlgorithm(comm, a.count * kernels::dataTypeSize(a.dtype))
                                           : algo::AllReduceAlgo::Ring;
    try {
      if (a.kind == OpKind::Send) {
        Request req;
        algo::postPointToPoint(probe, c.tag, c.args, &req);
      } else {
        runCall(probe, c, choice);
      }
    } catch (const FirstMessage&) {  // from here on the algorithm only moves data
    }
    probe.forgetPosted();
    bytesBySlot.resize(std::max(bytesBySlot.size(), probe.bytesBySlot.size()));
    for (size_t s = 0; s < probe.bytesBySlot.size(); ++s)
      bytesBySlot[s] = std::max(bytesBySlot[s], probe.bytesBySlot[s]);
    staged.resize(std::max(staged.size(), probe.mostStaged.size()));
    for (size_t c = 0; c < probe.mostStaged.size(); ++c) staged[c] += probe.mostStaged[c];
  }
  return {.scratch = comm.deviceScratch()->grow(bytesBySlot),
          .bounces = staged.empty() ? StagingPool::Grant{} : comm.stagingPool()->grow(staged)};
}

void CallMemory::adopt(Comm& comm) {
  if (!bounces.empty()) comm.stagingPool()->adopt(bounces);
  if (!scratch.empty()) comm.deviceScratch()->adopt(scratch);
}

}  // namespace chorus
