// libFuzzer target: the shared-memory transport's control frames (Wake, Bye, Abort with its text) as a pair's
// control socket reads them from the peer, then the socket closing.
#include "test/fuzz/fuzz_common.h"
#include "transports/shm/control.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  chorus::fuzz::Fed fed(data, size);
  if (fed.in < 0) return 0;
  chorus::transport::shm::FrameReader reader;
  chorus::fuzz::refusedOrParsed([&] {
    for (int i = 0; i < 64; ++i)
      if (reader.poll(fed.in, "peer") == chorus::transport::shm::FrameReader::Status::Closed) break;
  });
  return 0;
}
