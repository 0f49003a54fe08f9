// Folding n ranks onto a power of two, shared by recursive doubling and halving-doubling: p = the largest
// power of two <= n; each of the first 2*(n-p) ranks that is even hands its whole buffer to the next (odd)
// rank, sits out, and receives the final result from it; the p remaining "active" ranks run the algorithm.
#pragma once

#include "algorithms/collective.h"
#include "lib/kernels/reduce.h"

namespace chorus::algo {

class PowerOfTwoFold {
 public:
  PowerOfTwoFold(int n, int rank) : rank_(rank) {
    while (p_ * 2 <= n) p_ *= 2;
    extra_ = n - p_;
  }
  int p() const { return p_; }
  int active() const { return rank_ < 2 * extra_ ? rank_ / 2 : rank_ - extra_; }
  int realRank(int active) const { return active < extra_ ? active * 2 + 1 : active + extra_; }

  // Folds this rank's `out` (count elements) in. False when this rank sits out: it has then already received
  // the final result into `out`. tmp holds count elements.
  bool foldIn(Context& ctx, const OpTag& tag, const CollArgs& a, uint8_t* out, uint8_t* tmp) const {
    return rank_ >= 2 * extra_ || foldPair(ctx, tag, a, out, tmp);
  }

  // Sends the final result back to the rank that sat out for this one.
  void foldOut(Context& ctx, const OpTag& tag, const CollArgs& a, const uint8_t* out) const {
    if (rank_ < 2 * extra_) sendBack(ctx, tag, a, out);
  }

 private:
  bool foldPair(Context& ctx, const OpTag& tag, const CollArgs& a, uint8_t* out, uint8_t* tmp) const {
    const size_t bytes = a.count * kernels::dataTypeSize(a.dtype);
    if (rank_ % 2 == 0) {
      Request s, v;
      ctx.isend(rank_ + 1, out, bytes, tag, &s);
      ctx.irecv(rank_ + 1, out, bytes, tag, &v);
      ctx.waitUntil([&] { return s.done && v.done; }, tag);
      return false;
    }
    Request v;
    if (ctx.irecvReduce(a.space, rank_ - 1, out, out, bytes, a.dtype, a.op, tag, &v)) {
      ctx.wait(v, tag);
      return true;
    }
    ctx.irecv(rank_ - 1, tmp, bytes, tag, &v);
    ctx.wait(v, tag);
    a.space.reduce(out, out, tmp, a.count, a.dtype, a.op);
    return true;
  }

  void sendBack(Context& ctx, const OpTag& tag, const CollArgs& a, const uint8_t* out) const {
    Request s;
    ctx.isend(rank_ - 1, out, a.count * kernels::dataTypeSize(a.dtype), tag, &s);
    ctx.wait(s, tag);
  }

  int rank_;
  int p_ = 1;
  int extra_ = 0;
};

}  // namespace chorus::algo
