// libFuzzer target: the environment grammars a user writes — CHORUS_ALGO, CHORUS_TRANSPORTS, CHORUS_SOCKET_IFNAME
// and the UCX_TLS list the UCX plugin reads. The first byte picks the grammar; the rest is the value.
#include <string>

#include "lib/base/env.h"
#include "lib/base/socket.h"
#include "test/fuzz/fuzz_common.h"
#include "transports/registry.h"
#include "transports/ucx/tls_list.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  chorus::fuzz::refusedOrParsed([&] {
    switch (data[0] % 4) {
      case 0: (void)chorus::parseAlgo(text); break;
      case 1: (void)chorus::transport::select(text); break;
      case 2: {
        std::string ifname;
        (void)chorus::findInterfaceAddress(text, &ifname);
        break;
      }
      case 3: (void)chorus::transport::ucx::tlsListAllows(text, {"tcp", "sm", "rc"}); break;
    }
  });
  return 0;
}
