// libFuzzer target: the transports' connection handshakes (the TCP and shared-memory Hellos, UCX's control
// messages with their text) as the receiving side checks them, UCX's message header as a receive reads it (the
// tag it carries, described in the error of a mismatch), and the state a heartbeat reports (Note [Liveness]). The first byte picks which and whether the harness seals it with the communicator's key (a peer
// that knows the secret can send any fields behind a valid seal; a stranger cannot get past it).
#include <cstring>

#include "test/fuzz/fuzz_common.h"
#include "transports/handshake.h"
#include "transports/shm/control.h"
#include "lib/comm/liveness.h"
#include "transports/tcp/wire.h"
#include "transports/ucx/wire.h"

using namespace chorus::transport;

namespace {
Setup makeSetup() {
  Setup s;
  s.rank = 1;
  s.nranks = 4;
  s.secret = 0x5eed;
  s.commId = 0xc0ffee;
  for (int r = 0; r < 4; ++r) s.peers.push_back({r, r + 10, "h", "h"});
  return s;
}

template <typename Hello>
void check(const uint8_t* data, size_t size, bool sealIt, uint32_t magic, uint32_t version, const Setup& setup) {
  Hello h{};
  std::memcpy(&h, data, std::min(size, sizeof h));
  if (sealIt) seal(h, setup);
  (void)helloProblem(h, magic, version, setup);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Setup setup = makeSetup();
  if (size < 1) return 0;
  const bool sealIt = data[0] & 4;
  chorus::fuzz::refusedOrParsed([&] {
    switch (data[0] % 5) {
      case 0: check<shm::Hello>(data + 1, size - 1, sealIt, shm::kHelloMagic, shm::kWireVersion, setup); break;
      case 1: check<tcp::Hello>(data + 1, size - 1, sealIt, tcp::kHelloMagic, tcp::kWireVersion, setup); break;
      case 2: {
        ucx::Control c{};
        std::memcpy(&c, data + 1, std::min(size - 1, sizeof c));
        const size_t rest = size - 1 > sizeof c ? size - 1 - sizeof c : 0;
        const std::string text(reinterpret_cast<const char*>(data + 1 + sizeof c), std::min<size_t>(rest, c.textLen));
        if (sealIt) seal(c, setup, text.data(), text.size());
        (void)ucx::controlProblem(c, 0, text, setup);
        break;
      }
      case 3: {
        uint64_t v = 0;
        std::memcpy(&v, data + 1, std::min(size - 1, sizeof v));
        (void)chorus::Activity::unpack(v).describe();
        break;
      }
      case 4: {
        ucx::WireHeader h{};
        std::memcpy(&h, data + 1, std::min(size - 1, sizeof h));
        (void)chorus::describe(chorus::tagOf(h));
        break;
      }
    }
  });
  return 0;
}
