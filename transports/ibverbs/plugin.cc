// The ibverbs transport's entry in the registry, exported as the plugin table (transports/plugin_export.h).
#include "lib/base/env.h"
#include "lib/base/error.h"
#include "lib/base/immortal.h"
#include "transports/ibverbs/ibverbs_transport.h"
#include "transports/ibverbs/verbs.h"
#include "transports/plugin_export.h"

namespace chorus::transport::ibverbs {

namespace {

constexpr EnvSpec kEnv[] = {
    {"CHORUS_IB_DISABLE", "int", "0", "1: ibverbs serves no pair unless CHORUS_TRANSPORTS names it"},
    {"CHORUS_IB_HCA", "string", "",
     "the ports to use, NCCL_IB_HCA's grammar: [^][=]device[:port],...; a leading '^' excludes the list, one "
     "before a later entry that entry (mlx5,^mlx5_2); '=' matches whole names (else prefixes); empty: every active "
     "port"},
    {"CHORUS_IB_GID_INDEX", "int", "-1",
     "RoCE GID index; -1 chooses: a RoCE v2 IPv4-mapped GID, else RoCE v2 IPv6, else RoCE v1"},
    {"CHORUS_IB_QPS_PER_PEER", "int", "1", "reliable-connected queue pairs per peer; large messages are striped "
     "across them (1..16)"},
    {"CHORUS_IB_TIMEOUT", "int", "14", "local ACK timeout of a queue pair: 4.096 us * 2^N per try (0..31)"},
    {"CHORUS_IB_RETRY_CNT", "int", "7", "tries before a silent peer fails a transfer (0..7)"},
    {"CHORUS_IB_RNR_RETRY", "int", "7", "receiver-not-ready retries (0..7; 7: without limit)"},
    {"CHORUS_IB_SL", "int", "0", "InfiniBand service level (0..15)"},
    {"CHORUS_IB_TC", "int", "0", "traffic class of the global route header (RoCE DSCP and ECN bits; 0..255)"},
    {"CHORUS_IB_EAGER_BYTES", "bytes", "8K", "messages up to this are copied through receive slots; larger ones are "
     "written in place with RDMA WRITE (1K..1M)"},
    {"CHORUS_IB_REG_CACHE_MB", "int", "1024", "MiB of user buffers kept registered, least recently used evicted "
     "first; only with on-demand paging (without it a buffer is registered for each transfer)"},
};

std::unique_ptr<Transport> createIbverbs(const Setup& setup) {
  Settings s;
  s.channel.qps = int(envInt("CHORUS_IB_QPS_PER_PEER", 1, 16, kEnv));
  s.channel.eagerBytes = size_t(envBytes("CHORUS_IB_EAGER_BYTES", "1K..1M", kEnv));
  if (s.channel.eagerBytes < 1024 || s.channel.eagerBytes > (1 << 20))
    fail(chorusInvalidArgument, "environment variable CHORUS_IB_EAGER_BYTES={} is out of range: expected 1K..1M",
         s.channel.eagerBytes);
  s.qp.timeout = int(envInt("CHORUS_IB_TIMEOUT", 0, 31, kEnv));
  s.qp.retryCount = int(envInt("CHORUS_IB_RETRY_CNT", 0, 7, kEnv));
  s.qp.rnrRetry = int(envInt("CHORUS_IB_RNR_RETRY", 0, 7, kEnv));
  s.qp.serviceLevel = int(envInt("CHORUS_IB_SL", 0, 15, kEnv));
  s.qp.trafficClass = int(envInt("CHORUS_IB_TC", 0, 255, kEnv));
  s.hca = parseHcaSpec(envValue("CHORUS_IB_HCA", kEnv));
  s.gidIndex = int(envInt("CHORUS_IB_GID_INDEX", -1, 65535, kEnv));
  s.regCacheBytes = size_t(envInt("CHORUS_IB_REG_CACHE_MB", 0, 1 << 20, kEnv)) << 20;
  return create(setup, s);
}

// Usable when a device has an active port; which ports a communicator takes is CHORUS_IB_HCA's, at creation.
std::string unavailable() {
  if (std::string why = probeDevices(); !why.empty()) return why;
  std::string ports;
  for (const PortInfo& p : listPorts()) {
    if (p.active) return "";
    ports += fmt::format("{}{} port {} {}", ports.empty() ? "" : ", ", p.device, p.port, p.state);
  }
  return "no active RDMA port (" + ports + ")";
}

// Every port with its state and link layer, and the one a rank would take first, for chorus_info.
std::string describePorts() {
  std::string text;
  for (const PortInfo& p : listPorts())
    text += fmt::format("{}{} port {} ({}, {})", text.empty() ? "ports: " : ", ", p.device, p.port, p.linkLayer,
                        p.state);
  try {
    const std::vector<PortInfo> chosen = selectPorts(parseHcaSpec(envValue("CHORUS_IB_HCA", kEnv)), listPorts());
    text += fmt::format("; CHORUS_IB_HCA selects {} port(s), rank 0 takes {} port {}", chosen.size(),
                        chosen[0].device, chosen[0].port);
  } catch (const Error& e) {
    text += fmt::format("; {}", e.what());
  }
  return text;
}

// Not measured here (no RDMA device on this project's machines): the figures of a 100 Gbit/s port, and a
// pipeline chunk that keeps several writes in flight. scripts/rdma-check.sh measures them on hardware.
LinkTraits traits() { return LinkTraits{2.0, 10.0, 4.0, 5.0, false, {{0, 512 * 1024}}}; }

const PluginSpec kSpec{
    "ibverbs",
    20,  // after shared memory (10), before tcp (30) and ucx (40)
    kEnv,
    traits,
    unavailable,
    [] { return envInt("CHORUS_IB_DISABLE", 0, 1, kEnv) == 1; },
    [](const PeerInfo&, const PeerInfo&) { return true; },
    createIbverbs,
};

}  // namespace

}  // namespace chorus::transport::ibverbs

extern "C" CHORUS_PLUGIN_EXPORT const chorusTransportPlugin_v4_t chorusTransportPlugin_v4 =
    chorus::transport::exportPlugin(chorus::transport::ibverbs::kSpec);

extern "C" CHORUS_PLUGIN_EXPORT const char* chorusPluginDescribe_v1(void) {
  static chorus::Immortal<std::string> text;  // Note [Immortal statics]
  try {
    *text = chorus::transport::ibverbs::describePorts();
  } catch (const std::exception& e) {
    *text = e.what();
  }
  return text->c_str();
}
