// Two ibverbs protocol engines (transports/ibverbs/engine.h) wired back to back through a memory fabric that
// behaves as reliable-connected queue pairs do (each queue pair delivers in order, queue pairs interleave at random,
// a SEND takes the peer's next posted receive) and that checks what hardware would: a SEND with no receive posted
// (an overrun: the credits failed), keys and bounds of every local and remote access, buffers that must still be
// alive when the transfer runs. Shared by test_ibverbs_engine.cc and the fuzz target of the engine's messages.
#pragma once

#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "lib/base/error.h"
#include "transports/ibverbs/engine.h"

namespace chorus::test::ibverbs {

using namespace chorus::transport::ibverbs;

// One side's memory registrations: keys name regions, as a protection domain's do. A registration for writing
// fails on memory that cannot be written, as ibv_reg_mr does, and only such a registration may be written to.
class FakeNic : public Registrar {
 public:
  Registration registerMemory(uintptr_t base, size_t length, Access access) override {
    if (access == Access::Write && !writable(base, length))
      fail(chorusSystemError, "ibv_reg_mr for writing of read-only memory at {:#x}: Bad address", base);
    Registration r{base, length, next_, next_ + 1000000, nullptr, access};
    ++next_;
    regions_[r.lkey] = r;
    return r;
  }
  void deregister(const Registration& r) noexcept override { regions_.erase(r.lkey); }
  // write: the access writes the region (a receive's or a remote write's target).
  bool covers(uint32_t key, bool remote, uintptr_t addr, size_t len, bool write) const {
    auto it = regions_.find(remote ? key - 1000000 : key);
    if (it == regions_.end()) return false;
    const Registration& r = it->second;
    return addr >= r.base && addr + len <= r.base + r.length && (!write || r.access == Access::Write);
  }
  size_t regions() const { return regions_.size(); }

 private:
  // Whether every byte of [base, base+length) lies in a writable mapping of this process (its pages may reach
  // past the buffer, so they are looked up, not touched).
  static bool writable(uintptr_t base, size_t length) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    uintptr_t at = base;
    const uintptr_t end = base + length;
    while (at < end && std::getline(maps, line)) {  // in address order
      unsigned long lo = 0, hi = 0;
      char perms[5] = {};
      if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) != 3 || hi <= at) continue;
      if (lo > at || perms[1] != 'w') return false;
      at = hi;
    }
    return at >= end;
  }

  uint32_t next_ = 1;
  std::map<uint32_t, Registration> regions_;
};

struct Wqe {
  uint64_t wrId;
  void* addr;
  size_t len;
  uint32_t lkey;
};

struct WireOp {
  bool write;
  uint64_t wrId;
  const void* addr;
  size_t len;
  uint32_t lkey;
  std::optional<std::vector<uint8_t>> inlined;
  uint64_t raddr = 0;
  uint32_t rkey = 0;
  bool withImm = false;
  uint32_t imm = 0;
};

class Pair;

class MemoryFabric : public Fabric {
 public:
  MemoryFabric(Pair& pair, int side) : pair_(pair), side_(side) {}
  size_t maxInline() const override { return 128; }
  void postSend(int qp, uint64_t wrId, const void* addr, size_t len, uint32_t lkey, bool inlined) override;
  void postWrite(int qp, uint64_t wrId, const void* addr, size_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                 bool withImm, uint32_t imm) override;
  void postRecv(int qp, uint64_t wrId, void* addr, size_t len, uint32_t lkey) override;

 private:
  Pair& pair_;
  int side_;
};

// Two ranks' channels and the wire between them.
class Pair {
 public:
  explicit Pair(const ChannelConfig& config, unsigned seed = 1, size_t cacheBytes = 64 << 20)
      : config_(config), rng_(seed) {
    for (int s = 0; s < 2; ++s) {
      rq_[s].resize(size_t(config.qps));
      wire_[s].resize(size_t(config.qps));
      fabric_[s].emplace(*this, s);
      cache_[s].emplace(nic_[s], cacheBytes);
    }
    for (int s = 0; s < 2; ++s)
      ch_[s].emplace(config, *fabric_[s], nic_[s], *cache_[s], fmt::format("rank {}", s),
                     fmt::format("rank {}", 1 - s));
    for (int s = 0; s < 2; ++s) ch_[s]->start();
  }

  Channel& operator[](int s) { return *ch_[s]; }

  // Runs the wire one step: one work request (of a queue pair picked at random) executes, then both sides take
  // their completions and advance. False when nothing was in flight.
  bool step() {
    std::vector<std::pair<int, int>> busy;
    for (int s = 0; s < 2; ++s)
      for (int q = 0; q < config_.qps; ++q)
        if (!wire_[s][size_t(q)].empty()) busy.push_back({s, q});
    if (!busy.empty()) {
      auto [s, q] = busy[std::uniform_int_distribution<size_t>(0, busy.size() - 1)(rng_)];
      WireOp op = std::move(wire_[s][size_t(q)].front());
      wire_[s][size_t(q)].pop_front();
      execute(s, q, op);
    }
    for (int s = 0; s < 2; ++s) {
      while (!cq_[s].empty()) {
        Completion c = cq_[s].front();
        cq_[s].pop_front();
        ch_[s]->onCompletion(c);
      }
      ch_[s]->advance();
    }
    return !busy.empty();
  }

  // Steps until done() holds; false if the wire went idle (or the bound passed) first.
  template <typename F>
  bool runUntil(F done, int maxSteps = 1000000) {
    for (int i = 0; i < maxSteps; ++i) {
      if (done()) return true;
      if (!step() && !done()) {
        // Nothing in flight: one more round of advance may post something; if not, it is stuck.
        if (!step()) return done();
      }
    }
    return done();
  }

  void injectFailure(int side, const std::string& status) {
    Completion c;
    c.ok = false;
    c.kind = Completion::Kind::Send;
    c.status = status;
    cq_[side].push_back(c);
  }

  // Delivers bytes to side's queue pair 0 as if the peer had sent them (a SEND into its next posted receive).
  void injectMessage(int side, const std::vector<uint8_t>& bytes) {
    if (rq_[side][0].empty()) return;
    Wqe w = rq_[side][0].front();
    rq_[side][0].pop_front();
    if (!bytes.empty()) std::memcpy(w.addr, bytes.data(), std::min(bytes.size(), w.len));
    Completion c;
    c.kind = Completion::Kind::Recv;
    c.wrId = w.wrId;
    c.bytes = uint32_t(std::min(bytes.size(), w.len));
    cq_[side].push_back(c);
  }

  // Delivers a write with immediate to side's queue pair qp, as if the peer had written its last piece.
  void injectImm(int side, int qp, uint32_t imm) {
    if (rq_[side][size_t(qp)].empty()) return;
    Wqe w = rq_[side][size_t(qp)].front();
    rq_[side][size_t(qp)].pop_front();
    Completion c;
    c.kind = Completion::Kind::RecvImm;
    c.qp = qp;
    c.wrId = w.wrId;
    c.imm = imm;
    cq_[side].push_back(c);
  }

  const std::string& violation() const { return violation_; }
  FakeNic& nic(int s) { return nic_[s]; }
  RegCache& cache(int s) { return *cache_[s]; }
  size_t postedReceives(int s, int qp) const { return rq_[s][size_t(qp)].size(); }

  void post(int side, int qp, WireOp op) { wire_[side][size_t(qp)].push_back(std::move(op)); }
  void postRecv(int side, int qp, Wqe w) {
    if (w.len > 0 && !nic_[side].covers(w.lkey, false, reinterpret_cast<uintptr_t>(w.addr), w.len, true))
      note("a receive posted with a key that does not cover its buffer");
    rq_[side][size_t(qp)].push_back(w);
  }

 private:
  void note(const std::string& v) {
    if (violation_.empty()) violation_ = v;
  }

  void execute(int s, int q, const WireOp& op) {
    const int peer = 1 - s;
    const uint8_t* src = op.inlined ? op.inlined->data() : static_cast<const uint8_t*>(op.addr);
    if (!op.inlined && op.len > 0 && !nic_[s].covers(op.lkey, false, reinterpret_cast<uintptr_t>(op.addr), op.len, false))
      note("a local buffer was not registered (or no longer) when its transfer ran");
    Completion mine;
    mine.qp = q;
    mine.wrId = op.wrId;
    if (!op.write) {
      mine.kind = Completion::Kind::Send;
      auto& rq = rq_[peer][size_t(q)];
      if (rq.empty()) {
        note(fmt::format("side {} overran side {}'s receive queue {} (the credits failed)", s, peer, q));
        return;
      }
      Wqe w = rq.front();
      rq.pop_front();
      if (op.len > w.len) note("a SEND longer than the receive it landed in");
      std::memcpy(w.addr, src, std::min(op.len, w.len));
      Completion theirs;
      theirs.kind = Completion::Kind::Recv;
      theirs.qp = q;
      theirs.wrId = w.wrId;
      theirs.bytes = uint32_t(op.len);
      cq_[peer].push_back(theirs);
    } else {
      mine.kind = Completion::Kind::Write;
      if (!nic_[peer].covers(op.rkey, true, op.raddr, op.len, true)) {
        note("an RDMA write outside the remote key's region");
        return;
      }
      if (op.len > 0) std::memcpy(reinterpret_cast<void*>(op.raddr), src, op.len);
      if (op.withImm) {
        auto& rq = rq_[peer][size_t(q)];
        if (rq.empty()) {
          note(fmt::format("side {}'s write with immediate found no receive on side {}'s queue pair {}", s, peer, q));
          return;
        }
        Wqe w = rq.front();
        rq.pop_front();
        Completion theirs;
        theirs.kind = Completion::Kind::RecvImm;
        theirs.qp = q;
        theirs.wrId = w.wrId;
        theirs.bytes = uint32_t(op.len);
        theirs.imm = op.imm;
        cq_[peer].push_back(theirs);
      }
    }
    cq_[s].push_back(mine);
  }

  ChannelConfig config_;
  std::mt19937 rng_;
  FakeNic nic_[2];
  std::optional<MemoryFabric> fabric_[2];
  std::optional<RegCache> cache_[2];
  std::optional<Channel> ch_[2];
  std::vector<std::deque<Wqe>> rq_[2];
  std::vector<std::deque<WireOp>> wire_[2];
  std::deque<Completion> cq_[2];
  std::string violation_;
};

inline void MemoryFabric::postSend(int qp, uint64_t wrId, const void* addr, size_t len, uint32_t lkey, bool inlined) {
  WireOp op{false, wrId, addr, len, lkey, std::nullopt};
  if (inlined) op.inlined.emplace(static_cast<const uint8_t*>(addr), static_cast<const uint8_t*>(addr) + len);
  pair_.post(side_, qp, std::move(op));
}

inline void MemoryFabric::postWrite(int qp, uint64_t wrId, const void* addr, size_t len, uint32_t lkey, uint64_t raddr,
                             uint32_t rkey, bool withImm, uint32_t imm) {
  pair_.post(side_, qp, WireOp{true, wrId, addr, len, lkey, std::nullopt, raddr, rkey, withImm, imm});
}

inline void MemoryFabric::postRecv(int qp, uint64_t wrId, void* addr, size_t len, uint32_t lkey) {
  pair_.postRecv(side_, qp, Wqe{wrId, addr, len, lkey});
}

// Small numbers, so that tests and fuzzing reach every limit: credits run out, messages are split over queue
// pairs and into several writes per queue pair.
inline ChannelConfig smallConfig(int qps = 1) {
  ChannelConfig c;
  c.qps = qps;
  c.eagerBytes = 256;
  c.credits = 8;
  c.advertised = 2;
  c.stripeBytes = 1024;
  c.maxWriteBytes = 4096;
  c.sendQueueDepth = 16;
  return c;
}

}  // namespace chorus::test::ibverbs
