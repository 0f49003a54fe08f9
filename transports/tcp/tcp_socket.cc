#include "transports/tcp/tcp_socket.h"

#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "lib/base/error.h"
#include "lib/base/log.h"
#include "transports/mismatch.h"

namespace chorus::transport::tcp {

void completePart(Request* req) {
  if (--req->pendingParts == 0) req->done = true;
}

void DataSocket::failPeer(const std::string& what) const {
  fail(chorusRemoteError, "{}: connection to {} {}", self_->name(), peer_->name(), what);
}

void DataSocket::mismatch(const WireHeader& h, const RecvPart& want) const {
  throw mismatchedMessage(self_->name(), peer_->name(), want.tag, want.msgLen, tagOf(h), h.msgLen);
}

void DataSocket::queueSend(const WireHeader& h, const uint8_t* data, Request* req) {
  sendq_.push_back(SendPart{h, data, 0, req});
}

void DataSocket::onEvents(uint32_t ev) {
  if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) readable_ = true;
  if (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR)) writable_ = true;
  if (ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) hangup_ = true;
}

bool DataSocket::flush() {
  bool moved = false;
  while (writable_ && !sendq_.empty()) {
    SendPart& p = sendq_.front();
    iovec iov[2];
    int n = 0;
    size_t total = sizeof(WireHeader) + p.hdr.partLen;
    if (p.done < sizeof(WireHeader)) {
      iov[n++] = {reinterpret_cast<uint8_t*>(&p.hdr) + p.done, sizeof(WireHeader) - p.done};
      if (p.hdr.partLen > 0) iov[n++] = {const_cast<uint8_t*>(p.data), p.hdr.partLen};
    } else {
      size_t off = p.done - sizeof(WireHeader);
      iov[n++] = {const_cast<uint8_t*>(p.data) + off, p.hdr.partLen - off};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    ssize_t w = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) { writable_ = false; break; }
      if (errno == EINTR) continue;
      int e = errno;
      if (e == EPIPE || e == ECONNRESET) {  // the peer may have said why before it went: read that first
        hangup_ = readable_ = true;
        drain();
      }
      failPeer(fmt::format("failed while sending ({}); the peer has probably died", std::strerror(e)));
    }
    moved = true;
    p.done += static_cast<size_t>(w);
    if (p.done == total) {
      Request* r = p.req;
      sendq_.pop_front();
      if (r) completePart(r);
    }
  }
  return moved;
}

void DataSocket::onHeader(const uint8_t* early, size_t earlyLen) {
  const WireHeader& h = hdr_;
  if (h.magic != kFrameMagic) failPeer("sent a malformed frame (bad magic); closing");
  switch (h.type) {
    case FrameType::Bye:
      if (earlyLen > 0) failPeer("sent data after saying goodbye; closing");
      peerSaidBye_ = true;
      hdrGot_ = 0;
      return;
    case FrameType::Abort: {
      std::string text(std::min<uint64_t>(h.partLen, kMaxAbortText), '\0');
      size_t have = std::min(earlyLen, text.size());
      if (have > 0) std::memcpy(text.data(), early, have);
      try {
        recvAll(fd_.get(), text.data() + have, text.size() - have, deadlineIn(1.0), peer_->name());
      } catch (const Error&) {
        text = "(reason lost)";
      }
      throw peerAborted(peer_->name(), h.code == chorusInvalidUsage, text);
    }
    case FrameType::Data:
      if (control_) failPeer("sent data on its control connection; closing");
      break;
    default:
      failPeer("sent a frame of unknown type; closing");
  }
  if (recvq_.empty() || !stash_.empty()) return;  // hold the header until a receive is posted
  const RecvPart& want = recvq_.front();
  if (!(tagOf(h) == want.tag) || h.msgLen != want.msgLen || h.partOffset != want.partOffset ||
      h.partLen != want.partLen)
    mismatch(h, want);
  hdrValid_ = true;
  payloadGot_ = 0;
  if (h.partLen == 0) completeRecvPart();
}

void DataSocket::completeRecvPart() {
  Request* r = recvq_.front().req;
  recvq_.pop_front();
  hdrGot_ = 0;
  hdrValid_ = false;
  payloadGot_ = 0;
  completePart(r);
}

// The peer has hung up while a frame nobody asked for yet is parked: keep its payload (bounded: it is already in
// this kernel's receive buffer, the peer can add nothing) and read on, to find the goodbye or abort behind it.
void DataSocket::stashParked() {
  int avail = 0;
  if (ioctl(fd_.get(), FIONREAD, &avail) != 0 || static_cast<uint64_t>(avail) < hdr_.partLen)
    failPeer("was closed in the middle of a message: the peer died or aborted");
  Stashed st{hdr_, std::vector<uint8_t>(hdr_.partLen)};
  recvAll(fd_.get(), st.payload.data(), st.payload.size(), deadlineIn(1.0), peer_->name());
  stash_.push_back(std::move(st));
  hdrGot_ = 0;
}

bool DataSocket::serveStash() {
  bool moved = false;
  while (!stash_.empty() && !recvq_.empty()) {
    Stashed& st = stash_.front();
    const RecvPart& want = recvq_.front();
    if (!(tagOf(st.hdr) == want.tag) || st.hdr.msgLen != want.msgLen || st.hdr.partOffset != want.partOffset ||
        st.hdr.partLen != want.partLen)
      mismatch(st.hdr, want);
    if (!st.payload.empty()) std::memcpy(want.dst, st.payload.data(), st.payload.size());
    stash_.pop_front();
    Request* r = recvq_.front().req;
    recvq_.pop_front();
    completePart(r);
    moved = true;
  }
  return moved;
}

bool DataSocket::drain() {
  bool moved = serveStash();
  if (!stash_.empty() && !recvq_.empty()) return moved;
  if (eof_ && recvExpected() && stash_.empty()) {
    if (peerSaidBye_)
      failPeer("was closed: the peer destroyed its communicator while this rank still expected data from it");
    failPeer("was closed unexpectedly: the peer process died or was killed");
  }
  while (readable_) {
    bool haveHdr = hdrGot_ == sizeof(WireHeader);
    // With nothing posted, leave bytes in the kernel (one read per message later, header and payload together)
    // unless the peer hung up: then read now to tell goodbye, abort and death apart.
    if (!haveHdr && hdrGot_ == 0 && (recvq_.empty() || !stash_.empty()) && !hangup_ && !control_) break;
    if (haveHdr && !hdrValid_) {
      if (recvq_.empty() || !stash_.empty()) {  // parked: nobody wants its payload yet
        if (!hangup_) break;
        stashParked();
        moved = true;
        continue;
      }
      onHeader(nullptr, 0);
      moved = true;
      continue;
    }
    bool speculate = !haveHdr && stash_.empty() && !recvq_.empty() && recvq_.front().partLen > 0;
    iovec iov[2];
    int n = 0;
    if (!haveHdr) {
      iov[n++] = {reinterpret_cast<uint8_t*>(&hdr_) + hdrGot_, sizeof(WireHeader) - hdrGot_};
      // Speculatively read the expected payload in the same call; a mismatching header fails the whole
      // operation anyway, so bytes landing in the posted buffer early are harmless.
      if (speculate) iov[n++] = {recvq_.front().dst, recvq_.front().partLen};
    } else {
      const RecvPart& p = recvq_.front();
      iov[n++] = {p.dst + payloadGot_, p.partLen - payloadGot_};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    ssize_t r = ::recvmsg(fd_.get(), &msg, MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) { readable_ = false; break; }
      if (errno == EINTR) continue;
      failPeer(fmt::format("failed while receiving ({}); the peer has probably died", std::strerror(errno)));
    }
    if (r == 0) {
      readable_ = false;
      eof_ = true;
      if (peerSaidBye_ && hdrGot_ == 0 && (!recvExpected() || !stash_.empty())) break;
      if (peerSaidBye_)
        failPeer("was closed: the peer destroyed its communicator while this rank still expected data from it");
      failPeer("was closed unexpectedly: the peer process died or was killed");
    }
    moved = true;
    size_t got = static_cast<size_t>(r);
    if (!haveHdr) {
      size_t h = std::min(got, sizeof(WireHeader) - hdrGot_);
      hdrGot_ += h;
      got -= h;
      if (hdrGot_ < sizeof(WireHeader)) continue;
      onHeader(got > 0 ? recvq_.front().dst : nullptr, got);
      if (got > 0) {  // speculative payload bytes arrived with the header
        payloadGot_ = got;
        if (payloadGot_ == recvq_.front().partLen) completeRecvPart();
      }
    } else {
      payloadGot_ += got;
      if (payloadGot_ == recvq_.front().partLen) completeRecvPart();
    }
  }
  return moved;
}

bool DataSocket::writeControl(const WireHeader& h, const std::string& text, Deadline deadline) {
  if (!idleForFrame()) return false;
  try {
    sendAll(fd_.get(), &h, sizeof h, deadline, peer_->name());
    if (!text.empty()) sendAll(fd_.get(), text.data(), text.size(), deadline, peer_->name());
  } catch (const Error&) {
    return false;
  }
  return true;
}

void DataSocket::readAfterFailure() {
  readable_ = true;
  try {
    drain();
  } catch (const Error& e) {
    if (e.kind() == Error::Kind::kPeerAborted) throw;
  }
}

void DataSocket::shutdownWrite() { ::shutdown(fd_.get(), SHUT_WR); }

void DataSocket::closeHard() {
  // Reset rather than FIN: a FIN queues behind unsent data and never reaches a peer that is itself blocked
  // sending to us; a reset fails its pending send at once.
  linger lg{1, 0};
  setsockopt(fd_.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  fd_.reset();
}

}  // namespace chorus::transport::tcp
