// The ibverbs transport's queue pair bring-up (transports/ibverbs/qp_attrs.h) without a device: each transition
// sets the attributes the verbs require of it (its mask), with the transport's timeouts and retry counts, and
// addresses the peer by LID on InfiniBand and by GID on RoCE.
#include <gtest/gtest.h>

#include "transports/ibverbs/qp_attrs.h"

using namespace chorus::transport::ibverbs;

namespace {

RemoteQp remote() {
  RemoteQp r;
  r.qpn = 0x1234;
  r.psn = 0xabcde;
  r.lid = 17;
  for (int i = 0; i < 16; ++i) r.gid[size_t(i)] = uint8_t(i + 1);
  r.mtu = IBV_MTU_2048;
  return r;
}

}  // namespace

TEST(IbverbsQp, InitAllowsRemoteWritesOnTheChosenPort) {
  LocalPort l;
  l.port = 2;
  Transition t = toInit(l);
  EXPECT_EQ(t.to, IBV_QPS_INIT);
  EXPECT_EQ(t.attr.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(t.attr.port_num, 2);
  EXPECT_EQ(t.attr.qp_access_flags, unsigned(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  EXPECT_EQ(t.mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

TEST(IbverbsQp, ReadyToReceiveThenReadyToSendWithTheSettingsSpelledOut) {
  LocalPort l;
  l.mtu = IBV_MTU_4096;
  QpSettings s;
  s.timeout = 16;
  s.retryCount = 5;
  s.rnrRetry = 6;
  s.minRnrTimer = 9;
  s.serviceLevel = 3;
  auto steps = toRts(l, 0x777, remote(), s);
  ASSERT_EQ(steps.size(), 2u);
  const Transition& rtr = steps[0];
  EXPECT_EQ(rtr.to, IBV_QPS_RTR);
  EXPECT_EQ(rtr.attr.dest_qp_num, 0x1234u);
  EXPECT_EQ(rtr.attr.rq_psn, 0xabcdeu);
  EXPECT_EQ(rtr.attr.path_mtu, IBV_MTU_2048);  // the smaller of the two ports'
  EXPECT_EQ(rtr.attr.min_rnr_timer, 9);
  EXPECT_EQ(rtr.attr.ah_attr.sl, 3);
  EXPECT_EQ(rtr.attr.ah_attr.is_global, 0);
  EXPECT_EQ(rtr.attr.ah_attr.dlid, 17);
  for (int need : {IBV_QP_STATE, IBV_QP_AV, IBV_QP_PATH_MTU, IBV_QP_DEST_QPN, IBV_QP_RQ_PSN,
                   IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_MIN_RNR_TIMER})
    EXPECT_TRUE(rtr.mask & need) << need;
  const Transition& rts = steps[1];
  EXPECT_EQ(rts.to, IBV_QPS_RTS);
  EXPECT_EQ(rts.attr.sq_psn, 0x777u);
  EXPECT_EQ(rts.attr.timeout, 16);
  EXPECT_EQ(rts.attr.retry_cnt, 5);
  EXPECT_EQ(rts.attr.rnr_retry, 6);
  for (int need : {IBV_QP_STATE, IBV_QP_TIMEOUT, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_SQ_PSN,
                   IBV_QP_MAX_QP_RD_ATOMIC})
    EXPECT_TRUE(rts.mask & need) << need;
}

TEST(IbverbsQp, RoCEAddressesThePeerByGidThroughTheChosenIndex) {
  LocalPort l;
  l.ethernet = true;
  l.gidIndex = 3;
  l.mtu = IBV_MTU_1024;
  QpSettings s;
  s.trafficClass = 106;
  auto steps = toRts(l, 1, remote(), s);
  const ibv_ah_attr& ah = steps[0].attr.ah_attr;
  EXPECT_EQ(ah.is_global, 1);
  EXPECT_EQ(ah.grh.sgid_index, 3);
  EXPECT_EQ(ah.grh.traffic_class, 106);
  EXPECT_EQ(ah.grh.hop_limit, 255);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(ah.grh.dgid.raw[i], i + 1);
  EXPECT_EQ(steps[0].attr.path_mtu, IBV_MTU_1024);
}

TEST(IbverbsQp, DefaultsDetectASilentPeerWithinASecond) {
  QpSettings s;
  // Each try waits 4.096 us * 2^timeout; a peer that stopped answering fails the transfer after retryCount tries.
  const double seconds = 4.096e-6 * double(1 << s.timeout) * (s.retryCount + 1);
  EXPECT_LT(seconds, 1.0);
  EXPECT_EQ(s.rnrRetry, 7);
}
