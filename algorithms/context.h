// What an algorithm may ask of the communicator, and nothing more: who the ranks are and where they live, the
// pipeline chunk, how to post and await messages, and scratch memory. The data work itself goes through the
// call's memory space (CollArgs::space, lib/mem/space.h). lib/comm's Comm implements it; the
// algorithms never see the communicator itself (docs/architecture.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chorus/chorus.h"
#include "lib/base/function_ref.h"
#include "lib/base/ops.h"
#include "lib/mem/space.h"

namespace chorus::algo {

class Context {
 public:
  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  // Host index of every rank (equal host identity, numbered by first rank), for topology-aware algorithms.
  virtual const std::vector<int>& hostOf() const = 0;
  // The pipeline chunk in bytes for a collective whose buffer is `bytes` (the same on every rank).
  virtual size_t chunkBytes(size_t bytes) const = 0;

  // Posts a message to / from peer; never blocks. buf and *req stay valid until req->done.
  virtual void isend(int peer, const void* buf, size_t len, const OpTag& tag, Request* req) = 0;
  virtual void irecv(int peer, void* buf, size_t len, const OpTag& tag, Request* req) = 0;
  // Like irecv, but dst = src op payload as it arrives (dst may equal src). False, posting nothing, when the
  // peer's transport cannot reduce while receiving, or the buffers are not host memory (a transport reduces on
  // the CPU): then irecv into scratch and reduce in `space`.
  virtual bool irecvReduce(const mem::Space& space, int peer, void* dst, const void* src, size_t len,
                           chorusDataType_t dtype, chorusRedOp_t op, const OpTag& tag, Request* req) = 0;
  // Moves messages until done() is true. Throws chorus::Error on abort, a transport error or a timeout.
  virtual void waitUntil(FunctionRef<bool()> done, const OpTag& tag) = 0;
  void wait(Request& r, const OpTag& tag) { waitUntil([&] { return r.done; }, tag); }
  // Scratch memory in `space`, reused across operations; `slot` selects independent buffers.
  virtual uint8_t* scratch(const mem::Space& space, size_t bytes, int slot = 0) = 0;

 protected:
  ~Context() = default;
};

}  // namespace chorus::algo
