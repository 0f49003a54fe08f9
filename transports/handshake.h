// The connection handshake every socket transport shares (Note [Handshake]): the connecting side sends one
// fixed-size Hello (magic, version, communicator id, ranks, what the transport adds, and last a seal: a fresh
// nonce and a MAC proving it knows the secret, Note [Authentication] in lib/base/auth.cc), optionally with a file
// descriptor; the accepting side accepts what waits on its listener, reads each connection's Hello within a
// deadline of its own, checks it, and hands the valid ones to the transport. A stranger (bad magic, wrong
// secret, another communicator, a replayed Hello, silence, garbage) is dropped and logged, never fatal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include <set>

#include "lib/base/auth.h"
#include "lib/base/socket.h"
#include "transports/transport.h"

namespace chorus::transport {

// The last member of every Hello (and of UCX's control messages).
struct Seal {
  auth::Nonce nonce;
  auth::Mac mac;  // HMAC of every byte before it (and of what follows the message, if anything), under helloKey
};
static_assert(sizeof(Seal) == 48);

// The communicator's key for transport handshakes: derived from its secret and its id, so a Hello recorded in one
// communicator proves nothing in another.
inline auth::Key helloKey(const Setup& setup) {
  return auth::derive(setup.secret, "chorus transport hello", setup.commId);
}

// Fills m.seal for `setup`; `extra` (len bytes that follow m on the wire) is covered too.
template <typename Msg>
void seal(Msg& m, const Setup& setup, const void* extra = nullptr, size_t len = 0) {
  static_assert(std::has_unique_object_representations_v<Msg>, "no padding: the MAC covers every byte");
  static_assert(offsetof(Msg, seal) + sizeof(Seal) == sizeof(Msg), "the seal comes last");
  m.seal.nonce = auth::freshNonce();
  m.seal.mac = auth::mac(helloKey(setup), &m, offsetof(Msg, seal) + sizeof(auth::Nonce), extra, len);
}

// Whether m's seal proves its sender knows `setup`'s secret.
template <typename Msg>
bool sealed(const Msg& m, const Setup& setup, const void* extra = nullptr, size_t len = 0) {
  return auth::equal(auth::mac(helloKey(setup), &m, offsetof(Msg, seal) + sizeof(auth::Nonce), extra, len),
                     m.seal.mac.data());
}

// The checks every Hello (any struct with magic, version, commId, fromRank, toRank and a seal) passes: "" if it
// may come from `from` (or, with from < 0, from any lower rank) of this communicator to this rank, else why not.
// (A replayed Hello passes these; HelloAcceptor refuses a nonce it has seen.)
template <typename Hello>
std::string helloProblem(const Hello& h, uint32_t magic, uint32_t version, const Setup& setup, int from = -1,
                         const void* extra = nullptr, size_t len = 0) {
  if (h.magic != magic) return "bad magic (not a Chorus peer)";
  if (h.version != version) return "wire version " + std::to_string(h.version) + " (this rank speaks " +
                                   std::to_string(version) + ")";
  if (h.commId != setup.commId) return "it belongs to another communicator";
  if (!sealed(h, setup, extra, len)) return "wrong secret (its proof does not match)";
  const bool fromOk = from >= 0 ? h.fromRank == from : h.fromRank >= 0 && h.fromRank < setup.rank;
  if (h.toRank != setup.rank || !fromOk)
    return "unexpected ranks " + std::to_string(h.fromRank) + " -> " + std::to_string(h.toRank);
  return "";
}

// A non-blocking listener on a free port of the interface CHORUS_SOCKET_IFNAME's rules choose (setup.socketIfname),
// where a transport's peers connect for its handshake; its address in *bound, the interface's name in *ifname.
Fd listenForPeers(const Setup& setup, SockAddr* bound, std::string* ifname);

// A listening socket's address as a transport publishes it (a u32 length, then the sockaddr), and back: a blob that
// does not unpack fails naming the transport and the rank.
std::vector<uint8_t> packAddress(const SockAddr& addr);
SockAddr unpackAddress(const std::vector<uint8_t>& bytes, const char* transport, int peer);

// Sends a Hello of `len` bytes on a freshly connected socket, with `passFd` attached when >= 0 (SCM_RIGHTS).
void sendHello(int sock, const void* hello, size_t len, int passFd, const std::string& who);

// Reads up to len bytes without blocking; a descriptor that arrives with them is stored in *passed (else -1
// is left there). Returns bytes read, 0 at end of stream, -1 with errno EAGAIN when nothing is there.
ssize_t recvWithFd(int sock, void* buf, size_t len, int* passed);

class HelloAcceptor {
 public:
  struct Arrival {
    Fd fd;
    Fd passed;                   // the descriptor sent with the Hello, if any
    std::vector<uint8_t> hello;  // exactly helloBytes
    std::string from;            // the peer's address, for messages
  };
  // check: the transport's own test of a complete Hello: "" to keep it, else the reason to drop it; it may
  // throw to fail the communicator (a valid peer with an incompatible setting).
  using Check = std::function<std::string(const uint8_t* hello, const Fd& passed)>;
  HelloAcceptor(std::string transport, const Setup& setup, size_t helloBytes, Check check)
      : transport_(std::move(transport)), setup_(setup), helloBytes_(helloBytes), check_(std::move(check)) {}

  // Waits up to 50 ms for connections and bytes on `listener` (non-blocking), advances every pending
  // handshake, and hands each complete, valid one to take().
  void poll(int listener, Deadline deadline, const std::function<void(Arrival&&)>& take);
  // Closes the connections whose handshake has not completed (the listener is closing).
  void dropPending();

 private:
  struct Pending {
    Arrival a;
    size_t got = 0;
    Deadline deadline;
  };
  std::string advance(Pending& p);  // "" when complete and valid, "wait" for more bytes, else why to drop it
  std::set<auth::Nonce> seen_;      // of the Hellos taken: one seen again is a replay

  std::string transport_;
  const Setup& setup_;
  size_t helloBytes_;
  Check check_;
  std::vector<Pending> pending_;
};

// The Hello of an Arrival as the transport's struct.
template <typename Hello>
Hello helloOf(const HelloAcceptor::Arrival& a) {
  Hello h;
  static_assert(std::is_trivially_copyable_v<Hello>);
  std::memcpy(&h, a.hello.data(), sizeof h);
  return h;
}

}  // namespace chorus::transport
