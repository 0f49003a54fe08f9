#include "lib/comm/staging_pool.h"

#include <algorithm>

#include "lib/base/error.h"

namespace chorus {

StagingPool::Grant::~Grant() {
  for (const auto& [sizeClass, p] : buffers_) device_->releaseHost(p);
}

StagingPool::~StagingPool() {
  for (const std::vector<uint8_t*>& c : free_)
    for (uint8_t* p : c) device_->releaseHost(p);
}

int& StagingPool::made(int sizeClass) {
  if (made_.size() <= static_cast<size_t>(sizeClass)) made_.resize(static_cast<size_t>(sizeClass) + 1);
  return made_[static_cast<size_t>(sizeClass)];
}

StagingPool::Grant StagingPool::grow(const std::vector<int>& countByClass) {
  Grant g;
  g.device_ = device_;
  std::vector<int> missing(countByClass.size());
  {
    std::lock_guard<std::mutex> l(mu_);
    for (size_t c = 0; c < countByClass.size(); ++c) {
      int& m = made(static_cast<int>(c));
      missing[c] = std::max(0, countByClass[c] - m);
      m += missing[c];
    }
  }
  // Outside the lock, as DeviceScratch::grow: an allocation may wait for the device.
  for (size_t c = 0; c < missing.size(); ++c) {
    for (int i = 0; i < missing[c]; ++i) {
      try {
        g.buffers_.emplace_back(static_cast<int>(c),
                                static_cast<uint8_t*>(device_->allocateHost(mem::bounceBytes(static_cast<int>(c)))));
      } catch (const Error& e) {
        std::lock_guard<std::mutex> l(mu_);
        made(static_cast<int>(c)) -= missing[c] - i;
        for (size_t d = c + 1; d < missing.size(); ++d) made(static_cast<int>(d)) -= missing[d];
        g.failure_ = e;
        return g;
      }
    }
  }
  return g;
}

void StagingPool::adopt(Grant& grant) {
  for (const auto& [sizeClass, p] : grant.buffers_) give(sizeClass, p);  // counted as made: they join the pool
  grant.buffers_.clear();
  if (grant.failure_) {
    const Error e = *grant.failure_;
    grant.failure_.reset();
    throw e;
  }
}

uint8_t* StagingPool::take(int sizeClass) {
  if (free_.size() <= static_cast<size_t>(sizeClass)) free_.resize(static_cast<size_t>(sizeClass) + 1);
  std::vector<uint8_t*>& free = free_[static_cast<size_t>(sizeClass)];
  if (!free.empty()) {
    uint8_t* p = free.back();
    free.pop_back();
    return p;
  }
  auto* p = static_cast<uint8_t*>(device_->allocateHost(mem::bounceBytes(sizeClass)));
  std::lock_guard<std::mutex> l(mu_);
  ++made(sizeClass);
  return p;
}

void StagingPool::give(int sizeClass, uint8_t* p) {
  if (free_.size() <= static_cast<size_t>(sizeClass)) free_.resize(static_cast<size_t>(sizeClass) + 1);
  free_[static_cast<size_t>(sizeClass)].push_back(p);
}

}  // namespace chorus
