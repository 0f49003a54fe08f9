// libFuzzer target: the bootstrap frames, as the root reads a joiner's frame and a joiner reads the root's table
// once their MACs have passed (a stranger cannot get further than the MAC; a rank with the secret can send any
// bytes behind it). The first byte picks the frame and the table's rank count.
#include "lib/comm/bootstrap.h"
#include "test/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::vector<uint8_t> frame(data + 1, data + size);
  chorus::fuzz::refusedOrParsed([&] {
    if (data[0] & 1) {
      chorus::auth::Nonce nonce;
      chorus::RankInfo info;
      chorus::decodeJoin(frame, "fuzz", &nonce, &info);
    } else {
      chorus::BootstrapResult r = chorus::decodeTable(frame, 1 + (data[0] >> 1) % 8, "fuzz");
      (void)r;
    }
  });
  return 0;
}
