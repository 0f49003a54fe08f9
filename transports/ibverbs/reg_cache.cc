#include "transports/ibverbs/reg_cache.h"

#include <algorithm>
#include <iterator>

#include "lib/base/error.h"

namespace chorus::transport::ibverbs {

RegCache::Lease& RegCache::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    cache_ = other.cache_;
    entry_ = std::exchange(other.entry_, nullptr);
  }
  return *this;
}

const Registration& RegCache::Lease::get() const { return entry_->reg; }

void RegCache::Lease::release() noexcept {
  if (entry_ != nullptr) cache_->release(*std::exchange(entry_, nullptr));
}

RegCache::RegCache(Registrar& registrar, size_t capacityBytes, size_t pageBytes)
    : registrar_(registrar), capacity_(capacityBytes), page_(pageBytes) {
  if (pageBytes == 0) fail(chorusInvalidArgument, "RegCache: the page size must be positive");
}

RegCache::~RegCache() {
  for (const Entry& e : idle_) registrar_.deregister(e.reg);
  for (const Entry& e : busy_) registrar_.deregister(e.reg);
}

std::pair<uintptr_t, uintptr_t> RegCache::pages(const void* p, size_t len) const {
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = begin + std::max<size_t>(len, 1);
  return {begin - begin % page_, (end + page_ - 1) / page_ * page_};
}

RegCache::Lease RegCache::acquire(const void* p, size_t len, Access access) {
  const auto [begin, end] = pages(p, len);
  auto it = byBase_.upper_bound(begin);
  if (it != byBase_.begin()) {
    Entry& e = *std::prev(it)->second;
    if (e.reg.base + e.reg.length >= end && (e.reg.access == Access::Write || access == Access::Read)) {
      ++stats_.hits;
      if (e.users++ == 0) busy_.splice(busy_.end(), idle_, e.self);
      return Lease(this, &e);
    }
  }
  std::list<Entry> fresh(1);  // allocated before registering: once registered, only the map's node is left to fail
  Entry& e = fresh.front();
  e.reg = registrar_.registerMemory(begin, end - begin, access);
  retireOverlapping(begin, end);
  try {
    byBase_.emplace(e.reg.base, &e);
  } catch (...) {
    registrar_.deregister(e.reg);
    throw;
  }
  e.self = fresh.begin();
  e.users = 1;
  busy_.splice(busy_.end(), fresh);
  ++stats_.misses;
  stats_.bytes += e.reg.length;
  trim();
  return Lease(this, &e);
}

void RegCache::invalidate(const void* p, size_t len) {
  const auto [begin, end] = pages(p, len);
  retireOverlapping(begin, end);
}

RegCache::Stats RegCache::stats() const {
  Stats s = stats_;
  s.entries = idle_.size() + busy_.size();
  return s;
}

void RegCache::retireOverlapping(uintptr_t begin, uintptr_t end) {
  auto it = byBase_.lower_bound(begin);
  if (it != byBase_.begin() && std::prev(it)->first + std::prev(it)->second->reg.length > begin) --it;
  while (it != byBase_.end() && it->first < end) {
    Entry& e = *it->second;
    it = byBase_.erase(it);
    if (e.users > 0)
      e.retired = true;
    else
      drop(idle_, e);
  }
}

void RegCache::drop(std::list<Entry>& from, Entry& e) noexcept {
  registrar_.deregister(e.reg);
  stats_.bytes -= e.reg.length;
  from.erase(e.self);
}

void RegCache::trim() noexcept {
  while (stats_.bytes > capacity_ && !idle_.empty()) {
    Entry& e = idle_.front();
    byBase_.erase(e.reg.base);
    drop(idle_, e);
    ++stats_.evictions;
  }
}

void RegCache::release(Entry& e) noexcept {
  if (--e.users > 0) return;
  if (e.retired) {
    drop(busy_, e);
    return;
  }
  idle_.splice(idle_.end(), busy_, e.self);
  trim();
}

}  // namespace chorus::transport::ibverbs
