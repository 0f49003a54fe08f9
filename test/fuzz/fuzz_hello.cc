// libFuzzer target: the transports' connection handshakes (the TCP and shared-memory Hellos) as an acceptor checks
// them. The first byte picks the Hello and whether the harness seals it with the communicator's key (a peer that
// knows the secret can send any fields behind a valid seal; a stranger cannot get past it).
#include <cstring>

#include "test/fuzz/fuzz_common.h"
#include "transports/handshake.h"
#include "transports/shm/control.h"
#include "transports/tcp/wire.h"

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
  const bool sealIt = data[0] & 2;
  chorus::fuzz::refusedOrParsed([&] {
    if (data[0] & 1) check<tcp::Hello>(data + 1, size - 1, sealIt, tcp::kHelloMagic, tcp::kWireVersion, setup);
    else check<shm::Hello>(data + 1, size - 1, sealIt, shm::kHelloMagic, shm::kWireVersion, setup);
  });
  return 0;
}
