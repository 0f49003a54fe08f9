// The backend's operations: each checks its arguments (a refusal names the argument), lays its tensors out as the
// Chorus call needs them (contiguous, flat), and hands run() the call, capturing by value: in a coalescing region
// the call is issued only at the region's end (Note [Coalescing] in backend.cc).
#include <algorithm>

#include "ddp/torch/backend.h"
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

// Copies block r of flat (n elements each) into outs[r], after an all-gather into flat.
// Copies flat's consecutive blocks into outs, each block as many elements as its tensor holds.
std::function<void()> unflatten(std::vector<at::Tensor> outs, at::Tensor flat) {
  return [outs, flat]() mutable {
    int64_t offset = 0;
    for (at::Tensor& o : outs) {
      o.copy_(flat.narrow(0, offset, o.numel()).view(o.sizes()));
      offset += o.numel();
    }
  };
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ChorusBackend::broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = single(tensors, "tensor");
  checkRank(opts.rootRank, "src");
  const chorusDataType_t dt = dataType(t, "tensor");
  Contiguous c = contiguous(t);
  const int root = static_cast<int>(opts.rootRank);
  return run({.type = c10d::OpType::BROADCAST, .name = "broadcast", .outputs = tensors, .keep = {c.buf},
              .issue = [buf = c.buf, dt, root](chorusComm_t comm, chorusStream_t s) {
                return chorusBroadcast(buf.data_ptr(), buf.data_ptr(), count(buf), dt, root, comm, s);
              },
              .after = c.back});
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = single(tensors, "tensor");
  const chorusDataType_t dt = dataType(t, "tensor");
  const Reduction red = reduction(opts.reduceOp, t);
  Contiguous c = contiguous(t);
  return run({.type = c10d::OpType::ALLREDUCE, .name = "all_reduce", .outputs = tensors, .keep = {c.buf},
              .issue = [buf = c.buf, dt, red](chorusComm_t comm, chorusStream_t s) {
                return issue(red, comm, dt, [&](chorusRedOp_t op) {
                  return chorusAllReduce(buf.data_ptr(), buf.data_ptr(), count(buf), dt, op, comm, s);
                });
              },
              .after = c.back});
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::allreduce_coalesced(Tensors& tensors,
                                                                  const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "chorus: all_reduce_coalesced needs at least one tensor");
  Tensors bufs;
  std::vector<chorusDataType_t> dts;
  std::vector<Reduction> reds;
  std::function<void()> back;
  for (const at::Tensor& t : tensors) {
    requireCpu(t, "tensors");
    dts.push_back(dataType(t, "tensors"));
    reds.push_back(reduction(opts.reduceOp, t));
    Contiguous c = contiguous(t);
    bufs.push_back(c.buf);
    back = both(back, c.back);
  }
  return run({.type = c10d::OpType::ALLREDUCE_COALESCED, .name = "all_reduce_coalesced", .outputs = tensors,
              .keep = bufs,
              .issue = [bufs, dts, reds](chorusComm_t comm, chorusStream_t s) {
                for (size_t i = 0; i < bufs.size(); ++i)
                  if (chorusResult_t rc = issue(reds[i], comm, dts[i], [&](chorusRedOp_t op) {
                        return chorusAllReduce(bufs[i].data_ptr(), bufs[i].data_ptr(), count(bufs[i]), dts[i], op,
                                               comm, s);
                      }))
                    return rc;
                return chorusSuccess;
              },
              .after = back,
              .group = true});
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::reduce(Tensors& tensors, const c10d::ReduceOptions& opts) {
  const at::Tensor& t = single(tensors, "tensor");
  checkRank(opts.rootRank, "dst");
  const chorusDataType_t dt = dataType(t, "tensor");
  const Reduction red = reduction(opts.reduceOp, t);
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = getRank() == root;
  Contiguous c = contiguous(t);
  // Only the root's tensor receives the result; the others' stay as they were.
  at::Tensor out = isRoot ? c.buf : at::empty_like(c.buf);
  return run({.type = c10d::OpType::REDUCE, .name = "reduce", .outputs = tensors, .keep = {c.buf, out},
              .issue = [in = c.buf, out, dt, red, root](chorusComm_t comm, chorusStream_t s) {
                return issue(red, comm, dt, [&](chorusRedOp_t op) {
                  return chorusReduce(in.data_ptr(), out.data_ptr(), count(in), dt, op, root, comm, s);
                });
              },
              .after = isRoot ? c.back : std::function<void()>()});
}

// tensor_list[p] receives rank p's tensor; the tensors may differ in size from rank to rank (chorusAllGatherV), each
// rank's own entry being as large as its input.
c10::intrusive_ptr<c10d::Work> ChorusBackend::allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                                                        const c10d::AllgatherOptions&) {
  const at::Tensor& in = single(inputs, "tensor");
  TORCH_CHECK(outputs.size() == 1, "chorus: all_gather takes one output list, got ", outputs.size());
  const Tensors& outs = outputs[0];
  TORCH_CHECK(static_cast<int>(outs.size()) == getSize(), "chorus: all_gather's tensor_list has ", outs.size(),
              " tensors for a group of ", getSize());
  const chorusDataType_t dt = dataType(in, "tensor");
  std::vector<size_t> counts;
  for (size_t p = 0; p < outs.size(); ++p) {
    requireCpu(outs[p], "tensor_list");
    TORCH_CHECK(outs[p].scalar_type() == in.scalar_type(), "chorus: all_gather's tensor_list[", p, "] is ",
                outs[p].scalar_type(), ", the input ", in.scalar_type());
    counts.push_back(count(outs[p]));
  }
  TORCH_CHECK(counts[getRank()] == count(in), "chorus: all_gather's tensor_list[", getRank(), "] (this rank's) has ",
              counts[getRank()], " elements but the input ", in.numel());
  size_t total = 0;
  for (size_t n : counts) total += n;
  at::Tensor src = in.contiguous();
  at::Tensor flat = at::empty({static_cast<int64_t>(total)}, in.options());
  return run({.type = c10d::OpType::ALLGATHER, .name = "all_gather", .outputs = outs, .keep = {src, flat},
              .issue = [src, flat, counts, dt](chorusComm_t comm, chorusStream_t s) {
                return chorusAllGatherV(src.data_ptr(), flat.data_ptr(), counts.data(), dt, comm, s);
              },
              .after = unflatten(outs, flat)});
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                              const c10d::AllgatherOptions&) {
  requireCpu(input, "input_tensor");
  requireCpu(output, "output_tensor");
  TORCH_CHECK(output.numel() == input.numel() * getSize() && output.scalar_type() == input.scalar_type(),
              "chorus: all_gather_into_tensor's output has ", output.numel(), " elements of ", output.scalar_type(),
              ", expected ", input.numel() * getSize(), " of ", input.scalar_type());
  const chorusDataType_t dt = dataType(input, "input_tensor");
  at::Tensor src = input.contiguous();
  Contiguous c = contiguous(output);
  return run({.type = c10d::OpType::_ALLGATHER_BASE, .name = "all_gather_into_tensor", .outputs = {output},
              .keep = {src, c.buf},
              .issue = [src, dst = c.buf, dt](chorusComm_t comm, chorusStream_t s) {
                return chorusAllGather(src.data_ptr(), dst.data_ptr(), count(src), dt, comm, s);
              },
              .after = c.back});
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs,
                                                                  const c10d::AllgatherOptions&) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == getSize(), "chorus: all_gather_coalesced's output has ",
              outputs.size(), " lists for a group of ", getSize());
  Tensors srcs, flats;
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
  return run({.type = c10d::OpType::ALLGATHER_COALESCED, .name = "all_gather_coalesced", .outputs = outs,
              .keep = keep,
              .issue = [srcs, flats, dts](chorusComm_t comm, chorusStream_t s) {
                for (size_t i = 0; i < srcs.size(); ++i)
                  if (chorusResult_t rc =
                          chorusAllGather(srcs[i].data_ptr(), flats[i].data_ptr(), count(srcs[i]), dts[i], comm, s))
                    return rc;
                return chorusSuccess;
              },
              .after = [lists = outputs, flats]() mutable {
                for (size_t r = 0; r < lists.size(); ++r)
                  for (size_t i = 0; i < lists[r].size(); ++i) {
                    const int64_t n = lists[r][i].numel();
                    lists[r][i].copy_(flats[i].narrow(0, static_cast<int64_t>(r) * n, n).view(lists[r][i].sizes()));
                  }
              },
              .group = true});
}

#if CHORUS_TORCH_BACKEND
c10::intrusive_ptr<c10d::Work> ChorusBackend::allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                                                              const c10d::AllgatherOptions&) {
  TORCH_CHECK(outputs.size() == inputs.size(), "chorus: all_gather_into_tensor_coalesced has ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  Tensors srcs, dsts, keep;
  std::vector<chorusDataType_t> dts;
  std::function<void()> back;
  for (size_t i = 0; i < inputs.size(); ++i) {
    requireCpu(inputs[i], "inputs");
    requireCpu(outputs[i], "outputs");
    TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * getSize() &&
                    outputs[i].scalar_type() == inputs[i].scalar_type(),
                "chorus: all_gather_into_tensor_coalesced's outputs[", i, "] has ", outputs[i].numel(),
                " elements of ", outputs[i].scalar_type(), ", expected ", inputs[i].numel() * getSize(), " of ",
                inputs[i].scalar_type());
    dts.push_back(dataType(inputs[i], "inputs"));
    srcs.push_back(inputs[i].contiguous());
    Contiguous c = contiguous(outputs[i]);
    dsts.push_back(c.buf);
    back = both(back, c.back);
  }
  keep = srcs;
  keep.insert(keep.end(), dsts.begin(), dsts.end());
  return run({.type = c10d::OpType::COALESCED, .name = "all_gather_into_tensor_coalesced", .outputs = outputs,
              .keep = keep,
              .issue = [srcs, dsts, dts](chorusComm_t comm, chorusStream_t s) {
                for (size_t i = 0; i < srcs.size(); ++i)
                  if (chorusResult_t rc =
                          chorusAllGather(srcs[i].data_ptr(), dsts[i].data_ptr(), count(srcs[i]), dts[i], comm, s))
                    return rc;
                return chorusSuccess;
              },
              .after = back,
              .group = true});
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::reduce_scatter_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "chorus: reduce_scatter_tensor_coalesced has ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  Tensors srcs, dsts, keep;
  std::vector<chorusDataType_t> dts;
  std::vector<Reduction> reds;
  std::function<void()> back;
  for (size_t i = 0; i < inputs.size(); ++i) {
    requireCpu(inputs[i], "inputs");
    requireCpu(outputs[i], "outputs");
    TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * getSize() &&
                    outputs[i].scalar_type() == inputs[i].scalar_type(),
                "chorus: reduce_scatter_tensor_coalesced's inputs[", i, "] has ", inputs[i].numel(), " elements of ",
                inputs[i].scalar_type(), ", expected ", outputs[i].numel() * getSize(), " of ",
                outputs[i].scalar_type());
    dts.push_back(dataType(outputs[i], "outputs"));
    reds.push_back(reduction(opts.reduceOp, outputs[i]));
    srcs.push_back(inputs[i].contiguous());
    Contiguous c = contiguous(outputs[i]);
    dsts.push_back(c.buf);
    back = both(back, c.back);
  }
  keep = srcs;
  keep.insert(keep.end(), dsts.begin(), dsts.end());
  return run({.type = c10d::OpType::COALESCED, .name = "reduce_scatter_tensor_coalesced", .outputs = outputs,
              .keep = keep,
              .issue = [srcs, dsts, dts, reds](chorusComm_t comm, chorusStream_t s) {
                for (size_t i = 0; i < srcs.size(); ++i)
                  if (chorusResult_t rc = issue(reds[i], comm, dts[i], [&](chorusRedOp_t op) {
                        return chorusReduceScatter(srcs[i].data_ptr(), dsts[i].data_ptr(), count(dsts[i]), dts[i], op,
                                                   comm, s);
                      }))
                    return rc;
                return chorusSuccess;
              },
              .after = back,
              .group = true});
}
#endif

c10::intrusive_ptr<c10d::Work> ChorusBackend::gather(std::vector<Tensors>& outputs, Tensors& inputs,
                                                     const c10d::GatherOptions& opts) {
  const at::Tensor& in = single(inputs, "tensor");
  checkRank(opts.rootRank, "dst");
  const int root = static_cast<int>(opts.rootRank);
  const chorusDataType_t dt = dataType(in, "tensor");
  at::Tensor src = in.contiguous();
  Tensors outs;
  at::Tensor flat;  // the root's: every rank's tensor, in rank order
  if (getRank() == root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                "chorus: gather's gather_list at the destination needs ", getSize(), " tensors");
    requireSame(outputs[0], in, "gather_list");
    outs = outputs[0];
    flat = at::empty({getSize() * in.numel()}, in.options());
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(), "chorus: gather_list must be empty except at the destination");
  }
  return run({.type = c10d::OpType::GATHER, .name = "gather", .outputs = outs, .keep = {src, flat},
              .issue = [src, flat, dt, root](chorusComm_t comm, chorusStream_t s) {
                return chorusGather(src.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, count(src), dt, root,
                                    comm, s);
              },
              .after = flat.defined() ? unflatten(outs, flat) : std::function<void()>()});
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                      const c10d::ScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "tensor");
  checkRank(opts.rootRank, "src");
  const int root = static_cast<int>(opts.rootRank);
  const chorusDataType_t dt = dataType(out, "tensor");
  Contiguous c = contiguous(out);
  at::Tensor flat;  // the root's: every rank's tensor, in rank order
  if (getRank() == root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                "chorus: scatter's scatter_list at the source needs ", getSize(), " tensors");
    requireSame(inputs[0], out, "scatter_list");
    Tensors parts;
    for (const at::Tensor& t : inputs[0]) parts.push_back(t.reshape({-1}));
    flat = at::cat(parts);
  } else {
    TORCH_CHECK(inputs.empty() || inputs[0].empty(), "chorus: scatter_list must be empty except at the source");
  }
  return run({.type = c10d::OpType::SCATTER, .name = "scatter", .outputs = outputs, .keep = {c.buf, flat},
              .issue = [buf = c.buf, flat, dt, root](chorusComm_t comm, chorusStream_t s) {
                return chorusScatter(flat.defined() ? flat.data_ptr() : nullptr, buf.data_ptr(), count(buf), dt, root,
                                     comm, s);
              },
              .after = c.back});
}

// input_list[p] is what this rank contributes to rank p's output; the tensors may differ in size from rank to rank
// (chorusReduceScatterV), each rank's output being as large as its own entry.
c10::intrusive_ptr<c10d::Work> ChorusBackend::reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "output");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(), "chorus: reduce_scatter's ",
              "input_list needs ", getSize(), " tensors");
  const chorusDataType_t dt = dataType(out, "output");
  const Reduction red = reduction(opts.reduceOp, out);
  std::vector<size_t> counts;
  Tensors flatParts;
  for (size_t p = 0; p < inputs[0].size(); ++p) {
    const at::Tensor& t = inputs[0][p];
    requireCpu(t, "input_list");
    TORCH_CHECK(t.scalar_type() == out.scalar_type(), "chorus: reduce_scatter's input_list[", p, "] is ",
                t.scalar_type(), ", the output ", out.scalar_type());
    counts.push_back(count(t));
    flatParts.push_back(t.reshape({-1}));
  }
  TORCH_CHECK(counts[getRank()] == count(out), "chorus: reduce_scatter's output has ", out.numel(),
              " elements but input_list[", getRank(), "] (this rank's part) has ", counts[getRank()]);
  at::Tensor flat = at::cat(flatParts);
  Contiguous c = contiguous(out);
  return run({.type = c10d::OpType::REDUCE_SCATTER, .name = "reduce_scatter", .outputs = outputs,
              .keep = {flat, c.buf},
              .issue = [flat, buf = c.buf, counts, dt, red](chorusComm_t comm, chorusStream_t s) {
                return issue(red, comm, dt, [&](chorusRedOp_t op) {
                  return chorusReduceScatterV(flat.data_ptr(), buf.data_ptr(), counts.data(), dt, op, comm, s);
                });
              },
              .after = c.back});
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::ReduceScatterOptions& opts) {
  requireCpu(input, "input");
  requireCpu(output, "output");
  TORCH_CHECK(input.numel() == output.numel() * getSize() && output.scalar_type() == input.scalar_type(),
              "chorus: reduce_scatter_tensor's input has ", input.numel(), " elements of ", input.scalar_type(),
              ", expected ", output.numel() * getSize(), " of ", output.scalar_type());
  const chorusDataType_t dt = dataType(output, "output");
  const Reduction red = reduction(opts.reduceOp, output);
  at::Tensor src = input.contiguous();
  Contiguous c = contiguous(output);
  return run({.type = c10d::OpType::_REDUCE_SCATTER_BASE, .name = "reduce_scatter_tensor", .outputs = {output},
              .keep = {src, c.buf},
              .issue = [src, buf = c.buf, dt, red](chorusComm_t comm, chorusStream_t s) {
                return issue(red, comm, dt, [&](chorusRedOp_t op) {
                  return chorusReduceScatter(src.data_ptr(), buf.data_ptr(), count(buf), dt, op, comm, s);
                });
              },
              .after = c.back});
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
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
  return run({.type = c10d::OpType::ALLTOALL_BASE, .name = "all_to_all_single", .outputs = {output},
              .keep = {src, c.buf},
              .issue = [=, buf = c.buf](chorusComm_t comm, chorusStream_t s) {
                if (equal) return chorusAllToAll(src.data_ptr(), buf.data_ptr(), count(src) / n, dt, comm, s);
                return chorusAllToAllv(src.data_ptr(), sendCounts.data(), sendDispls.data(), buf.data_ptr(),
                                       recvCounts.data(), recvDispls.data(), dt, comm, s);
              },
              .after = c.back});
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::alltoall(Tensors& outputs, Tensors& inputs,
                                                       const c10d::AllToAllOptions&) {
  const int n = getSize();
  TORCH_CHECK(static_cast<int>(outputs.size()) == n && static_cast<int>(inputs.size()) == n,
              "chorus: all_to_all needs ", n, " input and output tensors, got ", inputs.size(), " and ",
              outputs.size());
  Tensors srcs, bufs, keep;
  std::vector<chorusDataType_t> dts;
  std::function<void()> back;
  for (int r = 0; r < n; ++r) {
    requireCpu(inputs[r], "input_tensor_list");
    requireCpu(outputs[r], "output_tensor_list");
    TORCH_CHECK(inputs[r].scalar_type() == outputs[r].scalar_type(), "chorus: all_to_all's tensors differ in dtype");
    dts.push_back(dataType(inputs[r], "input_tensor_list"));
    srcs.push_back(inputs[r].contiguous());
    Contiguous c = contiguous(outputs[r]);
    bufs.push_back(c.buf);
    keep.push_back(srcs.back());
    keep.push_back(c.buf);
    back = both(back, c.back);
  }
  return run({.type = c10d::OpType::ALLTOALL, .name = "all_to_all", .outputs = outputs, .keep = keep,
              .issue = [srcs, bufs, dts, n](chorusComm_t comm, chorusStream_t s) {
                for (int r = 0; r < n; ++r) {
                  if (chorusResult_t rc = chorusSend(srcs[r].data_ptr(), count(srcs[r]), dts[r], r, comm, s))
                    return rc;
                  if (chorusResult_t rc = chorusRecv(bufs[r].data_ptr(), count(bufs[r]), dts[r], r, comm, s))
                    return rc;
                }
                return chorusSuccess;
              },
              .after = back,
              .group = true});
}

// send/recv match by torch's tag (Chorus's tagged point-to-point): messages between two ranks need not be received
// in the order they were sent, and a send never waits for its receive.
c10::intrusive_ptr<c10d::Work> ChorusBackend::send(Tensors& tensors, int dstRank, int tag) {
  const at::Tensor& t = single(tensors, "tensor");
  checkRank(dstRank, "dst");
  const chorusDataType_t dt = dataType(t, "tensor");
  at::Tensor src = t.contiguous();
  return run({.type = c10d::OpType::SEND, .name = "send", .outputs = tensors, .keep = {src},
              .issue = [src, dt, dstRank, tag](chorusComm_t comm, chorusStream_t s) {
                return chorusSendTagged(src.data_ptr(), count(src), dt, dstRank, tag, comm, s);
              }});
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::recv(Tensors& tensors, int srcRank, int tag) {
  const at::Tensor& t = single(tensors, "tensor");
  checkRank(srcRank, "src");
  const chorusDataType_t dt = dataType(t, "tensor");
  Contiguous c = contiguous(t);
  return run({.type = c10d::OpType::RECV, .name = "recv", .outputs = tensors, .keep = {c.buf},
              .issue = [buf = c.buf, dt, srcRank, tag](chorusComm_t comm, chorusStream_t s) {
                return chorusRecvTagged(buf.data_ptr(), count(buf), dt, srcRank, tag, nullptr, comm, s);
              },
              .after = c.back});
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::recvAnysource(Tensors& tensors, int tag) {
  const at::Tensor& t = single(tensors, "tensor");
  const chorusDataType_t dt = dataType(t, "tensor");
  Contiguous c = contiguous(t);
  auto source = std::make_shared<int>(-1);
  auto work = run({.type = c10d::OpType::RECVANYSOURCE, .name = "recv from any source", .outputs = tensors,
                   .keep = {c.buf},
                   .issue = [buf = c.buf, dt, tag, source](chorusComm_t comm, chorusStream_t s) {
                     return chorusRecvTagged(buf.data_ptr(), count(buf), dt, CHORUS_ANY_SOURCE, tag, source.get(),
                                             comm, s);
                   },
                   .after = c.back});
  static_cast<ChorusWork*>(work.get())->setSource(source);
  return work;
}

c10::intrusive_ptr<c10d::Work> ChorusBackend::barrier(const c10d::BarrierOptions&) {
  return run({.type = c10d::OpType::BARRIER, .name = "barrier", .outputs = {}, .keep = {},
              .issue = [](chorusComm_t comm, chorusStream_t s) { return chorusBarrier(comm, s); }});
}

}  // namespace chorus::torchpg
