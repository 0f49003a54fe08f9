// The verbs calls of the ibverbs transport, and only they: finding devices and ports, opening one port (its
// protection domain, completion queue and channel), registering memory, and one peer's reliable-connected queue
// pairs as the Fabric the protocol engine posts to. Everything here needs a device; the policies it applies
// (hca_spec.h, gid_select.h, qp_attrs.h) and the protocol (engine.h) are tested without one.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "transports/ibverbs/fabric.h"
#include "transports/ibverbs/hca_spec.h"
#include "transports/ibverbs/qp_attrs.h"
#include "transports/ibverbs/reg_cache.h"

namespace chorus::transport::ibverbs {

// "" when this process sees an RDMA device, else why not: "no RDMA device (ibv_get_device_list: ...)".
std::string probeDevices();

// Every port of every device, with its state and link layer.
std::vector<PortInfo> listPorts();

// One opened port and what every connection through it shares.
class Port {
 public:
  // cqDepth: completions the queue holds (every work request of every peer's queue pairs). gidIndex: -1 chooses.
  Port(const PortInfo& info, int gidIndex, int cqDepth);
  ~Port();
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  const std::string& name() const { return name_; }  // "mlx5_0 port 1 (InfiniBand, lid 5)"
  ibv_context* context() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  ibv_cq* cq() const { return cq_; }
  int eventFd() const { return channel_->fd; }
  const LocalPort& local() const { return local_; }
  uint16_t lid() const { return lid_; }
  const std::array<uint8_t, 16>& gid() const { return gid_; }
  // On-demand paging for the memory a peer writes and the memory sent from: a registration follows the process's
  // page tables, so one made for memory since freed and mapped again is never stale.
  bool onDemandPaging() const { return odp_; }

  // Asks for an event on the channel at the next completion (ibv_req_notify_cq), after consuming one.
  void armEvents();
  // Takes and acknowledges the channel's pending events; never blocks (its fd is non-blocking).
  void drainEvents();

  // The device's asynchronous events (a port going down, a queue pair's fatal error): asyncFd() becomes readable
  // when one waits; nextAsyncEvent() takes one without blocking (false when none).
  int asyncFd() const { return ctx_->async_fd; }
  struct AsyncEvent {
    ibv_event_type type;
    uint32_t qpNum = 0;  // for queue pair events
    int port = 0;        // for port events
  };
  bool nextAsyncEvent(AsyncEvent* e);

 private:
  void release() noexcept;

  std::string name_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  LocalPort local_;
  uint16_t lid_ = 0;
  std::array<uint8_t, 16> gid_{};
  bool odp_ = false;
  unsigned unacked_ = 0;
};

// ibv_reg_mr in a protection domain; a failure names the port, the range and errno, and suggests ulimit -l.
class VerbsRegistrar : public Registrar {
 public:
  VerbsRegistrar(const Port& port, bool onDemand) : port_(port), onDemand_(onDemand) {}
  Registration registerMemory(uintptr_t base, size_t length, Access access) override;
  void deregister(const Registration& r) noexcept override;

 private:
  const Port& port_;
  bool onDemand_;
};

// One peer's queue pairs, created in RESET and moved to INIT; connect() takes them on to RTR or RTS.
class QueuePairs : public Fabric {
 public:
  QueuePairs(Port& port, int n, int sendDepth, int recvDepth, std::string peer);
  ~QueuePairs() override;
  QueuePairs(const QueuePairs&) = delete;
  QueuePairs& operator=(const QueuePairs&) = delete;

  int size() const { return int(qps_.size()); }
  uint32_t qpn(int i) const { return qps_[size_t(i)]->qp_num; }
  uint32_t psn(int i) const { return psns_[size_t(i)]; }
  // The index of a queue pair of this set by its number, or -1.
  int indexOf(uint32_t qpNum) const;
  // To RTR (receiving), and on to RTS (sending too) when sendToo; a later call finishes what an earlier began.
  void connect(const std::vector<RemoteQp>& remote, const QpSettings& settings, bool sendToo);

  size_t maxInline() const override { return maxInline_; }
  void postSend(int qp, uint64_t wrId, const void* addr, size_t len, uint32_t lkey, bool inlined) override;
  void postWrite(int qp, uint64_t wrId, const void* addr, size_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                 bool withImm, uint32_t imm) override;
  void postRecv(int qp, uint64_t wrId, void* addr, size_t len, uint32_t lkey) override;

 private:
  void modify(int i, const Transition& t);
  [[noreturn]] void failPost(const char* what, int qp, int err) const;

  Port& port_;
  std::string peer_;
  std::vector<ibv_qp*> qps_;
  std::vector<uint32_t> psns_;
  ibv_qp_state state_ = IBV_QPS_INIT;
  size_t maxInline_ = 0;
};

// Turns a work completion into the engine's Completion (status text included).
Completion toCompletion(const ibv_wc& wc, int qpIndex);

}  // namespace chorus::transport::ibverbs
