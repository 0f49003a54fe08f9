#include "ddp/buckets.h"

#include <algorithm>
#include <map>

#include "lib/kernels/reduce.h"

namespace chorus::ddp {

std::vector<BucketLayout> assignBuckets(std::span<const ParamShape> params, std::span<const int> order,
                                        size_t firstCapBytes, size_t capBytes) {
  struct Open {
    BucketLayout layout;
    size_t cap;
    size_t closedAt;  // position in `order` of its last parameter
  };
  std::vector<Open> done;
  std::map<int, Open> open;  // by datatype
  bool first = true;
  for (size_t pos = 0; pos < order.size(); ++pos) {
    const int p = order[pos];
    const ParamShape& shape = params[static_cast<size_t>(p)];
    auto it = open.find(shape.dtype);
    if (it == open.end()) {
      Open b{BucketLayout{{}, 0, shape.dtype}, first ? firstCapBytes : capBytes, 0};
      first = false;
      it = open.emplace(shape.dtype, std::move(b)).first;
    }
    Open& b = it->second;
    b.layout.params.push_back(p);
    b.layout.bytes += shape.count * kernels::dataTypeSize(shape.dtype);
    b.closedAt = pos;
    if (b.layout.bytes >= b.cap) {
      done.push_back(std::move(b));
      open.erase(it);
    }
  }
  for (auto& [dtype, b] : open) done.push_back(std::move(b));
  std::sort(done.begin(), done.end(), [](const Open& a, const Open& b) { return a.closedAt < b.closedAt; });
  std::vector<BucketLayout> out;
  out.reserve(done.size());
  for (Open& b : done) out.push_back(std::move(b.layout));
  return out;
}

std::vector<int> reverseOrder(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = n - 1 - i;
  return v;
}

}  // namespace chorus::ddp
