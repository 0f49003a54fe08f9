// The ibverbs transport's protocol engine (transports/ibverbs/engine.h) without a device: two channels wired back
// to back through a memory fabric (test/ibverbs_pair.h) that checks what hardware would. This tests our protocol,
// not verbs: the verbs calls only run on hardware (scripts/rdma-check.sh).
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <random>

#include "lib/base/error.h"
#include "test/ibverbs_pair.h"

using namespace chorus;
using namespace chorus::transport::ibverbs;
using chorus::test::ibverbs::Pair;
using chorus::test::ibverbs::smallConfig;

namespace {

OpTag tagFor(uint64_t seq, uint64_t count, OpKind kind = OpKind::Send) {
  OpTag t;
  t.seq = seq;
  t.count = count;
  t.root = 0;
  t.kind = kind;
  t.dtype = chorusUint8;
  return t;
}

std::vector<uint8_t> pattern(size_t len, unsigned seed) {
  std::vector<uint8_t> v(len);
  for (size_t i = 0; i < len; ++i) v[i] = uint8_t((i * 131 + seed * 7919 + (i >> 8)) & 0xff);
  return v;
}


// Sends each size from side `from` to the other, receives posted first or after, and checks every byte.
void exchange(Pair& p, int from, const std::vector<size_t>& sizes, bool recvFirst) {
  const int to = 1 - from;
  std::vector<std::vector<uint8_t>> out, in;
  std::vector<Request> sreq(sizes.size()), rreq(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.push_back(pattern(sizes[i], unsigned(i + 1)));
    in.emplace_back(sizes[i], 0xee);
  }
  auto postRecvs = [&] {
    for (size_t i = 0; i < sizes.size(); ++i) p[to].irecv(in[i].data(), sizes[i], tagFor(i, sizes[i]), &rreq[i]);
  };
  if (recvFirst) postRecvs();
  for (size_t i = 0; i < sizes.size(); ++i) p[from].isend(out[i].data(), sizes[i], tagFor(i, sizes[i]), &sreq[i]);
  if (!recvFirst) {
    p.runUntil([] { return false; }, 2000);
    postRecvs();
  }
  ASSERT_TRUE(p.runUntil([&] {
    for (size_t i = 0; i < sizes.size(); ++i)
      if (!sreq[i].done || !rreq[i].done) return false;
    return true;
  })) << p.violation();
  EXPECT_EQ(p.violation(), "");
  for (size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(in[i], out[i]) << "message " << i << " of " << sizes[i];
}

}  // namespace

TEST(IbverbsPlan, PiecesPartitionTheMessageAndEndEachQueuePairWithAnImmediate) {
  for (int qps : {1, 2, 3, 4, 8})
    for (size_t len : {size_t(1), size_t(1023), size_t(1024), size_t(4095), size_t(10000), size_t(65537),
                       size_t(1) << 20}) {
      ChannelConfig c = smallConfig(qps);
      auto pieces = planPieces(c, len);
      size_t at = 0;
      std::map<int, int> lasts;
      for (const Piece& p : pieces) {
        EXPECT_EQ(p.offset, at);
        EXPECT_LE(p.len, c.maxWriteBytes);
        EXPECT_GT(p.len, 0u);
        at += p.len;
        if (p.last) ++lasts[p.qp];
      }
      EXPECT_EQ(at, len);
      EXPECT_EQ(int(lasts.size()), queuePairsUsed(c, len));
      for (auto [qp, n] : lasts) EXPECT_EQ(n, 1) << "queue pair " << qp;
      EXPECT_EQ(queuePairsUsed(c, len), int(std::min<size_t>(std::max<size_t>(len / 1024, 1), size_t(qps))));
    }
}

TEST(IbverbsEngine, EagerMessagesOfEverySizeArriveWhole) {
  Pair p(smallConfig());
  exchange(p, 0, {0, 1, 7, 64, 128 - kHeaderBytes, 200, 255, 256}, true);
  exchange(p, 1, {256, 3, 0, 100}, false);
}

TEST(IbverbsEngine, RendezvousMessagesAreWrittenInPlaceOverEveryQueuePair) {
  for (int qps : {1, 2, 4}) {
    Pair p(smallConfig(qps), unsigned(qps));
    exchange(p, 0, {257, 1024, 2047, 4096 + 3, 3 * 4096 + 17, 100000}, true);
    exchange(p, 1, {300000, 257}, false);
  }
}

TEST(IbverbsEngine, ASenderFarAheadOfItsReceiverNeverOverrunsIt) {
  ChannelConfig c = smallConfig();
  Pair p(c);
  std::vector<size_t> sizes(500);
  for (size_t i = 0; i < sizes.size(); ++i) sizes[i] = i % 3 == 0 ? 100 : i % 3 == 1 ? 0 : 256;
  exchange(p, 0, sizes, false);
  EXPECT_GT(p[0].stats().creditRequests, 0u);
  EXPECT_GT(p[1].stats().unexpected, 0u);
}

TEST(IbverbsEngine, OneWayStreamReturnsCreditsWithoutTrafficBack) {
  ChannelConfig c = smallConfig();
  c.credits = 4;
  Pair p(c, 7);
  std::vector<uint8_t> out = pattern(64, 3), in(64);
  int received = 0;
  for (int i = 0; i < 2000; ++i) {
    Request s, r;
    p[1].irecv(in.data(), 64, tagFor(uint64_t(i), 64), &r);
    p[0].isend(out.data(), 64, tagFor(uint64_t(i), 64), &s);
    ASSERT_TRUE(p.runUntil([&] { return s.done && r.done; })) << "message " << i << ": " << p.violation();
    received += in == out;
  }
  EXPECT_EQ(received, 2000);
  EXPECT_EQ(p.violation(), "");
  EXPECT_EQ(p[1].stats().eagerSent, 0u);  // nothing went back but credit returns
}

TEST(IbverbsEngine, AReceiveAdvertisedBeforeItsSendIsServedWhenTheSendComes) {
  Pair p(smallConfig(2));
  std::vector<uint8_t> out = pattern(50000, 9), in(50000);
  Request s, r;
  p[1].irecv(in.data(), in.size(), tagFor(0, in.size()), &r);
  p.runUntil([] { return false; }, 100);  // the clear-to-send arrives before the send is posted
  EXPECT_FALSE(r.done);
  p[0].isend(out.data(), out.size(), tagFor(0, out.size()), &s);
  ASSERT_TRUE(p.runUntil([&] { return s.done && r.done; })) << p.violation();
  EXPECT_EQ(in, out);
}

TEST(IbverbsEngine, ReceivesOfOneClassWaitingForTheirSendsNeverHoldUpTheOther) {
  ChannelConfig c = smallConfig(2);
  Pair p(c);
  // More standing rendezvous receives of the tagged class than may be advertised, none of them sent yet.
  std::vector<std::vector<uint8_t>> standing(size_t(c.advertised) + 3, std::vector<uint8_t>(5000));
  std::vector<Request> sreq(standing.size());
  for (size_t i = 0; i < standing.size(); ++i)
    p[1].irecv(standing[i].data(), 5000, tagFor(i, 5000, OpKind::Tagged), &sreq[i]);
  // The data class still flows, eager and rendezvous.
  exchange(p, 0, {10, 5000, 70000, 256, 257}, true);
  for (const Request& r : sreq) EXPECT_FALSE(r.done);
  // And the tagged messages arrive when sent, in their order.
  std::vector<std::vector<uint8_t>> out;
  std::vector<Request> tsend(standing.size());
  for (size_t i = 0; i < standing.size(); ++i) {
    out.push_back(pattern(5000, unsigned(100 + i)));
    p[0].isend(out[i].data(), 5000, tagFor(i, 5000, OpKind::Tagged), &tsend[i]);
  }
  ASSERT_TRUE(p.runUntil([&] {
    for (size_t i = 0; i < standing.size(); ++i)
      if (!sreq[i].done || !tsend[i].done) return false;
    return true;
  })) << p.violation();
  for (size_t i = 0; i < standing.size(); ++i) EXPECT_EQ(standing[i], out[i]);
}

// Eager messages whose receives are not posted stay in the slots they landed in (nothing is allocated for them), and
// hold only their own class's credits: the other class still flows, and they arrive whole once received.
TEST(IbverbsEngine, MessagesWaitingForTheirReceivesHoldOnlyTheirOwnClass) {
  ChannelConfig c = smallConfig();
  Pair p(c);
  const int n = c.credits + 5;  // more than the class's credits: the last ones wait at the sender
  std::vector<std::vector<uint8_t>> out, in(size_t(n), std::vector<uint8_t>(100));
  std::vector<Request> sreq(static_cast<size_t>(n)), rreq(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    out.push_back(pattern(100, unsigned(i + 50)));
    p[0].isend(out[size_t(i)].data(), 100, tagFor(uint64_t(i), 100, OpKind::Tagged), &sreq[size_t(i)]);
  }
  p.runUntil([] { return false; }, 5000);
  int sent = 0;
  for (const Request& r : sreq) sent += r.done;
  EXPECT_EQ(sent, c.credits);  // the class's credits, and not one more, went out
  EXPECT_EQ(p[1].stats().unexpected, uint64_t(c.credits));
  exchange(p, 0, {10, 256, 5000, 0}, true);  // the data class is not held up
  exchange(p, 1, {100, 70000}, false);
  for (int i = 0; i < n; ++i)
    p[1].irecv(in[size_t(i)].data(), 100, tagFor(uint64_t(i), 100, OpKind::Tagged), &rreq[size_t(i)]);
  ASSERT_TRUE(p.runUntil([&] {
    for (int i = 0; i < n; ++i)
      if (!sreq[size_t(i)].done || !rreq[size_t(i)].done) return false;
    return true;
  })) << p.violation();
  EXPECT_EQ(p.violation(), "");
  for (int i = 0; i < n; ++i) EXPECT_EQ(in[size_t(i)], out[size_t(i)]) << i;
}

TEST(IbverbsEngine, RandomTrafficBothWaysMatchesItsReference) {
  for (unsigned seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    ChannelConfig c = smallConfig(int(seed % 3) + 1);
    c.credits = int(seed % 4) + 1;
    Pair p(c, seed);
    struct Msg {
      std::vector<uint8_t> out, in;
      Request s, r;
      OpTag tag;
      int from;
    };
    std::deque<Msg> msgs;
    std::uniform_int_distribution<size_t> size(0, 3 * 4096 + 100);
    const int n = 300;
    // Each side posts its sends and receives in its own order, interleaved with the wire's steps.
    std::vector<size_t> sendNext(4, 0), recvNext(4, 0);
    std::vector<std::vector<Msg*>> stream(4);  // [from * 2 + cls]
    for (int i = 0; i < n; ++i) {
      Msg& m = msgs.emplace_back();
      m.from = int(rng() % 2);
      const int cls = int(rng() % 2);
      size_t len = rng() % 4 == 0 ? size(rng) : rng() % 300;
      m.out = pattern(len, unsigned(i));
      m.in.assign(len, 0);
      m.tag = tagFor(stream[size_t(m.from * 2 + cls)].size(), len, cls ? OpKind::Tagged : OpKind::Send);
      stream[size_t(m.from * 2 + cls)].push_back(&m);
    }
    for (int round = 0; round < 4 * n; ++round) {
      const size_t k = rng() % 4;
      if (rng() % 2 && sendNext[k] < stream[k].size()) {
        Msg* m = stream[k][sendNext[k]++];
        p[m->from].isend(m->out.data(), m->out.size(), m->tag, &m->s);
      } else if (recvNext[k] < stream[k].size()) {
        Msg* m = stream[k][recvNext[k]++];
        p[1 - m->from].irecv(m->in.data(), m->in.size(), m->tag, &m->r);
      }
      for (int s = rng() % 3; s > 0; --s) p.step();
    }
    for (size_t k = 0; k < 4; ++k) {
      while (sendNext[k] < stream[k].size()) {
        Msg* m = stream[k][sendNext[k]++];
        p[m->from].isend(m->out.data(), m->out.size(), m->tag, &m->s);
      }
      while (recvNext[k] < stream[k].size()) {
        Msg* m = stream[k][recvNext[k]++];
        p[1 - m->from].irecv(m->in.data(), m->in.size(), m->tag, &m->r);
      }
    }
    ASSERT_TRUE(p.runUntil([&] {
      for (const Msg& m : msgs)
        if (!m.s.done || !m.r.done) return false;
      return true;
    })) << "seed " << seed << ": " << p.violation();
    EXPECT_EQ(p.violation(), "") << "seed " << seed;
    for (size_t i = 0; i < msgs.size(); ++i) ASSERT_EQ(msgs[i].in, msgs[i].out) << "seed " << seed << " message " << i;
    EXPECT_FALSE(p[0].busy());
    EXPECT_FALSE(p[1].busy());
  }
}

namespace {

// Runs the pair until it throws; returns the error (code and text).
std::optional<Error> runToError(Pair& p, int maxSteps = 100000) {
  try {
    p.runUntil([] { return false; }, maxSteps);
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

}  // namespace

TEST(IbverbsEngine, MismatchedCallsNameBothCallsOnBothPaths) {
  {  // eager: different calls
    Pair p(smallConfig());
    uint8_t a[8] = {}, b[8];
    Request s, r;
    p[1].irecv(b, 8, tagFor(3, 8, OpKind::AllReduce), &r);
    p[0].isend(a, 8, tagFor(4, 8, OpKind::Broadcast), &s);
    auto e = runToError(p);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code(), chorusInvalidUsage);
    EXPECT_NE(std::string(e->what()).find("mismatched calls: rank 1 called AllReduce"), std::string::npos) << e->what();
    EXPECT_NE(std::string(e->what()).find("rank 0 called Broadcast"), std::string::npos) << e->what();
  }
  for (bool senderLarger : {false, true}) {  // one side eager, the other rendezvous: the same call, sizes differ
    Pair p(smallConfig());
    std::vector<uint8_t> a(senderLarger ? 5000 : 100), b(senderLarger ? 100 : 5000);
    Request s, r;
    p[1].irecv(b.data(), b.size(), tagFor(0, 25, OpKind::AllGather), &r);
    p[0].isend(a.data(), a.size(), tagFor(0, 25, OpKind::AllGather), &s);
    auto e = runToError(p);
    ASSERT_TRUE(e) << "sender larger: " << senderLarger;
    EXPECT_EQ(e->code(), chorusInvalidUsage);
    EXPECT_NE(std::string(e->what()).find("disagree on the size"), std::string::npos) << e->what();
    EXPECT_NE(std::string(e->what()).find("5000"), std::string::npos) << e->what();
  }
}

TEST(IbverbsEngine, APeerAbortIsReportedWithItsText) {
  Pair p(smallConfig());
  uint8_t b[8];
  Request r;
  p[1].irecv(b, 8, tagFor(0, 8), &r);
  p[0].abort(chorusRemoteError, "rank 0 lost its mind");
  auto e = runToError(p);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), chorusRemoteError);
  EXPECT_EQ(std::string(e->what()), "rank 0 failed and aborted the communicator: rank 0 lost its mind");
}

TEST(IbverbsEngine, AFailedWorkRequestNamesThePeerAndTheStatus) {
  Pair p(smallConfig());
  p.injectFailure(0, "transport retry counter exceeded (vendor error 0x81)");
  auto e = runToError(p);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), chorusRemoteError);
  EXPECT_NE(std::string(e->what()).find("rank 0: connection to rank 1 failed"), std::string::npos) << e->what();
  EXPECT_NE(std::string(e->what()).find("retry counter exceeded"), std::string::npos) << e->what();
}

TEST(IbverbsEngine, GoodbyeFailsOnlyTheReceivesItLeavesUnserved) {
  Pair p(smallConfig(2));
  std::vector<uint8_t> out = pattern(9000, 1), in(9000), late(16);
  Request s, r, optionalReq, lateReq;
  p[1].irecv(in.data(), in.size(), tagFor(0, in.size()), &r);
  OpTag standing = tagFor(0, 16, OpKind::Tagged);
  standing.root = kEnvelopeRoot;
  optionalReq.optional = true;
  p[1].irecv(late.data(), 16, standing, &optionalReq);
  p[0].isend(out.data(), out.size(), tagFor(0, out.size()), &s);
  p[0].bye();
  ASSERT_TRUE(p.runUntil([&] { return r.done && p[0].closed(); })) << p.violation();
  EXPECT_EQ(in, out);
  EXPECT_TRUE(p[1].peerSaidBye());
  EXPECT_FALSE(p[1].busy());  // the standing receive is optional
  try {
    p[1].irecv(late.data(), 16, tagFor(1, 16), &lateReq);
    FAIL() << "a receive the peer will never serve was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), chorusRemoteError);
    EXPECT_NE(std::string(e.what()).find("without sending the message of"), std::string::npos) << e.what();
  }
}

TEST(IbverbsEngine, RegistrationsAreHeldOnlyWhileTransfersRun) {
  ChannelConfig c = smallConfig(2);
  Pair p(c, 3, /*cacheBytes=*/0);  // nothing cached: every lease's registration ends with the transfer
  const size_t base0 = p.nic(0).regions(), base1 = p.nic(1).regions();
  exchange(p, 0, {70000, 5000, 300}, true);
  EXPECT_EQ(p.nic(0).regions(), base0);
  EXPECT_EQ(p.nic(1).regions(), base1);
  EXPECT_EQ(p.violation(), "");
}

// A send's buffer is only read, so read-only memory (a constant, a file mapped read-only) goes as other memory
// does, by eager copy and by rendezvous alike; the fake NIC refuses to register it for writing, as ibv_reg_mr does.
TEST(IbverbsEngine, ReadOnlyMemoryIsSentByEveryPath) {
  const size_t bytes = 3 * 4096 + 100;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  const std::vector<uint8_t> want = pattern(bytes, 5);
  std::memcpy(mem, want.data(), bytes);
  ASSERT_EQ(mprotect(mem, bytes, PROT_READ), 0);
  for (size_t len : {size_t{100}, bytes}) {  // eager, then rendezvous
    Pair p(smallConfig(2), unsigned(len));
    std::vector<uint8_t> in(len, 0xee);
    Request sreq, rreq;
    p[1].irecv(in.data(), len, tagFor(0, len), &rreq);
    p[0].isend(static_cast<const uint8_t*>(mem), len, tagFor(0, len), &sreq);
    ASSERT_TRUE(p.runUntil([&] { return sreq.done && rreq.done; })) << p.violation();
    EXPECT_EQ(p.violation(), "");
    EXPECT_TRUE(std::equal(in.begin(), in.end(), want.begin())) << len << " bytes";
  }
  munmap(mem, bytes);
}

// Whatever bytes a peer sends, a channel either takes them as the protocol says or fails with a chorus::Error naming
// the peer: never a crash, an out-of-bounds access (the sanitizer builds run this) or another exception.
TEST(IbverbsEngine, GarbageFromThePeerIsAnErrorNeverACrash) {
  std::mt19937 rng(17);
  int errors = 0;
  for (int i = 0; i < 3000; ++i) {
    Pair p(smallConfig(2), unsigned(i));
    std::vector<uint8_t> in(300), big(5000);
    Request r1, r2;
    p[1].irecv(in.data(), in.size(), tagFor(0, in.size()), &r1);
    p[1].irecv(big.data(), big.size(), tagFor(1, big.size()), &r2);
    std::vector<uint8_t> msg(rng() % (kHeaderBytes + 400));
    for (auto& b : msg) b = uint8_t(rng());
    if (msg.size() >= kHeaderBytes && rng() % 2) {  // a plausible header, so the checks past the type run too
      WireHeader h{};
      std::memcpy(&h, msg.data(), kHeaderBytes);
      h.type = MsgType(1 + rng() % 6);
      h.cls = uint8_t(rng() % 3);
      h.msgSeq = rng() % 3;
      h.len = rng() % 2 ? msg.size() - kHeaderBytes : rng() % 6000;
      h.kind = uint8_t(OpKind::Send);
      h.seq = h.msgSeq;
      h.count = h.len;
      std::memcpy(msg.data(), &h, kHeaderBytes);
    }
    p.injectMessage(1, msg);
    try {
      p.runUntil([] { return false; }, 50);
    } catch (const Error& e) {
      ++errors;
      EXPECT_TRUE(e.code() == chorusRemoteError || e.code() == chorusInvalidUsage) << e.what();
    }
  }
  EXPECT_GT(errors, 2000);
}
