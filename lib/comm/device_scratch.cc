#include "lib/comm/device_scratch.h"

#include <algorithm>

#include "lib/base/error.h"

namespace chorus {

DeviceScratch::Grant::~Grant() {
  for (const Block& b : blocks_) device_->release(b.p);
}

DeviceScratch::~DeviceScratch() {
  for (const Slot& s : slots_)
    if (s.p != nullptr) device_->release(s.p);
}

void DeviceScratch::checkSlot(int slot) {
  if (slot < 0 || slot >= kSlots)
    fail(chorusInternalError, "scratch slot {} is not one of the {} there are", slot, kSlots);
}

DeviceScratch::Slot& DeviceScratch::slot(int s) {
  checkSlot(s);
  return slots_[static_cast<size_t>(s)];
}

DeviceScratch::Grant DeviceScratch::grow(const std::vector<size_t>& bytesBySlot) {
  Grant g;
  g.device_ = device_;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (size_t s = 0; s < bytesBySlot.size(); ++s) {
      Slot& sl = slot(static_cast<int>(s));
      if (bytesBySlot[s] <= sl.planned) continue;
      g.blocks_.push_back(
          {.slot = static_cast<int>(s), .p = nullptr, .bytes = bytesBySlot[s], .plannedBefore = sl.planned});
      sl.planned = bytesBySlot[s];
    }
  }
  // Outside the lock: an allocation may wait for the device, whose held streams the executing thread releases,
  // and that thread takes the lock in get().
  for (Grant::Block& b : g.blocks_) {
    try {
      b.p = device_->allocate(b.bytes);
    } catch (const Error& e) {
      std::lock_guard<std::mutex> l(mu_);
      for (const Grant::Block& u : g.blocks_)
        if (u.p == nullptr && slot(u.slot).planned == u.bytes) slot(u.slot).planned = u.plannedBefore;
      std::erase_if(g.blocks_, [](const Grant::Block& u) { return u.p == nullptr; });
      g.failure_ = e;
      break;
    }
  }
  return g;
}

void DeviceScratch::adopt(Grant& grant) {
  if (grant.failure_) {
    const Error e = *grant.failure_;
    grant.failure_.reset();
    throw e;
  }
  for (const Grant::Block& b : grant.blocks_) {
    Slot* sl = &slot(b.slot);
    if (sl->bytes >= b.bytes) {  // a call that was not planned grew it meanwhile
      device_->release(b.p);
      continue;
    }
    if (sl->p != nullptr) device_->release(sl->p);
    sl->p = b.p;
    sl->bytes = b.bytes;
  }
  grant.blocks_.clear();
}

uint8_t* DeviceScratch::get(size_t bytes, int s) {
  Slot* sl = &slot(s);
  if (sl->bytes < bytes) {
    {
      std::lock_guard<std::mutex> l(mu_);
      sl->planned = std::max(sl->planned, bytes);
    }
    if (sl->p != nullptr) device_->release(sl->p);
    sl->p = nullptr;
    sl->bytes = 0;
    sl->p = device_->allocate(bytes);
    sl->bytes = bytes;
  }
  return static_cast<uint8_t*>(sl->p);
}

}  // namespace chorus
