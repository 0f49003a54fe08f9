#include "transports/ibverbs/qp_attrs.h"

#include <algorithm>
#include <cstring>

namespace chorus::transport::ibverbs {

Transition toInit(const LocalPort& local) {
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  init.pkey_index = 0;
  init.port_num = local.port;
  init.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;  // the peer writes rendezvous payloads
  return {IBV_QPS_INIT, init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS};
}

std::vector<Transition> toRts(const LocalPort& local, uint32_t localPsn, const RemoteQp& remote, const QpSettings& s) {
  std::vector<Transition> steps;

  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  rtr.path_mtu = std::min(local.mtu, remote.mtu);
  rtr.dest_qp_num = remote.qpn;
  rtr.rq_psn = remote.psn;
  rtr.max_dest_rd_atomic = 1;  // no RDMA READ in this protocol; 1 is the least the verbs accept everywhere
  rtr.min_rnr_timer = uint8_t(s.minRnrTimer);
  rtr.ah_attr.port_num = local.port;
  rtr.ah_attr.sl = uint8_t(s.serviceLevel);
  if (local.ethernet) {
    rtr.ah_attr.is_global = 1;
    std::memcpy(rtr.ah_attr.grh.dgid.raw, remote.gid.data(), 16);
    rtr.ah_attr.grh.sgid_index = uint8_t(local.gidIndex);
    rtr.ah_attr.grh.hop_limit = 255;
    rtr.ah_attr.grh.traffic_class = uint8_t(s.trafficClass);
  } else {
    rtr.ah_attr.is_global = 0;
    rtr.ah_attr.dlid = remote.lid;
  }
  steps.push_back({IBV_QPS_RTR, rtr,
                   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER});

  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  rts.sq_psn = localPsn;
  rts.timeout = uint8_t(s.timeout);
  rts.retry_cnt = uint8_t(s.retryCount);
  rts.rnr_retry = uint8_t(s.rnrRetry);
  rts.max_rd_atomic = 1;
  steps.push_back({IBV_QPS_RTS, rts,
                   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                       IBV_QP_MAX_QP_RD_ATOMIC});
  return steps;
}

const char* stateName(ibv_qp_state s) {
  switch (s) {
    case IBV_QPS_RESET: return "RESET";
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS";
    case IBV_QPS_SQD: return "SQD";
    case IBV_QPS_SQE: return "SQE";
    case IBV_QPS_ERR: return "ERR";
    default: return "UNKNOWN";
  }
}

}  // namespace chorus::transport::ibverbs
