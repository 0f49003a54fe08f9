// The "chorus" backend of torch.distributed: a c10d::Backend (a ProcessGroup on torch 1.13: Note [Backend or
// ProcessGroup] in compat.h) over one Chorus communicator. Every operation is validated on the calling thread, issued
// on a Chorus stream of its own and returns at once; a ChorusWork (work.h) completes it. The communicator's unique id
// travels through the store torch hands the backend, so every init method works and each new_group (a store with
// its own prefix) gets a communicator of its own. Operations run in the order they were called on this process; as
// with every backend, the ranks of a group must call them in one order.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "ddp/torch/compat.h"
#include "ddp/torch/work.h"

namespace chorus::torchpg {

class ChorusBackend final : public BackendBase {
 public:
  // Who the group is, for errors and log lines: torch's name for it ("0" is the default group) and the global rank
  // of each group rank (empty: the group is the world).
  struct Identity {
    std::string name;
    std::vector<int64_t> globalRanks;
  };
  // torch's timeout bounds the creation and every operation (a call that makes no progress for that long fails).
  ChorusBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
                Identity identity);
  ~ChorusBackend() override;
  // Note [Teardown] in backend.cc: the last strong reference went while weak ones remain.
  void release_resources() override;
  const std::string getBackendName() const override { return "chorus"; }

  // Registers a backend made by the creator, so that closeAll() can reach it (Note [Threads at exit]).
  static void live(const c10::intrusive_ptr<ChorusBackend>& backend);
  // Completes what every live backend has in flight, runs its callbacks and ends its threads; the backends stay
  // usable (a later call completes on the calling thread). Called from Python's atexit, before finalization.
  static void closeAll();

  using Tensors = std::vector<at::Tensor>;
  c10::intrusive_ptr<c10d::Work> broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(Tensors& tensors,
                                                      const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<Tensors>& outputs, Tensors& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits, std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(Tensors& outputs, Tensors& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(Tensors& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(Tensors& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(Tensors& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Note [Coalescing] in backend.cc.
  void startCoalescing() override;
#if CHORUS_TORCH_BACKEND
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
#else
  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& reqs) override;
#endif

  // Sequence numbers, as gloo's: every rank starts the group at 0 and counts the collectives called on it, so ranks
  // whose numbers differ have called different collectives.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }

 private:
  // One torch call: what it issues (called once, with the communicator and stream to issue it on; captures by
  // value: in a coalescing region it runs at the region's end) and what its Work keeps and does after.
  using Issue = std::function<chorusResult_t(chorusComm_t, chorusStream_t)>;
  struct Call {
    c10d::OpType type;
    const char* name;  // torch's name for it: "all_reduce"
    Tensors outputs;   // result() and the Future's value
    Tensors keep;      // alive until the operation completed
    Issue issue;
    std::function<void()> after = {};
    bool group = false;  // issue inside chorusGroupStart/End (calls that make several Chorus calls)
  };
  c10::intrusive_ptr<c10d::Work> run(Call call);
  // "group 'tp' rank 1 (global 3)", as torch names the group now (2.x names it after creating the backend).
  std::shared_ptr<const std::string> where();
  std::shared_ptr<SharedStream> newStream(chorusComm_t comm, const char* call);
  // A communicator of this group's ranks through the store (`key` names it there); throws what Chorus said.
  chorusComm_t makeComm(const char* key);
  // The communicator of the calls made from Futures' callbacks (Note [Callback order] in work.cc), made at the first.
  chorusComm_t callbackComm();
  // A call that Chorus refused: RuntimeError naming the argument for a bad one, DistBackendError otherwise.
  [[noreturn]] void refused(chorusResult_t rc, const char* call, const std::string& text);
  void checkRank(int64_t r, const char* what) const;
  void issueDeferred();  // the coalescing region's held calls, as one group (mu_ held)
  void close();          // ends the threads and destroys the communicators; once

  Identity identity_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  chorusComm_t comm_ = nullptr;
  std::mutex callbackCommMu_;
  chorusComm_t callbackComm_ = nullptr;
  std::atomic<uint64_t> seq_{0};
  CallCount issuingCalls_ = std::make_shared<std::atomic<uint64_t>>(0);  // Note [Callback order] in work.cc
  std::mutex mu_;  // what follows: calls may come from several threads (DDP's hooks run on callback threads)
  std::shared_ptr<const std::string> where_;
  std::string whereDesc_;  // the group description where_ was made with
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<ChorusWork>> region_;  // the Works of the coalescing region, in call order
  struct Deferred {
    c10::intrusive_ptr<ChorusWork> work;
    Issue issue;
    bool group;
  };
  std::vector<Deferred> deferred_;  // the region's collectives, issued at its end
  Completer completer_;
  // Point-to-point Works complete in an order of their own: a receive waiting for its message must not hold up
  // the Futures of the collectives issued after it (DDP's).
  Completer p2pCompleter_;
  Completer callbackCompleter_;  // the Works of callbackComm_
};

}  // namespace chorus::torchpg
