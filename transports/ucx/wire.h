// On-the-wire formats of the UCX transport: the 64-bit UCP tags, the header in front of every data message and
// the control messages (Note [UCX transport] in ucx_transport.cc).
#pragma once

#include <cstdint>
#include <string>

#include "transports/handshake.h"

#include "lib/base/ops.h"

namespace chorus::transport::ucx {

constexpr uint32_t kControlMagic = 0x43485543;  // "CHUC"
constexpr uint32_t kWireVersion = 2;  // 2: sealed control messages

// Bits 63..62: message class; bits 31..0: the sender's rank. Receives match all 64 bits.
constexpr uint64_t kDataClass = 0;
constexpr uint64_t kControlClass = uint64_t{1} << 62;
constexpr uint64_t kTaggedClass = uint64_t{2} << 62;  // Note [Message classes] in lib/base/ops.h
constexpr uint64_t kFullMask = ~uint64_t{0};
// A data message's UCP class: collectives' or tagged point-to-point's.
inline uint64_t classOf(const OpTag& t) { return messageClass(t) == 0 ? kDataClass : kTaggedClass; }
constexpr uint64_t tagFor(uint64_t cls, int senderRank) { return cls | static_cast<uint32_t>(senderRank); }

// Opens every data message's first UCP message; repeats the OpTag (Note [Message tags] in transports/transport.h).
struct WireHeader {
  uint64_t seq, count;
  int32_t root;
  uint8_t kind, dtype, redop, pad;
  uint64_t len;  // payload bytes of the whole message
};
static_assert(sizeof(WireHeader) == 32);

enum class ControlType : uint32_t { Hello = 1, Bye = 2, Abort = 3 };

// Every control message carries the handshake fields, so each one is checked like a Hello.
struct Control {
  uint32_t magic, version;
  uint64_t commId;
  int32_t fromRank, toRank;
  ControlType type;
  uint32_t code;     // Abort: the chorusResult_t
  uint32_t textLen;  // Abort: bytes of reason text that follow (the seal covers them)
  uint32_t reserved;
  Seal seal;
};
static_assert(sizeof(Control) == 88);

// The checks of a control message from `peer` (both sides send a Hello, so not helloProblem's): "" to keep it.
// `text`: the bytes that followed it (an Abort's reason), which its seal covers. A replay passes; the transport
// refuses a nonce it has seen.
inline std::string controlProblem(const Control& c, int peer, const std::string& text, const Setup& setup) {
  if (c.magic != kControlMagic) return "bad magic (not a Chorus peer)";
  if (c.version != kWireVersion)
    return "wire version " + std::to_string(c.version) + " (this rank speaks " + std::to_string(kWireVersion) + ")";
  if (c.commId != setup.commId) return "it belongs to another communicator";
  if (!sealed(c, setup, text.data(), text.size())) return "wrong secret (its proof does not match)";
  if (c.fromRank != peer || c.toRank != setup.rank)
    return "unexpected ranks " + std::to_string(c.fromRank) + " -> " + std::to_string(c.toRank);
  return "";
}

}  // namespace chorus::transport::ucx
