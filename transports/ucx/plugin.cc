// The UCX transport's entry in the registry, exported as the plugin table (transports/plugin_export.h).
#include "lib/base/env.h"
#include "lib/base/error.h"
#include "transports/plugin_export.h"
#include "transports/ucx/ucp_handles.h"
#include "transports/ucx/ucx_transport.h"

namespace chorus::transport::ucx {

namespace {

// UCX reads its own UCX_* variables (UCX_TLS, UCX_NET_DEVICES, ...); these are Chorus's.
constexpr EnvSpec kEnv[] = {
    {"CHORUS_UCX_DISABLE", "int", "0", "1: UCX serves no pair unless CHORUS_TRANSPORTS names it; UCX's own "
     "variables (UCX_TLS, UCX_NET_DEVICES, ...) apply as usual"},
    {"CHORUS_UCX_ERROR_MODE", "enum", "none",
     "none: endpoints without UCX's peer error handling (zero-copy rendezvous over tcp; a peer's death is seen by "
     "its pid on this host, by UCX's failed transfers elsewhere); peer: UCP_ERR_HANDLING_MODE_PEER where UCX "
     "allows it (its keepalive, but over tcp a copying rendezvous: about 0.6x the busbw from 1 MiB)"},
};

std::unique_ptr<Transport> createUcx(const Setup& setup) {
  const std::string mode = envValue("CHORUS_UCX_ERROR_MODE", kEnv);
  if (mode != "none" && mode != "peer")
    fail(chorusInvalidArgument, "environment variable CHORUS_UCX_ERROR_MODE='{}' is invalid: expected none or peer",
         mode);
  return create(setup, mode == "peer");
}

// Whether a UCP context can be made here at all (a broken UCX install, or no transport UCX_TLS allows): one is
// made as the transport would make it, and dropped.
std::string probe() {
  try {
    createContext("the ucx probe");
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

// Between two ranks of one host over UCX's shared memory (docs/ucx-results.md has the measurements, under "The
// chunk depends on the size"). The chunk is 1 MiB, but 128 KiB from 16 MiB touched on the host: UCX sends those
// eagerly through its shared-memory FIFO, copied by both cores, where 1 MiB goes by rendezvous, copied by the
// receiver alone, and that wins once the buffers outgrow the cache. Only where shared memory can serve ranks of
// one host and Chorus's 512K eager threshold applies (no RDMA device); over UCX's tcp small chunks lose.
LinkTraits traits() {
  LinkTraits t{3.0, 5.0, 20.0, 2.0, false, {{0, 1024 * 1024}}};
  if (!hasRdmaDevice() && tlsAllows({"sm", "shm", "mm", "posix", "sysv", "xpmem"}))
    t.chunks.push_back({16 << 20, 128 << 10});
  return t;
}

const PluginSpec kSpec{
    "ucx",
    // After tcp by default: on the machines this project measures on, UCX runs over TCP and shared memory too
    // (docs/architecture.md); name it in CHORUS_TRANSPORTS to use it.
    40,
    kEnv,
    traits,
    probe,
    [] { return envInt("CHORUS_UCX_DISABLE", 0, 1, kEnv) == 1; },
    [](const PeerInfo&, const PeerInfo&) { return true; },
    createUcx,
};

}  // namespace

}  // namespace chorus::transport::ucx

extern "C" CHORUS_PLUGIN_EXPORT const chorusTransportPlugin_v4_t chorusTransportPlugin_v4 =
    chorus::transport::exportPlugin(chorus::transport::ucx::kSpec);
