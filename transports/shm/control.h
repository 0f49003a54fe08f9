// The control channel of a pair of ranks: a unix-domain stream socket in the abstract namespace (so nothing is
// left in any file system). It opens with a Hello that carries the pair's segment as a file descriptor
// (SCM_RIGHTS), then only ever carries small frames: Wake (the peer is asleep and has work), Bye (clean close)
// and Abort (with the reason). The kernel closes it when a process dies, which is how a dead peer is noticed.
#pragma once

#include <cstdint>
#include <string>

#include "lib/base/socket.h"
#include "transports/handshake.h"

namespace chorus::transport::shm {

constexpr uint32_t kHelloMagic = 0x43485348;  // "CHSH"
constexpr uint32_t kFrameMagic = 0x43485346;  // "CHSF"
constexpr uint32_t kWireVersion = 3;  // 2: sealed Hellos; 3: fence requests in the segment
constexpr uint32_t kMaxAbortText = 4096;

struct Hello {
  uint32_t magic, version;
  uint64_t commId;
  int32_t fromRank, toRank;
  uint64_t processNonce;  // equal nonces: the two ranks are threads of one process
  uint64_t probeAddr, probeValue;  // a word of the sender's memory, for the receiver's direct-copy probe
  Seal seal;
};

enum class FrameType : uint8_t { Wake = 1, Bye = 2, Abort = 3 };

struct Frame {
  uint32_t magic;
  FrameType type;
  uint8_t pad[3];
  uint32_t code;     // Abort: the chorusResult_t
  uint32_t textLen;  // Abort: bytes of reason text that follow
};
static_assert(sizeof(Frame) == 16);

// Listens on a fresh abstract address; *name receives it (without the leading NUL).
Fd listenAbstract(std::string* name);
// Connects (blocking until the deadline, retrying while the listener's backlog is full).
Fd connectAbstract(const std::string& name, Deadline deadline);
// Bounded best-effort write of a frame (and text) on a non-blocking socket; false if it could not be written.
bool writeFrame(int sock, FrameType type, uint32_t code, const std::string& text, Deadline deadline);

// Reads the frames a peer sends on its control socket.
class FrameReader {
 public:
  enum class Status { Idle, Closed };
  // Reads what is there. Wake frames are absorbed; Bye sets saidBye(); Abort throws the peer's reason as a
  // chorus::Error (naming `peerName`). Closed when the peer's end is gone.
  Status poll(int sock, const std::string& peerName);
  bool saidBye() const { return bye_; }

 private:
  uint8_t buf_[sizeof(Frame) + kMaxAbortText];
  size_t have_ = 0;
  bool bye_ = false;
};

}  // namespace chorus::transport::shm
