// torch.distributed's ProcessGroup over a Chorus communicator (the "chorus" backend): every operation is issued on
// a Chorus stream of its own and returns at once; a ChorusWork (work.h) completes it. The communicator's unique id
// travels through the store torch hands the backend, so every init method works and each new_group (a store with
// its own prefix) gets a communicator of its own.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "ddp/torch/work.h"

namespace chorus::torchpg {

class ProcessGroupChorus final : public c10d::ProcessGroup {
 public:
  ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout);
  ~ProcessGroupChorus() override;
  // The creator torch.distributed.Backend.register_backend takes.
  static c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                       int size, std::chrono::milliseconds timeout);
  const std::string getBackendName() const override { return "chorus"; }

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

 private:
  // Issues `issue` on a new stream (in a group when `group`) and returns the Work that completes it. A failure to
  // issue (a bad argument) raises before anything is sent.
  c10::intrusive_ptr<c10d::Work> run(c10d::OpType type, const char* call, Tensors outputs, Tensors keep,
                                     const std::function<chorusResult_t(chorusStream_t)>& issue,
                                     std::function<void()> after = {}, bool group = false);
  void checkRank(int64_t r, const char* what) const;

  chorusComm_t comm_ = nullptr;
  Completer completer_;
  // Point-to-point Works complete in an order of their own: a receive waiting for its message must not hold up
  // the Futures of the collectives issued after it (DDP's).
  Completer p2pCompleter_;
};

}  // namespace chorus::torchpg
