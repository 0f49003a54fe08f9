// What the protocol engine (engine.h) asks of the network: post work requests on one peer's queue pairs, and
// the completions they produce. The verbs layer maps each call to one ibv_post_send / ibv_post_recv and each
// ibv_wc to a Completion; the tests wire two engines back to back through memory (test/test_ibverbs_engine.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus::transport::ibverbs {

class Fabric {
 public:
  virtual ~Fabric() = default;
  // Bytes a SEND may carry inline (copied into the work request: the buffer is free as soon as the call returns).
  virtual size_t maxInline() const = 0;
  // SEND len bytes at addr (registered, lkey) on queue pair qp; the peer's next posted receive on qp takes them.
  virtual void postSend(int qp, uint64_t wrId, const void* addr, size_t len, uint32_t lkey, bool inlined) = 0;
  // RDMA WRITE len bytes from addr (lkey) to the peer's raddr (rkey); with an immediate value, it also consumes
  // the peer's next posted receive on qp, which completes as RecvImm carrying imm.
  virtual void postWrite(int qp, uint64_t wrId, const void* addr, size_t len, uint32_t lkey, uint64_t raddr,
                         uint32_t rkey, bool withImm, uint32_t imm) = 0;
  // A receive on qp into len bytes at addr (lkey); len may be 0 (only writes with immediate land there).
  virtual void postRecv(int qp, uint64_t wrId, void* addr, size_t len, uint32_t lkey) = 0;
};

struct Completion {
  enum class Kind : uint8_t { Send, Write, Recv, RecvImm };
  Kind kind = Kind::Send;
  int qp = 0;
  uint64_t wrId = 0;
  uint32_t bytes = 0;  // Recv: the bytes the SEND carried
  uint32_t imm = 0;    // RecvImm
  bool ok = true;
  std::string status;  // when !ok: ibv_wc_status_str and the vendor error
};

}  // namespace chorus::transport::ibverbs
