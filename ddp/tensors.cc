#include "ddp/tensors.h"

#include <cstdint>
#include <string>
#include <vector>

#include "lib/base/error.h"
#include "lib/kernels/reduce.h"

namespace chorus::ddp {

size_t Tensor::bytes() const { return count * kernels::dataTypeSize(dtype); }

void check(chorusComm_t comm, chorusResult_t rc, const char* what) {
  if (rc != chorusSuccess) throw Error(rc, fmt::format("{}: {}", what, chorusGetLastError(comm)));
}

void verifyAcrossRanks(chorusComm_t comm, std::span<const Tensor> list, const char* what, const char* fn,
                       const std::string& problem) {
  int rank = 0, nranks = 1;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &nranks);
  const auto n = static_cast<size_t>(nranks);
  std::vector<int64_t> sizes(n);
  int64_t mine = problem.empty() ? static_cast<int64_t>(list.size()) : -1;
  check(comm, chorusAllGather(&mine, sizes.data(), 1, chorusInt64, comm, nullptr), "gathering the tensor counts");
  if (!problem.empty()) fail(chorusInvalidArgument, "{} on rank {}: {}", fn, rank, problem);
  for (size_t r = 0; r < n; ++r)
    if (sizes[r] < 0)
      fail(chorusInvalidUsage, "{} on rank {}: rank {} rejected its arguments (its chorusGetLastError says why)", fn,
           rank, r);
  for (size_t r = 1; r < n; ++r)
    if (sizes[r] != sizes[0])
      fail(chorusInvalidUsage,
           "{} on rank {}: DDP expects the same model on every rank, but rank 0 registered {} {}s and rank {} "
           "registered {}",
           fn, rank, sizes[0], what, r, sizes[r]);
  // (count, datatype) of every tensor of every rank: each rank finds the same first difference.
  std::vector<int64_t> shape(2 * list.size()), all(2 * list.size() * n);
  for (size_t i = 0; i < list.size(); ++i) {
    shape[2 * i] = static_cast<int64_t>(list[i].count);
    shape[2 * i + 1] = static_cast<int64_t>(list[i].dtype);
  }
  check(comm, chorusAllGather(shape.data(), all.data(), shape.size(), chorusInt64, comm, nullptr),
        "gathering the tensor shapes");
  auto describe = [&](size_t r, size_t i) {
    const int64_t* s = &all[2 * (r * list.size() + i)];
    return fmt::format("{} elements of {}", s[0], kernels::dataTypeName(static_cast<chorusDataType_t>(s[1])));
  };
  for (size_t i = 0; i < list.size(); ++i)
    for (size_t r = 1; r < n; ++r)
      if (all[2 * (r * list.size() + i)] != all[2 * i] || all[2 * (r * list.size() + i) + 1] != all[2 * i + 1])
        fail(chorusInvalidUsage,
             "{} on rank {}: DDP expects the same model on every rank, but {} {} has {} on rank 0 and {} on "
             "rank {}",
             fn, rank, what, i, describe(0, i), describe(r, i), r);
}

void broadcastFromRoot(chorusComm_t comm, std::span<const Tensor> list) {
  check(comm, chorusGroupStart(), "chorusGroupStart");
  chorusResult_t first = chorusSuccess;
  for (const Tensor& t : list) {
    chorusResult_t rc = chorusBroadcast(t.data, t.data, t.count, t.dtype, 0, comm, nullptr);
    if (first == chorusSuccess) first = rc;
  }
  chorusResult_t end = chorusGroupEnd();
  check(comm, first != chorusSuccess ? first : end, "broadcasting from rank 0");
}

}  // namespace chorus::ddp
