// On-the-wire formats of the TCP transport: the connection handshake and the per-part frame header.
#pragma once

#include <cstdint>

#include "transports/handshake.h"

namespace chorus::transport::tcp {

constexpr uint32_t kHelloMagic = 0x43485348;  // "CHSH"
constexpr uint32_t kFrameMagic = 0x43484652;  // "CHFR"
constexpr uint32_t kWireVersion = 3;  // 2: a connection for tagged messages; 3: sealed Hellos

// First bytes on every data connection, sent by the connecting side.
struct Hello {
  uint32_t magic;
  uint32_t version;
  uint64_t commId;
  int32_t fromRank;
  int32_t sockIndex;
  int32_t nsocks;
  int32_t toRank;
  Seal seal;
};
static_assert(sizeof(Hello) == 80);

enum class FrameType : uint8_t { Data = 1, Bye = 2, Abort = 3 };

struct WireHeader {
  uint32_t magic;
  FrameType type;
  uint8_t kind, dtype, redop;
  int32_t root;
  uint32_t code;        // Abort: the chorusResult_t; partLen is then the length of the reason text
  uint64_t seq, count;  // OpTag
  uint64_t msgLen, partOffset, partLen;
  uint64_t reserved;
};
static_assert(sizeof(WireHeader) == 64);

constexpr uint64_t kMaxAbortText = 4096;

}  // namespace chorus::transport::tcp
