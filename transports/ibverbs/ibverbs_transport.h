// The ibverbs transport: per peer, CHORUS_IB_QPS_PER_PEER reliable-connected queue pairs on one port, driven by
// the protocol engine (engine.h), with a TCP connection beside them that carries the queue pairs' handshake and
// then watches the peer (it closes when the peer's process dies). Note [ibverbs connections] in
// ibverbs_transport.cc has the setup; Note [ibverbs protocol] in engine.cc the data path.
#pragma once

#include <memory>

#include "transports/ibverbs/hca_spec.h"
#include "transports/ibverbs/protocol.h"
#include "transports/ibverbs/qp_attrs.h"
#include "transports/transport.h"

namespace chorus::transport::ibverbs {

struct Settings {
  ChannelConfig channel;
  QpSettings qp;
  HcaSpec hca;
  int gidIndex = -1;         // CHORUS_IB_GID_INDEX; -1 chooses (gid_select.h)
  size_t regCacheBytes = 0;  // CHORUS_IB_REG_CACHE_MB
};

// setup must outlive the transport; its peers are read when connect/accept run.
std::unique_ptr<Transport> create(const Setup& setup, const Settings& settings);

}  // namespace chorus::transport::ibverbs
