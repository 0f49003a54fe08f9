// Bootstrap: how ranks find each other. A root listener (started by chorusGetUniqueId, or by rank 0 of
// chorusCommInitFromEnv at CHORUS_ROOT) collects one RankInfo per rank and sends everyone the full table plus
// a fresh communicator id. Each side of every connection proves it knows the secret by a MAC over the other's
// fresh nonce (Note [Authentication] in lib/base/auth.cc), never sending it; frames are length-
// bounded before allocation; a connection that fails any check, or stays silent, is closed and logged and
// never disturbs the communicator being built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "lib/base/socket.h"

namespace chorus {

struct TransportAddress {
  std::string transport;       // its name in the registry
  std::vector<uint8_t> bytes;  // opaque, at most transport::kMaxAddressBytes
};

struct RankInfo {
  int rank = -1;
  int nranks = 0;
  int pid = 0;
  std::string host;
  std::string hostId;
  std::vector<TransportAddress> addresses;  // the transports this rank offers, in its order of preference
  std::vector<uint8_t> heartbeat;           // its heartbeat socket's sockaddr (Note [Liveness])
  std::vector<uint8_t> rendezvous;          // its rendezvous listener's sockaddr (Note [Rendezvous])
  std::vector<uint8_t> payload;             // what a rendezvous exchange carries (chorusCommSplit: color, key)
};

struct UniqueIdData {
  uint64_t secret = 0;
  SockAddr root;
};

void encodeUniqueId(const UniqueIdData& data, chorusUniqueId* id);
UniqueIdData decodeUniqueId(const chorusUniqueId& id);  // throws chorusInvalidArgument when not a Chorus id

// Starts the root on a thread of its own; it serves one communicator, then exits (also after `timeoutSec`).
void startRoot(Fd listener, uint64_t secret, double timeoutSec);

struct BootstrapResult {
  uint64_t commId = 0;
  std::vector<RankInfo> ranks;  // indexed by rank
};
BootstrapResult exchangeWithRoot(const UniqueIdData& root, const RankInfo& mine, Deadline deadline);


}  // namespace chorus
