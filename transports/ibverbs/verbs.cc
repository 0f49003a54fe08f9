#include "transports/ibverbs/verbs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "lib/base/error.h"
#include "lib/base/log.h"
#include "transports/ibverbs/gid_select.h"

namespace chorus::transport::ibverbs {

namespace {

struct DeviceList {
  ibv_device** list = nullptr;
  int n = 0;
  int err = 0;
  DeviceList() {
    errno = 0;
    list = ibv_get_device_list(&n);
    err = errno;
    if (list == nullptr) n = 0;
  }
  ~DeviceList() {
    if (list != nullptr) ibv_free_device_list(list);
  }
};

const char* portStateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "NOP";
  }
}

std::string memlockLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_MEMLOCK, &r) != 0) return "unknown";
  if (r.rlim_cur == RLIM_INFINITY) return "unlimited";
  return fmt::format("{} KiB", r.rlim_cur / 1024);
}

}  // namespace

std::string probeDevices() {
  DeviceList d;
  if (d.list == nullptr)
    return fmt::format("no RDMA device (ibv_get_device_list: {})", std::strerror(d.err != 0 ? d.err : ENODEV));
  if (d.n == 0) return "no RDMA device (ibv_get_device_list found none)";
  return "";
}

std::vector<PortInfo> listPorts() {
  DeviceList d;
  std::vector<PortInfo> out;
  for (int i = 0; i < d.n; ++i) {
    ibv_context* ctx = ibv_open_device(d.list[i]);
    if (ctx == nullptr) continue;
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) == 0)
      for (int p = 1; p <= attr.phys_port_cnt; ++p) {
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, uint8_t(p), &pa) != 0) continue;
        out.push_back({ibv_get_device_name(d.list[i]), p, pa.state == IBV_PORT_ACTIVE, portStateName(pa.state),
                       pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand"});
      }
    ibv_close_device(ctx);
  }
  return out;
}

Port::Port(const PortInfo& info, int gidIndex, int cqDepth) {
  const std::string where = fmt::format("{} port {}", info.device, info.port);
  DeviceList d;
  for (int i = 0; i < d.n && ctx_ == nullptr; ++i)
    if (info.device == ibv_get_device_name(d.list[i])) ctx_ = ibv_open_device(d.list[i]);
  if (ctx_ == nullptr) fail(chorusSystemError, "ibverbs: cannot open {}: {}", info.device, std::strerror(errno));
  try {
    ibv_port_attr pa{};
    if (int e = ibv_query_port(ctx_, uint8_t(info.port), &pa); e != 0)
      fail(chorusSystemError, "ibverbs: ibv_query_port({}) failed: {}", where, std::strerror(e));
    if (pa.state != IBV_PORT_ACTIVE)
      fail(chorusSystemError, "ibverbs: {} is {}, not ACTIVE", where, portStateName(pa.state));
    local_.port = uint8_t(info.port);
    local_.ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    local_.mtu = pa.active_mtu;
    lid_ = pa.lid;

    std::vector<ibv_gid_entry> valid(size_t(std::max(pa.gid_tbl_len, 1)));
    ssize_t nvalid = ibv_query_gid_table(ctx_, valid.data(), valid.size(), 0);
    std::vector<GidEntry> table(size_t(pa.gid_tbl_len));
    for (size_t i = 0; i < table.size(); ++i) table[i].index = int(i);
    for (ssize_t i = 0; i < nvalid; ++i) {
      const ibv_gid_entry& e = valid[size_t(i)];
      if (e.port_num != uint32_t(info.port) || e.gid_index >= table.size()) continue;
      GidEntry& g = table[e.gid_index];
      std::memcpy(g.gid.data(), e.gid.raw, 16);
      g.type = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? GidType::RoCEv2
               : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? GidType::RoCEv1
                                                     : GidType::InfiniBand;
    }
    local_.gidIndex = selectGid(table, local_.ethernet, gidIndex, where);
    gid_ = table[size_t(local_.gidIndex)].gid;
    name_ = local_.ethernet ? fmt::format("{} (RoCE, GID {} {})", where, local_.gidIndex, gidText(gid_))
                            : fmt::format("{} (InfiniBand, lid {})", where, lid_);

    ibv_device_attr_ex ex{};
    if (ibv_query_device_ex(ctx_, nullptr, &ex) == 0) {
      const uint32_t rc = ex.odp_caps.per_transport_caps.rc_odp_caps;
      const uint32_t need = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE;
      odp_ = (ex.odp_caps.general_caps & IBV_ODP_SUPPORT) && (rc & need) == need;
    }

    pd_ = ibv_alloc_pd(ctx_);
    if (pd_ == nullptr) fail(chorusSystemError, "ibverbs: ibv_alloc_pd on {} failed: {}", where, std::strerror(errno));
    channel_ = ibv_create_comp_channel(ctx_);
    if (channel_ == nullptr)
      fail(chorusSystemError, "ibverbs: ibv_create_comp_channel on {} failed: {}", where, std::strerror(errno));
    fcntl(channel_->fd, F_SETFL, fcntl(channel_->fd, F_GETFL) | O_NONBLOCK);
    fcntl(ctx_->async_fd, F_SETFL, fcntl(ctx_->async_fd, F_GETFL) | O_NONBLOCK);
    ibv_device_attr dev{};
    if (ibv_query_device(ctx_, &dev) == 0 && dev.max_cqe > 0 && cqDepth > dev.max_cqe) {
      CHORUS_WARN(kNet, "ibverbs: {} completions may be outstanding at once, but {} holds at most {}: a burst beyond "
                  "it would overrun the completion queue (fewer ranks per port, or CHORUS_IB_QPS_PER_PEER=1)",
                  cqDepth, info.device, dev.max_cqe);
      cqDepth = dev.max_cqe;
    }
    cq_ = ibv_create_cq(ctx_, cqDepth, nullptr, channel_, 0);
    if (cq_ == nullptr)
      fail(chorusSystemError, "ibverbs: ibv_create_cq({} entries) on {} failed: {}", cqDepth, where,
           std::strerror(errno));
  } catch (...) {
    release();
    throw;
  }
}

Port::~Port() { release(); }

void Port::release() noexcept {
  if (cq_ != nullptr) {
    if (unacked_ > 0) ibv_ack_cq_events(cq_, unacked_);
    ibv_destroy_cq(std::exchange(cq_, nullptr));
  }
  if (channel_ != nullptr) ibv_destroy_comp_channel(std::exchange(channel_, nullptr));
  if (pd_ != nullptr) ibv_dealloc_pd(std::exchange(pd_, nullptr));
  if (ctx_ != nullptr) ibv_close_device(std::exchange(ctx_, nullptr));
}

void Port::armEvents() {
  if (int e = ibv_req_notify_cq(cq_, 0); e != 0)
    fail(chorusSystemError, "ibverbs: ibv_req_notify_cq on {} failed: {}", name_, std::strerror(e));
}

void Port::drainEvents() {
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  while (ibv_get_cq_event(channel_, &cq, &ctx) == 0) ++unacked_;
  // Acknowledging takes a lock; done in batches.
  if (unacked_ >= 64) {
    ibv_ack_cq_events(cq_, unacked_);
    unacked_ = 0;
  }
}

bool Port::nextAsyncEvent(AsyncEvent* out) {
  ibv_async_event e{};
  if (ibv_get_async_event(ctx_, &e) != 0) return false;
  out->type = e.event_type;
  switch (e.event_type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      out->qpNum = e.element.qp->qp_num;
      break;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
      out->port = e.element.port_num;
      break;
    default:
      break;
  }
  ibv_ack_async_event(&e);
  return true;
}

Registration VerbsRegistrar::registerMemory(uintptr_t base, size_t length, Access access) {
  int flags = access == Access::Write ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE : 0;
  if (onDemand_) flags |= IBV_ACCESS_ON_DEMAND;
  ibv_mr* mr = ibv_reg_mr(port_.pd(), reinterpret_cast<void*>(base), length, flags);
  if (mr == nullptr) {
    const int err = errno;
    fail(chorusSystemError, "ibverbs: ibv_reg_mr of {} bytes at {:#x} on {} failed: {} (errno {}); the locked-memory "
         "limit is {}: raise it (ulimit -l unlimited, or memlock in /etc/security/limits.conf or the job's launcher)",
         length, base, port_.name(), std::strerror(err), err, memlockLimit());
  }
  return Registration{base, length, mr->lkey, mr->rkey, mr, access};
}

void VerbsRegistrar::deregister(const Registration& r) noexcept {
  if (r.handle != nullptr) ibv_dereg_mr(static_cast<ibv_mr*>(r.handle));
}

QueuePairs::QueuePairs(Port& port, int n, int sendDepth, int recvDepth, std::string peer)
    : port_(port), peer_(std::move(peer)) {
  std::random_device rd;
  try {
    for (int i = 0; i < n; ++i) {
      ibv_qp_init_attr a{};
      a.send_cq = port.cq();
      a.recv_cq = port.cq();
      a.qp_type = IBV_QPT_RC;
      a.cap.max_send_wr = uint32_t(sendDepth);
      a.cap.max_recv_wr = uint32_t(recvDepth);
      a.cap.max_send_sge = 1;
      a.cap.max_recv_sge = 1;
      a.cap.max_inline_data = 128;
      ibv_qp* qp = ibv_create_qp(port.pd(), &a);
      if (qp == nullptr && errno == EINVAL) {  // a device that sends nothing inline (or less): without
        a.cap.max_inline_data = 0;
        qp = ibv_create_qp(port.pd(), &a);
      }
      if (qp == nullptr)
        fail(chorusSystemError, "ibverbs: ibv_create_qp for {} on {} failed: {} ({} send and {} receive work "
             "requests)", peer_, port.name(), std::strerror(errno), sendDepth, recvDepth);
      qps_.push_back(qp);
      psns_.push_back(rd() & 0xffffff);
      maxInline_ = i == 0 ? a.cap.max_inline_data : std::min<size_t>(maxInline_, a.cap.max_inline_data);
      modify(i, toInit(port.local()));
    }
  } catch (...) {
    for (ibv_qp* qp : qps_) ibv_destroy_qp(qp);
    throw;
  }
}

QueuePairs::~QueuePairs() {
  for (ibv_qp* qp : qps_) ibv_destroy_qp(qp);
}

int QueuePairs::indexOf(uint32_t qpNum) const {
  for (size_t i = 0; i < qps_.size(); ++i)
    if (qps_[i]->qp_num == qpNum) return int(i);
  return -1;
}

void QueuePairs::modify(int i, const Transition& t) {
  ibv_qp_attr attr = t.attr;
  if (int e = ibv_modify_qp(qps_[size_t(i)], &attr, t.mask); e != 0)
    fail(chorusSystemError, "ibverbs: queue pair {} to {} on {}: ibv_modify_qp to {} failed: {}", i, peer_,
         port_.name(), stateName(t.to), std::strerror(e));
}

void QueuePairs::connect(const std::vector<RemoteQp>& remote, const QpSettings& settings, bool sendToo) {
  const ibv_qp_state target = sendToo ? IBV_QPS_RTS : IBV_QPS_RTR;
  for (int i = 0; i < size(); ++i)
    for (const Transition& t : toRts(port_.local(), psns_[size_t(i)], remote[size_t(i)], settings))
      if ((t.to == IBV_QPS_RTR && state_ == IBV_QPS_INIT) || (t.to == IBV_QPS_RTS && target == IBV_QPS_RTS))
        modify(i, t);
  state_ = target;
}

void QueuePairs::failPost(const char* what, int qp, int err) const {
  fail(chorusSystemError, "ibverbs: {} on queue pair {} to {} failed: {}", what, qp, peer_, std::strerror(err));
}

void QueuePairs::postSend(int qp, uint64_t wrId, const void* addr, size_t len, uint32_t lkey, bool inlined) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(addr), uint32_t(len), lkey};
  ibv_send_wr wr{};
  wr.wr_id = wrId;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | (inlined ? IBV_SEND_INLINE : 0);
  ibv_send_wr* bad = nullptr;
  if (int e = ibv_post_send(qps_[size_t(qp)], &wr, &bad); e != 0) failPost("ibv_post_send (send)", qp, e);
}

void QueuePairs::postWrite(int qp, uint64_t wrId, const void* addr, size_t len, uint32_t lkey, uint64_t raddr,
                           uint32_t rkey, bool withImm, uint32_t imm) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(addr), uint32_t(len), lkey};
  ibv_send_wr wr{};
  wr.wr_id = wrId;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = withImm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  if (int e = ibv_post_send(qps_[size_t(qp)], &wr, &bad); e != 0) failPost("ibv_post_send (RDMA write)", qp, e);
}

void QueuePairs::postRecv(int qp, uint64_t wrId, void* addr, size_t len, uint32_t lkey) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(addr), uint32_t(len), lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wrId;
  wr.sg_list = len > 0 ? &sge : nullptr;
  wr.num_sge = len > 0 ? 1 : 0;
  ibv_recv_wr* bad = nullptr;
  if (int e = ibv_post_recv(qps_[size_t(qp)], &wr, &bad); e != 0) failPost("ibv_post_recv", qp, e);
}

Completion toCompletion(const ibv_wc& wc, int qpIndex) {
  Completion c;
  c.qp = qpIndex;
  c.wrId = wc.wr_id;
  c.ok = wc.status == IBV_WC_SUCCESS;
  if (!c.ok) {  // its opcode is undefined: the engine names the request by its id
    c.status = fmt::format("{} (vendor error {:#x})", ibv_wc_status_str(wc.status), wc.vendor_err);
    return c;
  }
  switch (wc.opcode) {
    case IBV_WC_SEND: c.kind = Completion::Kind::Send; break;
    case IBV_WC_RDMA_WRITE: c.kind = Completion::Kind::Write; break;
    case IBV_WC_RECV_RDMA_WITH_IMM: c.kind = Completion::Kind::RecvImm; break;
    default: c.kind = Completion::Kind::Recv; break;
  }
  c.bytes = wc.byte_len;
  if (c.kind == Completion::Kind::RecvImm) c.imm = ntohl(wc.imm_data);
  return c;
}

}  // namespace chorus::transport::ibverbs
