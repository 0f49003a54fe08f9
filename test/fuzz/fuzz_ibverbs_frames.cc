// libFuzzer target: the ibverbs protocol engine's messages as a peer's SENDs and writes with immediate deliver them
// (transports/ibverbs/engine.h), into a channel with eager and rendezvous receives of both classes posted. The
// input is a sequence of records: a byte saying what it is (bit 7: a write with immediate, whose 4 bytes follow;
// else a SEND whose length is the byte's low 7 bits times 4, then its bytes), delivered one at a time.
#include "test/fuzz/fuzz_common.h"
#include "test/ibverbs_pair.h"

using namespace chorus::test::ibverbs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ChannelConfig c = smallConfig(2);
  c.credits = 4;
  Pair p(c);
  std::vector<uint8_t> small(100), big(5000), tagged(300);
  chorus::Request r[3];
  chorus::fuzz::refusedOrParsed([&] {
    chorus::OpTag t;
    t.kind = chorus::OpKind::Send;
    t.count = 100;
    p[1].irecv(small.data(), small.size(), t, &r[0]);
    t.seq = 1;
    t.count = 5000;
    p[1].irecv(big.data(), big.size(), t, &r[1]);
    t.seq = 0;
    t.kind = chorus::OpKind::Tagged;
    t.count = 300;
    p[1].irecv(tagged.data(), tagged.size(), t, &r[2]);
    size_t at = 0;
    while (at < size) {
      const uint8_t kind = data[at++];
      if (kind & 0x80) {
        uint32_t imm = 0;
        std::memcpy(&imm, data + at, std::min<size_t>(4, size - at));
        at += 4;
        p.injectImm(1, int(kind & 1), imm);
      } else {
        const size_t n = std::min<size_t>(size_t(kind) * 4, size - at);
        p.injectMessage(1, std::vector<uint8_t>(data + at, data + at + n));
        at += n;
      }
      p.runUntil([] { return false; }, 8);
    }
  });
  return 0;
}
