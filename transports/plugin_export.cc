#include "transports/plugin_export.h"

#include <bit>
#include <cstdio>
#include <new>

#include "lib/base/error.h"
#include "lib/base/immortal.h"
#include "lib/base/log.h"
#include "lib/base/socket.h"

namespace chorus::transport {

namespace {

const PluginSpec* gSpec = nullptr;

// One transport object behind the C table, with the C++ Setup it reads.
struct Hosted {
  const chorusPluginSetup_v4* c = nullptr;
  Setup setup;
  std::unique_ptr<Transport> t;
  std::vector<uint8_t> address;
  std::string lastError;
};

Hosted* H(void* t) { return static_cast<Hosted*>(t); }

Deadline deadlineOf(int64_t ns) { return Deadline(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns))); }

OpTag tagOf(const chorusPluginTag_v4* t) { return std::bit_cast<OpTag>(*t); }  // same layout (plugin_host.cc)

Request* reqOf(chorusPluginRequest_v4* r) { return reinterpret_cast<Request*>(r); }

PeerInfo peerOf(const chorusPluginPeer_v4& p) { return {p.rank, p.pid, p.host, p.hostId}; }

// Runs body; an exception becomes a result code and the transport's lastError text.
template <typename F>
int guarded(Hosted* h, F&& body) {
  log::LogRankScope scope(h->setup.rank);
  try {
    body();
    return 0;
  } catch (const Error& e) {
    h->lastError = e.what();
    return e.code();
  } catch (const std::bad_alloc&) {
    h->lastError = "out of memory in transport " + std::string(gSpec->name);
    return chorusSystemError;
  } catch (const std::exception& e) {
    h->lastError = e.what();
    return chorusInternalError;
  }
}

// The peers are filled in by the host after the bootstrap, before the first connect/accept.
void fillPeers(Hosted* h) {
  if (!h->setup.peers.empty() || h->c->peers == nullptr) return;
  for (int r = 0; r < h->c->nranks; ++r) h->setup.peers.push_back(peerOf(h->c->peers[r]));
}

int create(const chorusPluginSetup_v4* c, void** out, char* err, size_t errLen) {
  *out = nullptr;
  auto h = std::make_unique<Hosted>();
  h->c = c;
  h->setup.rank = c->rank;
  h->setup.nranks = c->nranks;
  h->setup.secret = c->secret;
  h->setup.commId = c->commId;
  h->setup.socketIfname = c->socketIfname ? c->socketIfname : "";
  int rc = guarded(h.get(), [&] {
    h->t = gSpec->create(h->setup);
    h->address = h->t->address();
  });
  if (rc != 0) {
    std::snprintf(err, errLen, "%s", h->lastError.c_str());
    return rc;
  }
  *out = h.release();
  return 0;
}

void destroy(void* t) {
  Hosted* h = H(t);
  log::LogRankScope scope(h->setup.rank);
  delete h;
}

}  // namespace

chorusTransportPlugin_v4_t exportPlugin(const PluginSpec& spec) {
  static_assert(sizeof(EnvSpec) == sizeof(chorusPluginEnv_v4));
  gSpec = &spec;
  chorusTransportPlugin_v4_t p{};
  p.version = CHORUS_TRANSPORT_PLUGIN_VERSION;
  p.name = spec.name;
  p.preference = spec.preference;
  p.env = reinterpret_cast<const chorusPluginEnv_v4*>(spec.env.data());
  p.nenv = spec.env.size();
  const LinkTraits traits = spec.traits();
  // More steps than the table holds, or none, leave the table invalid, and the host refuses the plugin naming it.
  p.traits = {traits.alphaUs, traits.gbps, traits.alphaUsOversubscribed, traits.gbpsOversubscribed,
              traits.reducesOnReceive ? 1 : 0, static_cast<uint32_t>(traits.chunks.size()), {}};
  for (size_t i = 0; i < traits.chunks.size() && i < CHORUS_PLUGIN_MAX_CHUNK_STEPS; ++i)
    p.traits.chunks[i] = {traits.chunks[i].fromBytes, traits.chunks[i].chunkBytes};
  p.unavailable = [] {
    static const Immortal<std::string> why{gSpec->unavailable ? gSpec->unavailable() : ""};
    return why->c_str();
  };
  p.disabledByEnv = [] { return gSpec->disabledByEnv != nullptr && gSpec->disabledByEnv() ? 1 : 0; };
  p.canConnect = [](const chorusPluginPeer_v4* a, const chorusPluginPeer_v4* b) {
    return gSpec->canConnect(peerOf(*a), peerOf(*b)) ? 1 : 0;
  };
  p.create = create;
  p.destroy = destroy;
  p.lastError = [](void* t) { return H(t)->lastError.c_str(); };
  p.address = [](void* t, const uint8_t** bytes, size_t* len) {
    *bytes = H(t)->address.data();
    *len = H(t)->address.size();
    return 0;
  };
  p.connect = [](void* t, int peer, const uint8_t* a, size_t len, int64_t deadline) {
    return guarded(H(t), [&] {
      fillPeers(H(t));
      H(t)->t->connect(peer, std::vector<uint8_t>(a, a + len), deadlineOf(deadline));
    });
  };
  p.accept = [](void* t, int peer, const uint8_t* a, size_t len, int64_t deadline) {
    return guarded(H(t), [&] {
      fillPeers(H(t));
      H(t)->t->accept(peer, std::vector<uint8_t>(a, a + len), deadlineOf(deadline));
    });
  };
  p.settle = [](void* t, int64_t deadline) { return guarded(H(t), [&] { H(t)->t->settle(deadlineOf(deadline)); }); };
  p.isend = [](void* t, int peer, const void* buf, size_t len, const chorusPluginTag_v4* tag,
               chorusPluginRequest_v4* req) {
    return guarded(H(t), [&] { H(t)->t->isend(peer, buf, len, tagOf(tag), reqOf(req)); });
  };
  p.irecv = [](void* t, int peer, void* buf, size_t len, const chorusPluginTag_v4* tag, chorusPluginRequest_v4* req) {
    return guarded(H(t), [&] { H(t)->t->irecv(peer, buf, len, tagOf(tag), reqOf(req)); });
  };
  // Left NULL where the transport never reduces while receiving: the host then answers without a crossing.
  if (traits.reducesOnReceive)
    p.irecvReduce = [](void* t, int peer, void* dst, const void* src, size_t len, int dtype, int op,
                       const chorusPluginTag_v4* tag, chorusPluginRequest_v4* req, int* posted) {
      return guarded(H(t), [&] {
        *posted = H(t)->t->irecvReduce(peer, dst, src, len, static_cast<chorusDataType_t>(dtype),
                                       static_cast<chorusRedOp_t>(op), tagOf(tag), reqOf(req)) ? 1 : 0;
      });
    };
  p.progress = [](void* t, int* moved) { return guarded(H(t), [&] { *moved = H(t)->t->progress() ? 1 : 0; }); };
  p.waitFd = [](void* t) { return H(t)->t->waitFd(); };
  p.armWake = [](void* t, int* maySleep) { return guarded(H(t), [&] { *maySleep = H(t)->t->armWake() ? 1 : 0; }); };
  p.sendAbort = [](void* t, int code, const char* text, int64_t deadline) {
    guarded(H(t), [&] { H(t)->t->sendAbort(static_cast<chorusResult_t>(code), text, deadlineOf(deadline)); });
  };
  p.close = [](void* t, int64_t deadline) { guarded(H(t), [&] { H(t)->t->close(deadlineOf(deadline)); }); };
  return p;
}

}  // namespace chorus::transport
