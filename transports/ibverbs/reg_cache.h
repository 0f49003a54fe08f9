// A bounded cache of RDMA memory registrations. Registering memory pins its pages and costs far more than a
// small transfer, so a buffer used again finds its registration here; CHORUS_IB_REG_CACHE_MB bounds what stays
// registered, the least recently used entry not in use going first. Pure: the verbs calls sit behind Registrar,
// so a fake one tests it. Not thread-safe: one thread drives a transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <utility>

namespace chorus::transport::ibverbs {

// What a registration lets the device do with the memory. A send's source needs only to be read, so read-only
// memory (a constant, a file mapped read-only) can be sent; a rendezvous target is written by the peer.
enum class Access : uint8_t { Read, Write };

struct Registration {
  uintptr_t base = 0;
  size_t length = 0;
  uint32_t lkey = 0, rkey = 0;
  void* handle = nullptr;
  Access access = Access::Write;
};

class Registrar {
 public:
  virtual ~Registrar() = default;
  // Registers exactly [base, base+length) (whole pages) for `access` and returns it with its keys; may throw
  // chorus::Error (as for memory that cannot be written when Write is asked).
  virtual Registration registerMemory(uintptr_t base, size_t length, Access access) = 0;
  virtual void deregister(const Registration& r) noexcept = 0;
};

class RegCache {
  struct Entry;

 public:
  // Holds one use of an entry: while any lease on it lives, the entry is neither evicted nor, once invalidated,
  // deregistered. Move-only; must end before its cache.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept : cache_(other.cache_), entry_(other.entry_) { other.entry_ = nullptr; }
    Lease& operator=(Lease&& other) noexcept;
    ~Lease() { release(); }

    // The registration covering the acquired range (it may start before it and end after it). Not on an empty
    // lease (default-constructed, moved from or released).
    const Registration& get() const;
    // Ends the use now; the lease is then empty.
    void release() noexcept;

   private:
    friend class RegCache;
    Lease(RegCache* cache, Entry* entry) : cache_(cache), entry_(entry) {}
    RegCache* cache_ = nullptr;
    Entry* entry_ = nullptr;
  };

  struct Stats {
    uint64_t hits = 0, misses = 0;
    uint64_t evictions = 0;  // entries deregistered to respect the bound
    size_t bytes = 0, entries = 0;  // registered now, in use or not
  };

  RegCache(Registrar& registrar, size_t capacityBytes, size_t pageBytes = 4096);
  ~RegCache();  // deregisters every entry
  RegCache(const RegCache&) = delete;
  RegCache& operator=(const RegCache&) = delete;

  // A registration covering [p, p+len) (len 0: the page at p) for `access`. A cached entry covering the whole range
  // is reused if it allows that access (one for Write serves Read too); otherwise the pages the range spans are
  // registered as a new entry for `access`, which replaces the entries it overlaps
  // (see invalidate). Then entries not in use are deregistered, least recently used first, until the registered
  // bytes fit the bound: entries in use never are, so the total may exceed the bound while they are held. If the
  // registrar throws, the cache is unchanged.
  Lease acquire(const void* p, size_t len, Access access);
  // [p, p+len) (its pages, as acquire counts them) went away or changed mapping: no acquire reuses the entries
  // overlapping it, which are deregistered now if not in use, otherwise when their last lease ends.
  void invalidate(const void* p, size_t len);
  Stats stats() const;

 private:
  struct Entry {
    Registration reg;
    size_t users = 0;
    bool retired = false;  // replaced or invalidated: out of byBase_, deregistered when its last lease ends
    std::list<Entry>::iterator self;  // in idle_ or busy_; moves between them by splice, which never allocates
  };

  // The pages [first, second) that [p, p+len) spans.
  std::pair<uintptr_t, uintptr_t> pages(const void* p, size_t len) const;
  // No acquire reuses the entries overlapping [begin, end) any more: those not in use are deregistered now.
  void retireOverlapping(uintptr_t begin, uintptr_t end);
  void drop(std::list<Entry>& from, Entry& e) noexcept;
  // Evicts entries not in use, least recently used first, until the registered bytes fit the bound.
  void trim() noexcept;
  void release(Entry& e) noexcept;

  Registrar& registrar_;
  size_t capacity_, page_;
  std::list<Entry> idle_;  // not in use, least recently used first
  std::list<Entry> busy_;  // in use, retired or not
  // The reusable entries by base. They never overlap (a new entry retires those it overlaps), so the one that
  // could cover an address is the last starting at or before it.
  std::map<uintptr_t, Entry*> byBase_;
  Stats stats_;
};

}  // namespace chorus::transport::ibverbs
