// Bucket assignment: which parameters share a bucket (one AllReduce), a pure function of their sizes, their
// datatypes and the order their gradients are expected in.
//
// Note [Bucket assignment]: PyTorch's compute_bucket_assignment_by_size, the seeds' rule. Walk the parameters in
// `order` (reverse registration order at first, because backward produces the last layer's gradients first;
// the recorded first-ready-first order after a rebuild). Each datatype has one open bucket; a parameter joins
// its datatype's open bucket, and the bucket closes once its bytes reach or exceed its cap, so a bucket may
// exceed its cap by one parameter. The first bucket opened is capped at firstCapBytes, every other at
// capBytes. Buckets are numbered by when their last parameter comes in `order` (closing time), which is when
// they become ready: launching them in index order then follows backward.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::ddp {

struct ParamShape {
  size_t count;
  chorusDataType_t dtype;
};

struct BucketLayout {
  std::vector<int> params;  // in the order they are laid out in the bucket's storage
  size_t bytes = 0;
  chorusDataType_t dtype = chorusFloat32;
};

// order must be a permutation of 0..params.size()-1.
std::vector<BucketLayout> assignBuckets(std::span<const ParamShape> params, std::span<const int> order,
                                        size_t firstCapBytes, size_t capBytes);

// n-1, n-2, ..., 0: the initial order (backward runs from the last registered layer to the first).
std::vector<int> reverseOrder(int n);

}  // namespace chorus::ddp
