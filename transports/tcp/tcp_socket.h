// One connection to one peer (data, or the control connection): a queue of frames to write and a queue of expected frames to read.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "lib/base/socket.h"
#include "transports/tcp/wire.h"
#include "transports/transport.h"

namespace chorus::transport::tcp {

struct RecvPart {
  uint8_t* dst;  // where this part's payload goes (already offset)
  uint64_t msgLen, partOffset, partLen;
  OpTag tag;
  Request* req;
};

class DataSocket {
 public:
  DataSocket(Fd fd, const PeerInfo* self, const PeerInfo* peer, bool control)
      : fd_(std::move(fd)), self_(self), peer_(peer), control_(control) {}

  int fd() const { return fd_.get(); }
  void queueSend(const WireHeader& h, const uint8_t* data, Request* req);
  void queueRecv(const RecvPart& part) { recvq_.push_back(part); }
  // Write / read until the kernel says EAGAIN or nothing is left to do; true if any byte moved.
  bool flush();
  bool drain();
  void onEvents(uint32_t events);
  bool idleForFrame() const { return sendq_.empty() || sendq_.front().done == 0; }
  bool sendPending() const { return !sendq_.empty(); }
  bool sendBlocked() const { return !sendq_.empty() && !writable_; }
  // A receive is posted that something waits for (not Request::optional).
  bool recvExpected() const { return !recvq_.empty() && !optional(recvq_.front().tag, recvq_.front().req); }
  // Blocking (bounded) write of a control frame at a frame boundary; false if not possible.
  bool writeControl(const WireHeader& h, const std::string& text, Deadline deadline);
  // After this rank failed: drop the connection so that a peer blocked sending to us fails now.
  void closeHard();
  void shutdownWrite();
  // Control connection: reads whatever is there now; throws the peer's abort reason if one arrived.
  void readAfterFailure();

 private:
  struct SendPart {
    WireHeader hdr;
    const uint8_t* data;
    size_t done;  // bytes of header + payload written
    Request* req;
  };
  [[noreturn]] void failPeer(const std::string& what) const;
  [[noreturn]] void mismatch(const WireHeader& h, const RecvPart& want) const;
  // A whole header is in hdr_; early/earlyLen: bytes that arrived after it in the same read.
  void onHeader(const uint8_t* early, size_t earlyLen);
  void completeRecvPart();
  void stashParked();
  bool serveStash();

  Fd fd_;
  const PeerInfo* self_;
  const PeerInfo* peer_;
  bool control_;  // carries only Bye/Abort frames: always read
  bool readable_ = true, writable_ = true, hangup_ = false, eof_ = false, peerSaidBye_ = false;
  std::deque<SendPart> sendq_;
  std::deque<RecvPart> recvq_;
  WireHeader hdr_{};
  size_t hdrGot_ = 0;
  bool hdrValid_ = false;  // hdr_ holds a checked Data header matching recvq_.front()
  uint64_t payloadGot_ = 0;
  struct Stashed {
    WireHeader hdr;
    std::vector<uint8_t> payload;
  };
  std::deque<Stashed> stash_;  // frames read after the peer hung up, before anyone asked for them
};

void completePart(Request* req);

}  // namespace chorus::transport::tcp
