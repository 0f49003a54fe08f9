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
    {"CHORUS_UCX_DISABLE", "int", "0", "1: UCX serves no pair unless CHORUS_TRANSPORTS names it"},
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

const PluginSpec kSpec{
    "ucx",
    // After tcp by default: on the machines this project measures on, UCX runs over TCP and shared memory too
    // (docs/architecture.md); name it in CHORUS_TRANSPORTS to use it.
    40,
    kEnv,
    // Between two ranks of one host over UCX's shared memory (docs/ucx-results.md has the measurements).
    {3.0, 5.0, 20.0, 2.0, false, 1024 * 1024},
    probe,
    [] { return envInt("CHORUS_UCX_DISABLE", 0, 1, kEnv) == 1; },
    [](const PeerInfo&, const PeerInfo&) { return true; },
    createUcx,
};

}  // namespace

}  // namespace chorus::transport::ucx

extern "C" CHORUS_PLUGIN_EXPORT const chorusTransportPlugin_v1_t chorusTransportPlugin_v1 =
    chorus::transport::exportPlugin(chorus::transport::ucx::kSpec);
