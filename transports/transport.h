// The transport interface: everything the communicator asks of the network. Built-in transports (tcp/, shm/)
// and plugins (ucx/; later ibverbs/, cuda_ipc/, through transports/plugin.h) implement exactly this; each
// describes itself to the registry (transports/registry.h).
//
// Note [Message tags]: every message carries the OpTag of the operation it belongs to (sequence number and a
// fingerprint of the call). Between two ranks messages of one class (Note [Message classes] in lib/base/ops.h:
// a transport keeps the classes apart) arrive in the order they were posted, so a receiver compares the incoming
// tag and length with what it posted; any difference means the ranks made different calls, and progress() throws
// chorusInvalidUsage naming both calls instead of delivering wrong data.
//
// Threading: one thread at a time drives a Transport (the communicator's executing thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "lib/base/ops.h"

namespace chorus::transport {

// A transport's address (what address() publishes through the bootstrap) is at most this long. UCX worker
// addresses measured 103 bytes (UCX_TLS=tcp, lo) to 210 (tcp and shared memory) here, plus the ucx transport's
// 24-byte seal; every further device (InfiniBand ports, more interfaces) adds to them.
constexpr size_t kMaxAddressBytes = 4096;

using chorus::OpKind;
using chorus::OpTag;
using chorus::Request;

struct PeerInfo {
  int rank = -1;
  int pid = 0;
  std::string host;    // hostname, for messages
  std::string hostId;  // host identity: ranks with equal ids share memory
  std::string name() const;  // "rank 3 (pid 123 on host1)"
};

// Per-communicator facts a transport needs at creation. A transport reads its own settings (its section of
// the environment table) itself.
struct Setup {
  int rank = -1;
  int nranks = 0;
  uint64_t secret = 0;  // every connection proves it knows this
  uint64_t commId = 0;  // distinguishes communicators sharing a process
  std::string socketIfname;     // CHORUS_SOCKET_IFNAME, for transports that open sockets
  std::vector<PeerInfo> peers;  // indexed by rank, filled once the bootstrap exchange is done
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // Opaque bytes (at most kMaxAddressBytes) that a peer passes to connect(). Valid from construction.
  virtual std::vector<uint8_t> address() const = 0;
  // Setup, blocking until the deadline: the lower rank of a pair calls connect, the higher calls accept; each
  // gets the other's address. accept() closes and logs any connection that fails the handshake, without
  // giving up. A rank calls connect for all its higher peers before it accepts any lower one.
  virtual void connect(int peer, const std::vector<uint8_t>& address, std::chrono::steady_clock::time_point deadline) = 0;
  virtual void accept(int peer, const std::vector<uint8_t>& address, std::chrono::steady_clock::time_point deadline) = 0;
  // Called once a rank has made all its connect() and accept() calls: returns when no handshake this side began
  // still needs this side's progress, so the rank may then block elsewhere (another transport's setup, the
  // bootstrap, the caller's own code) while its peers are still in accept(). Throws at the deadline naming the peer.
  virtual void settle(std::chrono::steady_clock::time_point deadline) { (void)deadline; }
  // Called on every transport once the communicator is formed: nothing connects to it any more, so it closes what
  // it listened on (and any stranger still waiting there); a port that is closed cannot be held by an idle one.
  virtual void stopListening() {}
  // Queues len bytes tagged `tag` to peer. Never blocks; buf and *req stay valid until req->done.
  virtual void isend(int peer, const void* buf, size_t len, const OpTag& tag, Request* req) = 0;
  // Posts a receive of exactly len bytes tagged `tag` from peer. Never blocks; see Note [Message tags].
  virtual void irecv(int peer, void* buf, size_t len, const OpTag& tag, Request* req) = 0;
  // Like irecv, but the payload is reduced into dst as it arrives: dst = src op payload, elementwise over
  // len bytes of dtype (dst may equal src; both stay valid until req->done). Saves the caller a staging copy
  // where the transport can read the payload in place (shm). Returns false, posting nothing, if it cannot.
  virtual bool irecvReduce(int peer, void* dst, const void* src, size_t len, chorusDataType_t dtype,
                           chorusRedOp_t op, const OpTag& tag, Request* req) {
    (void)peer, (void)dst, (void)src, (void)len, (void)dtype, (void)op, (void)tag, (void)req;
    return false;
  }
  // Moves whatever data can move now without blocking; true if anything moved. Throws chorus::Error naming
  // the peer when a connection fails, a peer dies or reports an error, or a tag mismatches.
  virtual bool progress() = 0;
  // A file descriptor that becomes readable when progress() may have work; lets waiters sleep in poll().
  virtual int waitFd() const = 0;
  // Called right before the waiter sleeps on waitFd(): asks peers to make it readable when they produce
  // something for us (if they would not anyway). False when progress() may have work already: do not sleep.
  // The next progress() call withdraws the request.
  virtual bool armWake() = 0;
  // Best effort, bounded by the deadline: tells every peer that this rank failed, with the reason.
  virtual void sendAbort(chorusResult_t code, const std::string& text, std::chrono::steady_clock::time_point deadline) = 0;
  // Says goodbye to every peer (so they can tell a clean exit from a death) and closes the connections.
  virtual void close(std::chrono::steady_clock::time_point deadline) = 0;
};

}  // namespace chorus::transport
