#include "ddp/torch/process_group.h"

#include <c10/util/Exception.h>

#include <cstring>

#include "ddp/torch/convert.h"

namespace chorus::torchpg {

namespace {

// A contiguous tensor to run on instead of t, and the copy back into t once the operation has written it.
struct Contiguous {
  at::Tensor buf;
  std::function<void()> back;
};
Contiguous contiguous(const at::Tensor& t) {
  if (t.is_contiguous()) return {t, {}};
  at::Tensor c = t.contiguous(), target = t;
  return {c, [target, c]() mutable { target.copy_(c); }};
}

std::function<void()> both(std::function<void()> a, std::function<void()> b) {
  if (!a) return b;
  if (!b) return a;
  return [a, b] {
    a();
    b();
  };
}

size_t count(const at::Tensor& t) { return static_cast<size_t>(t.numel()); }

const char* const kStoreKey = "chorus_unique_id";

}  // namespace

ProcessGroupChorus::ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       std::chrono::milliseconds timeout)
    : ProcessGroup(rank, size) {
  // Rank 0 starts the bootstrap root and publishes its id; the others wait for it in the store (its timeout).
  chorusUniqueId id;
  if (rank == 0) {
    const chorusResult_t rc = chorusGetUniqueId(&id);
    if (rc != chorusSuccess) raise(rc, nullptr, "chorusGetUniqueId");
    store->set(kStoreKey, std::vector<uint8_t>(id.internal, id.internal + sizeof id.internal));
  } else {
    store->setTimeout(timeout);
    const std::vector<uint8_t> got = store->get(kStoreKey);
    TORCH_CHECK(got.size() == sizeof id.internal, "chorus: the store's ", kStoreKey, " has ", got.size(),
                " bytes, expected ", sizeof id.internal, " (another Chorus version?)");
    std::memcpy(id.internal, got.data(), got.size());
  }
  // torch's timeout bounds the creation and every operation (a call that makes no progress for that long fails).
  chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
  config.timeoutSec = config.initTimeoutSec = std::chrono::duration<double>(timeout).count();
  const chorusResult_t rc = chorusCommInitRankConfig(&comm_, size, id, rank, &config);
  if (rc != chorusSuccess) raise(rc, nullptr, "creating the communicator (chorusCommInitRankConfig)");
}

ProcessGroupChorus::~ProcessGroupChorus() {
  completer_.close();  // their streams belong to the communicator
  p2pCompleter_.close();
  if (comm_ != nullptr) chorusCommDestroy(comm_);
}

c10::intrusive_ptr<c10d::ProcessGroup> ProcessGroupChorus::create(const c10::intrusive_ptr<c10d::Store>& store,
                                                                  int rank, int size,
                                                                  std::chrono::milliseconds timeout) {
  return c10::make_intrusive<ProcessGroupChorus>(store, rank, size, timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::run(c10d::OpType type, const char* call, Tensors outputs,
                                                       Tensors keep,
                                                       const std::function<chorusResult_t(chorusStream_t)>& issue,
                                                       std::function<void()> after, bool group) {
  chorusStream_t stream = nullptr;
  chorusResult_t rc = chorusStreamCreate(comm_, &stream);
  if (rc != chorusSuccess) raise(rc, comm_, call);
  if (group) chorusGroupStart();
  rc = issue(stream);
  if (group) {
    const chorusResult_t end = chorusGroupEnd();
    if (rc == chorusSuccess) rc = end;
  }
  if (rc != chorusSuccess) {
    const std::string text = chorusGetLastError(nullptr);
    chorusStreamDestroy(stream);
    TORCH_CHECK(false, "chorus: ", call, " failed: ", chorusGetErrorString(rc), ": ", text);
  }
  const bool p2p = type == c10d::OpType::SEND || type == c10d::OpType::RECV || type == c10d::OpType::RECVANYSOURCE;
  Completer& completer = p2p ? p2pCompleter_ : completer_;
  auto work = c10::make_intrusive<ChorusWork>(getRank(), type, stream, call, std::move(outputs),
                                              std::move(keep), std::move(after), &completer);
  completer.push(work);
  return work;
}

void ProcessGroupChorus::checkRank(int64_t r, const char* what) const {
  TORCH_CHECK(r >= 0 && r < getSize(), "chorus: ", what, " ", r, " is not a rank of this group (size ", getSize(),
              ")");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = single(tensors, "tensor");
  checkRank(opts.rootRank, "src");
  const chorusDataType_t dt = dataType(t, "tensor");
  Contiguous c = contiguous(t);
  const int root = static_cast<int>(opts.rootRank);
  return run(c10d::OpType::BROADCAST, "broadcast", tensors, {c.buf}, [&](chorusStream_t s) {
    return chorusBroadcast(c.buf.data_ptr(), c.buf.data_ptr(), count(c.buf), dt, root, comm_, s);
  }, c.back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = single(tensors, "tensor");
  const chorusDataType_t dt = dataType(t, "tensor");
  const chorusRedOp_t op = redOp(opts.reduceOp, t);
  Contiguous c = contiguous(t);
  return run(c10d::OpType::ALLREDUCE, "all_reduce", tensors, {c.buf}, [&](chorusStream_t s) {
    return chorusAllReduce(c.buf.data_ptr(), c.buf.data_ptr(), count(c.buf), dt, op, comm_, s);
  }, c.back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce_coalesced(Tensors& tensors,
                                                                       const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "chorus: all_reduce_coalesced needs at least one tensor");
  std::vector<Contiguous> cs;
  std::vector<chorusDataType_t> dts;
  std::vector<chorusRedOp_t> ops;
  Tensors keep;
  std::function<void()> back;
  for (const at::Tensor& t : tensors) {
    requireCpu(t, "tensors");
    dts.push_back(dataType(t, "tensors"));
    ops.push_back(redOp(opts.reduceOp, t));
    cs.push_back(contiguous(t));
    keep.push_back(cs.back().buf);
    back = both(back, cs.back().back);
  }
  return run(c10d::OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced", tensors, keep, [&](chorusStream_t s) {
    for (size_t i = 0; i < cs.size(); ++i)
      if (chorusResult_t rc = chorusAllReduce(cs[i].buf.data_ptr(), cs[i].buf.data_ptr(), count(cs[i].buf), dts[i],
                                              ops[i], comm_, s))
        return rc;
    return chorusSuccess;
  }, back, /*group=*/true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce(Tensors& tensors, const c10d::ReduceOptions& opts) {
  const at::Tensor& t = single(tensors, "tensor");
  checkRank(opts.rootRank, "dst");
  const chorusDataType_t dt = dataType(t, "tensor");
  const chorusRedOp_t op = redOp(opts.reduceOp, t);
  const int root = static_cast<int>(opts.rootRank);
  Contiguous c = contiguous(t);
  // Only the root's tensor receives the result; the others' stay as they were.
  at::Tensor out = getRank() == root ? c.buf : at::empty_like(c.buf);
  return run(c10d::OpType::REDUCE, "reduce", tensors, {c.buf, out}, [&](chorusStream_t s) {
    return chorusReduce(c.buf.data_ptr(), out.data_ptr(), count(c.buf), dt, op, root, comm_, s);
  }, getRank() == root ? c.back : std::function<void()>());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                                                             const c10d::AllgatherOptions&) {
  const at::Tensor& in = single(inputs, "tensor");
  TORCH_CHECK(outputs.size() == 1, "chorus: all_gather takes one output list, got ", outputs.size());
  TORCH_CHECK(static_cast<int>(outputs[0].size()) == getSize(), "chorus: all_gather's tensor_list has ",
              outputs[0].size(), " tensors for a group of ", getSize());
  requireSame(outputs[0], in, "tensor_list");
  const chorusDataType_t dt = dataType(in, "tensor");
  at::Tensor src = in.contiguous();
  at::Tensor flat = at::empty({getSize() * in.numel()}, in.options());
  Tensors outs = outputs[0];
  const int64_t n = in.numel();
  return run(c10d::OpType::ALLGATHER, "all_gather", outs, {src, flat}, [&](chorusStream_t s) {
    return chorusAllGather(src.data_ptr(), flat.data_ptr(), count(src), dt, comm_, s);
  }, [outs, flat, n]() mutable {
    for (size_t r = 0; r < outs.size(); ++r)
      outs[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(outs[r].sizes()));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::AllgatherOptions&) {
  requireCpu(input, "input_tensor");
  requireCpu(output, "output_tensor");
  TORCH_CHECK(output.numel() == input.numel() * getSize() && output.scalar_type() == input.scalar_type(),
              "chorus: _all_gather_base's output has ", output.numel(), " elements of ", output.scalar_type(),
              ", expected ", input.numel() * getSize(), " of ", input.scalar_type());
  const chorusDataType_t dt = dataType(input, "input_tensor");
  at::Tensor src = input.contiguous();
  Contiguous c = contiguous(output);
  return run(c10d::OpType::_ALLGATHER_BASE, "_all_gather_base", {output}, {src, c.buf}, [&](chorusStream_t s) {
    return chorusAllGather(src.data_ptr(), c.buf.data_ptr(), count(src), dt, comm_, s);
  }, c.back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_coalesced(std::vector<Tensors>& outputs,
                                                                       Tensors& inputs,
                                                                       const c10d::AllgatherOptions&) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == getSize(), "chorus: all_gather_coalesced's output has ",
              outputs.size(), " lists for a group of ", getSize());
  std::vector<at::Tensor> srcs, flats;
  std::vector<chorusDataType_t> dts;
  for (size_t i = 0; i < inputs.size(); ++i) {
    requireCpu(inputs[i], "input_tensor_list");
    dts.push_back(dataType(inputs[i], "input_tensor_list"));
    srcs.push_back(inputs[i].contiguous());
    flats.push_back(at::empty({getSize() * inputs[i].numel()}, inputs[i].options()));
  }
  for (const Tensors& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(), "chorus: all_gather_coalesced: every output list needs ",
                inputs.size(), " tensors, one has ", list.size());
    for (size_t i = 0; i < list.size(); ++i) requireSame({list[i]}, inputs[i], "output_tensor_lists");
  }
  Tensors keep = srcs, outs;
  keep.insert(keep.end(), flats.begin(), flats.end());
  for (const Tensors& list : outputs) outs.insert(outs.end(), list.begin(), list.end());
  std::vector<Tensors> lists = outputs;
  return run(c10d::OpType::ALLGATHER_COALESCED, "all_gather_coalesced", outs, keep, [&](chorusStream_t s) {
    for (size_t i = 0; i < srcs.size(); ++i)
      if (chorusResult_t rc =
              chorusAllGather(srcs[i].data_ptr(), flats[i].data_ptr(), count(srcs[i]), dts[i], comm_, s))
        return rc;
    return chorusSuccess;
  }, [lists, flats]() mutable {
    for (size_t r = 0; r < lists.size(); ++r)
      for (size_t i = 0; i < lists[r].size(); ++i) {
        const int64_t n = lists[r][i].numel();
        lists[r][i].copy_(flats[i].narrow(0, static_cast<int64_t>(r) * n, n).view(lists[r][i].sizes()));
      }
  }, /*group=*/true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::gather(std::vector<Tensors>& outputs, Tensors& inputs,
                                                          const c10d::GatherOptions& opts) {
  const at::Tensor& in = single(inputs, "tensor");
  checkRank(opts.rootRank, "dst");
  const int root = static_cast<int>(opts.rootRank);
  const chorusDataType_t dt = dataType(in, "tensor");
  at::Tensor src = in.contiguous();
  Tensors outs, keep{src};
  std::vector<Contiguous> cs;
  std::function<void()> back;
  if (getRank() == root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                "chorus: gather's gather_list at the destination needs ", getSize(), " tensors");
    requireSame(outputs[0], in, "gather_list");
    outs = outputs[0];
    for (const at::Tensor& o : outs) {
      cs.push_back(contiguous(o));
      keep.push_back(cs.back().buf);
      back = both(back, cs.back().back);
    }
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(), "chorus: gather_list must be empty except at the destination");
  }
  return run(c10d::OpType::GATHER, "gather", outs, keep, [&](chorusStream_t s) {
    if (getRank() != root) return chorusSend(src.data_ptr(), count(src), dt, root, comm_, s);
    for (int r = 0; r < getSize(); ++r)
      if (chorusResult_t rc = r == root ? chorusSuccess
                                        : chorusRecv(cs[r].buf.data_ptr(), count(src), dt, r, comm_, s))
        return rc;
    cs[root].buf.copy_(src);  // its own, at issue time: the input is the caller's to keep until the call
    return chorusSuccess;
  }, back, /*group=*/true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                           const c10d::ScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "tensor");
  checkRank(opts.rootRank, "src");
  const int root = static_cast<int>(opts.rootRank);
  const chorusDataType_t dt = dataType(out, "tensor");
  Contiguous c = contiguous(out);
  Tensors keep{c.buf};
  std::vector<at::Tensor> srcs;
  if (getRank() == root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                "chorus: scatter's scatter_list at the source needs ", getSize(), " tensors");
    requireSame(inputs[0], out, "scatter_list");
    for (const at::Tensor& t : inputs[0]) srcs.push_back(t.contiguous());
    keep.insert(keep.end(), srcs.begin(), srcs.end());
  } else {
    TORCH_CHECK(inputs.empty() || inputs[0].empty(), "chorus: scatter_list must be empty except at the source");
  }
  return run(c10d::OpType::SCATTER, "scatter", outputs, keep, [&](chorusStream_t s) {
    if (getRank() != root) return chorusRecv(c.buf.data_ptr(), count(c.buf), dt, root, comm_, s);
    for (int r = 0; r < getSize(); ++r)
      if (chorusResult_t rc = r == root ? chorusSuccess
                                        : chorusSend(srcs[r].data_ptr(), count(c.buf), dt, r, comm_, s))
        return rc;
    c.buf.copy_(srcs[root]);
    return chorusSuccess;
  }, c.back, /*group=*/true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                                  const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "output");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(), "chorus: reduce_scatter's ",
              "input_list needs ", getSize(), " tensors");
  requireSame(inputs[0], out, "input_list");
  const chorusDataType_t dt = dataType(out, "output");
  const chorusRedOp_t op = redOp(opts.reduceOp, out);
  std::vector<at::Tensor> flatParts;
  for (const at::Tensor& t : inputs[0]) flatParts.push_back(t.reshape({-1}));
  at::Tensor flat = at::cat(flatParts);
  Contiguous c = contiguous(out);
  return run(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs, {flat, c.buf}, [&](chorusStream_t s) {
    return chorusReduceScatter(flat.data_ptr(), c.buf.data_ptr(), count(c.buf), dt, op, comm_, s);
  }, c.back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                        const c10d::ReduceScatterOptions& opts) {
  requireCpu(input, "input");
  requireCpu(output, "output");
  TORCH_CHECK(input.numel() == output.numel() * getSize() && output.scalar_type() == input.scalar_type(),
              "chorus: _reduce_scatter_base's input has ", input.numel(), " elements of ", input.scalar_type(),
              ", expected ", output.numel() * getSize(), " of ", output.scalar_type());
  const chorusDataType_t dt = dataType(output, "output");
  const chorusRedOp_t op = redOp(opts.reduceOp, output);
  at::Tensor src = input.contiguous();
  Contiguous c = contiguous(output);
  return run(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {output}, {src, c.buf},
             [&](chorusStream_t s) {
               return chorusReduceScatter(src.data_ptr(), c.buf.data_ptr(), count(c.buf), dt, op, comm_, s);
             }, c.back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                 std::vector<int64_t>& outputSplits,
                                                                 std::vector<int64_t>& inputSplits,
                                                                 const c10d::AllToAllOptions&) {
  requireCpu(input, "input");
  requireCpu(output, "output");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "chorus: all_to_all_single's input is ",
              input.scalar_type(), " and its output ", output.scalar_type());
  const chorusDataType_t dt = dataType(input, "input");
  const int n = getSize();
  // Rows of the first dimension per peer: equal when no splits are given.
  auto splits = [&](const std::vector<int64_t>& given, const at::Tensor& t, const char* tensor, const char* what) {
    std::vector<int64_t> rows(n, t.dim() == 0 ? 0 : t.size(0) / n);
    if (!given.empty()) {
      TORCH_CHECK(static_cast<int>(given.size()) == n, "chorus: ", what, " has ", given.size(),
                  " entries for a group of ", n);
      rows = given;
    } else {
      TORCH_CHECK(t.dim() > 0 && t.size(0) % n == 0, "chorus: all_to_all_single's ", tensor, " first dimension (",
                  t.dim() > 0 ? t.size(0) : 0, ") is not a multiple of the group size ", n);
    }
    int64_t sum = 0;
    for (int64_t r : rows) sum += r;
    TORCH_CHECK(t.dim() > 0 && sum == t.size(0), "chorus: ", what, " add up to ", sum, " rows, the tensor has ",
                t.dim() > 0 ? t.size(0) : 0);
    return rows;
  };
  const std::vector<int64_t> outRows = splits(outputSplits, output, "output", "output_split_sizes");
  const std::vector<int64_t> inRows = splits(inputSplits, input, "input", "input_split_sizes");
  const int64_t rowElems = input.dim() == 0 ? 1 : input.numel() / std::max<int64_t>(input.size(0), 1);
  at::Tensor src = input.contiguous();
  Contiguous c = contiguous(output);
  const bool equal = outputSplits.empty() && inputSplits.empty();
  return run(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {output}, {src, c.buf}, [&](chorusStream_t s) {
    if (equal) return chorusAllToAll(src.data_ptr(), c.buf.data_ptr(), count(src) / n, dt, comm_, s);
    // Elements per peer and where each block starts (chorusAllToAllv copies them at the call).
    std::vector<size_t> sendCounts(n), sendDispls(n), recvCounts(n), recvDispls(n);
    for (int r = 0; r < n; ++r) {
      sendCounts[r] = static_cast<size_t>(inRows[r] * rowElems);
      recvCounts[r] = static_cast<size_t>(outRows[r] * rowElems);
      if (r + 1 < n) {
        sendDispls[r + 1] = sendDispls[r] + sendCounts[r];
        recvDispls[r + 1] = recvDispls[r] + recvCounts[r];
      }
    }
    return chorusAllToAllv(src.data_ptr(), sendCounts.data(), sendDispls.data(), c.buf.data_ptr(), recvCounts.data(),
                           recvDispls.data(), dt, comm_, s);
  }, c.back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall(Tensors& outputs, Tensors& inputs,
                                                            const c10d::AllToAllOptions&) {
  const int n = getSize();
  TORCH_CHECK(static_cast<int>(outputs.size()) == n && static_cast<int>(inputs.size()) == n,
              "chorus: all_to_all needs ", n, " input and output tensors, got ", inputs.size(), " and ",
              outputs.size());
  std::vector<at::Tensor> srcs;
  std::vector<Contiguous> cs;
  std::vector<chorusDataType_t> dts;
  Tensors keep;
  std::function<void()> back;
  for (int r = 0; r < n; ++r) {
    requireCpu(inputs[r], "input_tensor_list");
    requireCpu(outputs[r], "output_tensor_list");
    TORCH_CHECK(inputs[r].scalar_type() == outputs[r].scalar_type(), "chorus: all_to_all's tensors differ in dtype");
    dts.push_back(dataType(inputs[r], "input_tensor_list"));
    srcs.push_back(inputs[r].contiguous());
    cs.push_back(contiguous(outputs[r]));
    keep.push_back(srcs.back());
    keep.push_back(cs.back().buf);
    back = both(back, cs.back().back);
  }
  return run(c10d::OpType::ALLTOALL, "all_to_all", outputs, keep, [&](chorusStream_t s) {
    for (int r = 0; r < n; ++r) {
      if (chorusResult_t rc = chorusSend(srcs[r].data_ptr(), count(srcs[r]), dts[r], r, comm_, s)) return rc;
      if (chorusResult_t rc = chorusRecv(cs[r].buf.data_ptr(), count(cs[r].buf), dts[r], r, comm_, s)) return rc;
    }
    return chorusSuccess;
  }, back, /*group=*/true);
}

// send/recv match by torch's tag (Chorus's tagged point-to-point): messages between two ranks need not be received
// in the order they were sent, and a send never waits for its receive.
c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::send(Tensors& tensors, int dstRank, int tag) {
  const at::Tensor& t = single(tensors, "tensor");
  checkRank(dstRank, "dst");
  const chorusDataType_t dt = dataType(t, "tensor");
  at::Tensor src = t.contiguous();
  return run(c10d::OpType::SEND, "send", tensors, {src}, [&](chorusStream_t s) {
    return chorusSendTagged(src.data_ptr(), count(src), dt, dstRank, tag, comm_, s);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recv(Tensors& tensors, int srcRank, int tag) {
  const at::Tensor& t = single(tensors, "tensor");
  checkRank(srcRank, "src");
  const chorusDataType_t dt = dataType(t, "tensor");
  Contiguous c = contiguous(t);
  return run(c10d::OpType::RECV, "recv", tensors, {c.buf}, [&](chorusStream_t s) {
    return chorusRecvTagged(c.buf.data_ptr(), count(c.buf), dt, srcRank, tag, nullptr, comm_, s);
  }, c.back);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recvAnysource(Tensors& tensors, int tag) {
  const at::Tensor& t = single(tensors, "tensor");
  const chorusDataType_t dt = dataType(t, "tensor");
  Contiguous c = contiguous(t);
  auto source = std::make_shared<int>(-1);
  auto work = run(c10d::OpType::RECVANYSOURCE, "recv from any source", tensors, {c.buf}, [&](chorusStream_t s) {
    return chorusRecvTagged(c.buf.data_ptr(), count(c.buf), dt, CHORUS_ANY_SOURCE, tag, source.get(), comm_, s);
  }, c.back);
  static_cast<ChorusWork*>(work.get())->setSource(source);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::barrier(const c10d::BarrierOptions&) {
  return run(c10d::OpType::BARRIER, "barrier", {}, {}, [&](chorusStream_t s) { return chorusBarrier(comm_, s); });
}

}  // namespace chorus::torchpg
