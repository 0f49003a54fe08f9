// libFuzzer target: the TCP transport's frames (transports/tcp/wire.h) as a data connection reads them from a
// peer, with one receive posted whose tag and lengths the first bytes choose (so headers that match it reach the
// payload path), then whatever the peer sends, then the connection closing.
#include <cstring>

#include "test/fuzz/fuzz_common.h"
#include "transports/tcp/tcp_socket.h"

using namespace chorus::transport;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const bool control = data[0] & 1;
  const uint64_t partLen = data[1] % 64, offset = data[2] % 8;
  chorus::fuzz::Fed fed(data + 4, size - 4);
  if (fed.in < 0) return 0;
  static const PeerInfo self{0, 1, "self", "h"}, peer{1, 2, "peer", "h"};
  tcp::DataSocket sock(chorus::Fd(::dup(fed.in)), &self, &peer, control);
  std::vector<uint8_t> dst(partLen + offset + 1);
  chorus::Request req;
  req.pendingParts = 1;
  chorus::OpTag tag;
  tag.seq = data[3];
  tag.count = partLen;
  tag.kind = chorus::OpKind::AllReduce;
  sock.queueRecv({dst.data(), partLen + offset, offset, partLen, tag, &req});
  chorus::fuzz::refusedOrParsed([&] {
    for (int i = 0; i < 64; ++i) {
      sock.onEvents(0x001 | 0x010);  // EPOLLIN | EPOLLHUP
      if (!sock.drain()) break;
    }
  });
  return 0;
}
