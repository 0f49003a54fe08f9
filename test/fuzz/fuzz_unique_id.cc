// libFuzzer target: the unique id a rank is handed from outside (chorusCommInitRank's commId), decoded.
#include <cstring>

#include "lib/comm/bootstrap.h"
#include "test/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  chorusUniqueId id{};
  std::memcpy(id.internal, data, std::min(size, sizeof id.internal));
  chorus::fuzz::refusedOrParsed([&] {
    chorus::UniqueIdData d = chorus::decodeUniqueId(id);
    (void)d.root.str();
  });
  return 0;
}
