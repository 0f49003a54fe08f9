// How a reliable-connected queue pair is brought up: RESET -> INIT -> RTR (ready to receive) -> RTS (ready to
// send), with every attribute each step sets, computed apart from the ibv_modify_qp calls so that a test checks
// them without a device. The timeouts and retry counts are the transport's settings (CHORUS_IB_TIMEOUT, ...).
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus::transport::ibverbs {

struct QpSettings {
  int timeout = 14;      // local ACK timeout: 4.096 us * 2^timeout per try (14: 67 ms)
  int retryCount = 7;    // tries before a silent peer fails the work request (7: ~0.5 s in all with timeout 14)
  int rnrRetry = 7;      // receiver-not-ready retries (7: without limit; the credits keep receives posted)
  int minRnrTimer = 12;  // the RNR NAK delay this side asks for (12: 0.64 ms)
  int serviceLevel = 0;  // InfiniBand SL (CHORUS_IB_SL)
  int trafficClass = 0;  // GRH traffic class (CHORUS_IB_TC), RoCE's DSCP/ECN bits
};

// This side's port, as the queue pair's address vector needs it.
struct LocalPort {
  uint8_t port = 1;
  int gidIndex = 0;
  bool ethernet = false;  // RoCE: addressed by GID (global route), not LID
  ibv_mtu mtu = IBV_MTU_4096;
};

// The peer's end, from its handshake.
struct RemoteQp {
  uint32_t qpn = 0, psn = 0;
  uint16_t lid = 0;
  std::array<uint8_t, 16> gid{};
  ibv_mtu mtu = IBV_MTU_4096;
};

struct Transition {
  ibv_qp_state to;
  ibv_qp_attr attr;
  int mask;
};

// RESET -> INIT: needs nothing of the peer; receives may be posted from INIT on, so a side posts its receives
// before it tells the peer its queue pair numbers.
Transition toInit(const LocalPort& local);
// INIT -> RTR -> RTS, once the peer's end is known. The path MTU is the smaller of the two ports'.
std::vector<Transition> toRts(const LocalPort& local, uint32_t localPsn, const RemoteQp& remote, const QpSettings& s);

const char* stateName(ibv_qp_state s);

}  // namespace chorus::transport::ibverbs
