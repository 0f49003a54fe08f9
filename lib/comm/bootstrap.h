// Bootstrap: how ranks find each other. A root listener (started by chorusGetUniqueId, or by rank 0 of
// chorusCommInitFromEnv at CHORUS_ROOT) collects one RankInfo per rank and sends everyone the full table plus
// a fresh communicator id. Each side of every connection proves it knows the secret by a MAC over the other's
// fresh nonce (Note [Authentication] in lib/base/auth.cc), never sending it; frames are length-
// bounded before allocation; a connection that fails any check, or stays silent, is closed and logged and
// never disturbs the communicator being built.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "lib/base/auth.h"
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
constexpr size_t kMaxRendezvousPayload = 256;  // RankInfo::payload's bound on the wire

struct UniqueIdData {
  uint64_t secret = 0;
  SockAddr root;
  bool rendezvous = false;  // a root of Note [Rendezvous]: joiners it drops try again until their deadline
  // Rendezvous rounds only (Note [Members gone]): describes the member with this rank in the communicator being
  // formed when it is known to be gone, else "". The root's host is that communicator's rank 0.
  std::function<std::string(int member)> memberGone;
};

void encodeUniqueId(const UniqueIdData& data, chorusUniqueId* id);
UniqueIdData decodeUniqueId(const chorusUniqueId& id);  // throws chorusInvalidArgument when not a Chorus id

// Serves one communicator's creation on `listener` (listening), then returns (also after `timeoutSec`, or as soon
// as `memberGone`, when given, names a rank that has not joined).
void serveRoot(Fd listener, uint64_t secret, double timeoutSec,
               std::function<std::string(int member)> memberGone);
// serveRoot on a detached thread of its own.
void startRoot(Fd listener, uint64_t secret, double timeoutSec);

struct BootstrapResult {
  uint64_t commId = 0;
  std::vector<RankInfo> ranks;  // indexed by rank
};
BootstrapResult exchangeWithRoot(const UniqueIdData& root, const RankInfo& mine, Deadline deadline);

// The parsers of what arrives from outside, once its MAC is checked (also driven by test/fuzz): a joiner's frame
// (magic, version, its nonce and RankInfo) and the root's table for nranks ranks. Throw chorus::Error (naming
// `who`) on anything malformed; never read past the bytes given, never allocate more than they announce within
// the frame limits.
void decodeJoin(const std::vector<uint8_t>& payload, const std::string& who, auth::Nonce* nonce, RankInfo* info);
BootstrapResult decodeTable(const std::vector<uint8_t>& frame, int nranks, const std::string& who);


}  // namespace chorus
