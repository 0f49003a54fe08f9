// The UCX transport's bookkeeping (Note [UCX transport] in ucx_transport.cc): an Op is one isend/irecv or
// control message, its Parts the UCP operations it posted; a Peer is one connected rank. The UCP callbacks
// only record a completion here; the transport processes completions in progress().
#pragma once

#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "lib/base/ops.h"
#include "transports/ucx/ucp_handles.h"
#include "transports/ucx/ucx_transport.h"
#include "transports/ucx/wire.h"

namespace chorus::transport::ucx {

constexpr size_t kHeaderBytes = sizeof(WireHeader);
constexpr size_t kFirstBytes = kHeaderBytes + kCopyBytes;  // every Op's first receive
// Sends up to this size first try sendAtOnce() from the stack: UCX's eager-short limit is below it here.
constexpr size_t kInlineBytes = 256;
constexpr size_t kBounceBytes = std::max(kFirstBytes, sizeof(Control) + kMaxAbortText);

struct Op;
struct Peer;

struct Part {
  Op* op = nullptr;
  void* req = nullptr;  // the UCP request while it is ours to free; nullptr if none or completed at once
  bool done = false;
  ucs_status_t status = UCS_OK;
  size_t length = 0;  // receives: bytes that arrived (the sender's length when truncated)
  Part* nextDone = nullptr;
};

// Completed Parts in the order UCX reported them, appended by callbacks and drained by progress().
struct DoneList {
  Part* head = nullptr;
  Part** tail = &head;
  void push(Part* p) {
    p->nextDone = nullptr;
    *tail = p;
    tail = &p->nextDone;
  }
  Part* pop() {
    Part* p = head;
    if (p != nullptr && (head = p->nextDone) == nullptr) tail = &head;
    return p;
  }
};

enum class Role : uint8_t { Send, Recv, ControlSend, ControlRecv };

struct Op {
  DoneList* doneList = nullptr;
  Role role = Role::Send;
  Peer* peer = nullptr;
  Request* req = nullptr;
  uint8_t* buf = nullptr;
  size_t len = 0;
  OpTag tag;
  Part parts[2];
  int pending = 0;  // parts posted and not yet processed
  bool failed = false;
  bool hello = false;   // a control send carrying our Hello
  WireHeader header{};  // large sends: the header message
  std::unique_ptr<uint8_t[]> bounce{new uint8_t[kBounceBytes]};
  Op* prev = nullptr;  // the peer's data Ops in flight, oldest first
  Op* next = nullptr;
};

struct Peer {
  int rank = -1;
  int pid = 0;
  std::string name;
  std::string modeWhy;  // why the endpoint is in mode NONE: the setting, or UCX's refusal of mode PEER
  Endpoint ep;
  bool watched = false;  // mode NONE: its death is noticed by watching its pid
  bool helloSent = false;  // our Hello has left (connect() gives it a head start)
  bool hello = false, bye = false, processGone = false, reported = false;
  ucs_status_t epStatus = UCS_OK;  // set by the endpoint's error handler
  Op* control = nullptr;           // the posted control receive
  Op* first = nullptr;
  Op* last = nullptr;
  bool failed() const { return epStatus != UCS_OK || processGone; }
  bool peerMode() const { return modeWhy.empty(); }  // UCP_ERR_HANDLING_MODE_PEER; else NONE
};

inline void partDone(Part* p, ucs_status_t status, size_t length) {
  p->done = true;
  p->status = status;
  p->length = length;
  p->op->doneList->push(p);
}

inline void onSend(void*, ucs_status_t status, void* user) { partDone(static_cast<Part*>(user), status, 0); }

inline void onRecv(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  bool sized = info != nullptr && (status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED);
  partDone(static_cast<Part*>(user), status, sized ? info->length : 0);
}

inline void onEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* p = static_cast<Peer*>(arg);
  if (p->epStatus == UCS_OK) p->epStatus = status;
}

inline void postSend(Part& part, ucp_ep_h ep, const void* buf, size_t len, uint64_t tag) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = onSend;
  param.user_data = &part;
  ++part.op->pending;
  ucs_status_ptr_t r = ucp_tag_send_nbx(ep, buf, len, tag, &param);
  if (r == nullptr) partDone(&part, UCS_OK, len);
  else if (UCS_PTR_IS_ERR(r)) partDone(&part, UCS_PTR_STATUS(r), 0);
  else part.req = r;
}

// A copied message: header, then payload, into dst (room for kHeaderBytes + len). Returns the message's size.
inline size_t packCopied(uint8_t* dst, const WireHeader& h, const void* payload, size_t len) {
  std::memcpy(dst, &h, kHeaderBytes);
  if (len > 0) std::memcpy(dst + kHeaderBytes, payload, len);
  return kHeaderBytes + len;
}

// Sends a message only if UCX can copy it out before returning (its inline path, within UCX's eager-short
// limit); UCS_ERR_NO_RESOURCE otherwise. With FORCE_IMM_CMPL UCX never returns a request: the buffer may be
// reused at once, and no callback follows.
inline ucs_status_t sendAtOnce(ucp_ep_h ep, const void* buf, size_t len, uint64_t tag) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
  ucs_status_ptr_t r = ucp_tag_send_nbx(ep, buf, len, tag, &param);
  return UCS_PTR_STATUS(r);
}

// UCX 1.13.1 leaves recv_info unset when a receive completes at once, so receives never do: with
// NO_IMM_CMPL the callback reports the length (possibly before ucp_tag_recv_nbx returns).
inline void postRecv(Part& part, ucp_worker_h worker, void* buf, size_t len, uint64_t tag) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = onRecv;
  param.user_data = &part;
  ++part.op->pending;
  ucs_status_ptr_t r = ucp_tag_recv_nbx(worker, buf, len, tag, kFullMask, &param);
  if (UCS_PTR_IS_ERR(r)) partDone(&part, UCS_PTR_STATUS(r), 0);
  else part.req = r;
}

}  // namespace chorus::transport::ucx
