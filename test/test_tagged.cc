// Tagged point-to-point (chorusSendTagged / chorusRecvTagged): receives match by source and tag, not by order;
// CHORUS_ANY_SOURCE takes whichever message fits first; one sender's messages of one tag keep their order; sends
// never wait for their receive, and the two kinds of messages travel apart, so collectives and tagged messages
// never wait for each other, in either order; a size mismatch
// fails the receive only; bad arguments are refused by name; a pending receive ends on abort, on its timeout and
// on destroy instead of hanging. A randomised plan compares every payload with the one sent, across the
// transports' size thresholds, with receives posted in shuffled order and collectives in between.
//
// Every test runs under a watchdog: a test that takes longer than 20 s (60 s for the plan) ends the process.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test/comms.h"
#include "test/error_checks.h"
#include "test/ranks.h"
#include "test/watchdog.h"

namespace {

using chorus::test::check;
using chorus::test::destroyAll;
using chorus::test::EnvGuard;
using chorus::test::makeComms;
using chorus::test::onAll;
using chorus::test::secondsSince;
using chorus::test::Watchdog;
using Clock = std::chrono::steady_clock;

std::vector<float> filled(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i % 1000);
  return v;
}

void expectEqual(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  if (got != want) throw std::runtime_error(what + ": wrong payload");
}

struct Stream {
  chorusStream_t s = nullptr;
  explicit Stream(chorusComm_t c) { check(chorusStreamCreate(c, &s), c, "chorusStreamCreate"); }
  ~Stream() { chorusStreamDestroy(s); }
  void sync(chorusComm_t c, const char* what) const { check(chorusStreamSynchronize(s), c, what); }
};

TEST(Tagged, ReceivesMatchByTagNotByOrder) {
  Watchdog wd;
  auto comms = makeComms(2);
  const std::vector<float> a = filled(1000, 1), b = filled(3, 7);
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    if (r == 0) {  // blocking sends return although rank 1 asks for tag 2 first
      check(chorusSendTagged(a.data(), a.size(), chorusFloat32, 1, 1, c, nullptr), c, "send tag 1");
      check(chorusSendTagged(b.data(), b.size(), chorusFloat32, 1, 2, c, nullptr), c, "send tag 2");
    } else {
      std::vector<float> gotB(b.size()), gotA(a.size());
      int from = -1;
      check(chorusRecvTagged(gotB.data(), gotB.size(), chorusFloat32, 0, 2, &from, c, nullptr), c, "recv tag 2");
      if (from != 0) throw std::runtime_error("source " + std::to_string(from));
      check(chorusRecvTagged(gotA.data(), gotA.size(), chorusFloat32, 0, 1, nullptr, c, nullptr), c, "recv tag 1");
      expectEqual(gotB, b, "tag 2");
      expectEqual(gotA, a, "tag 1");
    }
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
  destroyAll(comms);
}

TEST(Tagged, OneSendersMessagesOfOneTagKeepTheirOrder) {
  Watchdog wd;
  auto comms = makeComms(2);
  const int kMessages = 20;
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    for (int i = 0; i < kMessages; ++i) {
      std::vector<float> v = filled(1 + 997 * i, static_cast<float>(i));  // up to ~76 KB: both sides of thresholds
      if (r == 0) {
        check(chorusSendTagged(v.data(), v.size(), chorusFloat32, 1, 9, c, nullptr), c, "send");
      } else {
        std::vector<float> got(v.size());
        check(chorusRecvTagged(got.data(), got.size(), chorusFloat32, CHORUS_ANY_SOURCE, 9, nullptr, c, nullptr), c,
              "recv");
        expectEqual(got, v, "message " + std::to_string(i));
      }
    }
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
  destroyAll(comms);
}

TEST(Tagged, AnySourceTakesWhicheverComesFirst) {
  Watchdog wd;
  const int n = 4;
  auto comms = makeComms(n);
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    if (r != 0) {
      std::vector<float> v = filled(257, static_cast<float>(100 * r));
      check(chorusSendTagged(v.data(), v.size(), chorusFloat32, 0, 3, c, nullptr), c, "send");
      return;
    }
    std::set<int> sources;
    for (int i = 1; i < n; ++i) {
      std::vector<float> got(257);
      int from = -1;
      check(chorusRecvTagged(got.data(), got.size(), chorusFloat32, CHORUS_ANY_SOURCE, 3, &from, c, nullptr), c,
            "recv any");
      if (from < 1 || from >= n) throw std::runtime_error("source " + std::to_string(from));
      expectEqual(got, filled(257, static_cast<float>(100 * from)), "from rank " + std::to_string(from));
      sources.insert(from);
    }
    if (sources.size() != n - 1) throw std::runtime_error("a source was received twice");
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
  destroyAll(comms);
}

// Rank 0 sends a message larger than a socket's buffers before an AllReduce that rank 1 enters before it asks
// for the message: the message must not stand in the AllReduce's way (nor wait for its receive).
TEST(Tagged, CollectivesRunWhileMessagesWaitForTheirReceive) {
  Watchdog wd;
  const int n = 3;
  auto comms = makeComms(n);
  const std::vector<float> big = filled(size_t{1} << 20, 5);  // 4 MiB
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    std::vector<double> x(1001, r + 1.0);
    auto allReduce = [&] {
      check(chorusAllReduce(x.data(), x.data(), x.size(), chorusFloat64, chorusSum, c, nullptr), c, "AllReduce");
      for (double v : x)
        if (v != 6) throw std::runtime_error("AllReduce gave " + std::to_string(v));
    };
    if (r == 0) {
      check(chorusSendTagged(big.data(), big.size(), chorusFloat32, 1, 0, c, nullptr), c, "send");
      allReduce();
    } else if (r == 1) {
      allReduce();
      std::vector<float> got(big.size());
      check(chorusRecvTagged(got.data(), got.size(), chorusFloat32, 0, 0, nullptr, c, nullptr), c, "recv");
      expectEqual(got, big, "the large message");
    } else {
      allReduce();
    }
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
  destroyAll(comms);
}

// The other way round: rank 0's Broadcast finishes without rank 1 (its message waits in rank 1's transport), then
// rank 0 sends a tagged message that rank 1 waits for before it enters the Broadcast. The tagged message travels
// apart from the Broadcast's (its own FIFO, connection or UCX tag class), so it is not held behind it.
TEST(Tagged, AMessageSentAfterAnEagerCollectiveIsNotHeldBehindIt) {
  Watchdog wd;
  auto comms = makeComms(2);
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    std::vector<float> b = r == 0 ? filled(64, 3) : std::vector<float>(64), msg = filled(100, 8), got(100);
    auto broadcast = [&] {
      check(chorusBroadcast(b.data(), b.data(), b.size(), chorusFloat32, 0, c, nullptr), c, "Broadcast");
    };
    if (r == 0) {
      broadcast();
      check(chorusSendTagged(msg.data(), msg.size(), chorusFloat32, 1, 8, c, nullptr), c, "send");
    } else {
      check(chorusRecvTagged(got.data(), got.size(), chorusFloat32, 0, 8, nullptr, c, nullptr), c, "recv");
      expectEqual(got, msg, "the tagged message");
      broadcast();
      expectEqual(b, filled(64, 3), "the Broadcast");
    }
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
  destroyAll(comms);
}

// A receive pending on a stream does not hold up the collectives issued after it on the same communicator; its
// sender sends only after those collectives.
TEST(Tagged, PendingReceiveOnAStreamLetsLaterCollectivesRun) {
  Watchdog wd;
  auto comms = makeComms(2);
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    Stream s(c);
    std::vector<float> msg = filled(5000, 2), got(msg.size());
    if (r == 1) check(chorusRecvTagged(got.data(), got.size(), chorusFloat32, 0, 5, nullptr, c, s.s), c, "recv");
    for (int i = 0; i < 3; ++i) {
      std::vector<int32_t> x(17, r + 1);
      check(chorusAllReduce(x.data(), x.data(), x.size(), chorusInt32, chorusSum, c, nullptr), c, "AllReduce");
      if (x[16] != 3) throw std::runtime_error("AllReduce gave " + std::to_string(x[16]));
    }
    if (r == 0) {
      check(chorusSendTagged(msg.data(), msg.size(), chorusFloat32, 1, 5, c, s.s), c, "send");
      s.sync(c, "send's stream");
    } else {
      s.sync(c, "recv's stream");
      expectEqual(got, msg, "the message");
    }
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
  destroyAll(comms);
}

TEST(Tagged, ReceivesOnStreamsCompleteInAnyOrder) {
  Watchdog wd;
  auto comms = makeComms(2);
  const int kTags = 10;
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    Stream s(c);
    std::vector<std::vector<float>> bufs;
    for (int t = 0; t < kTags; ++t) bufs.push_back(r == 0 ? filled(100 * t + 1, static_cast<float>(t))
                                                           : std::vector<float>(100 * t + 1));
    std::vector<int> from(kTags, -1);
    for (int i = 0; i < kTags; ++i) {
      const int t = r == 0 ? i : kTags - 1 - i;  // receives posted in the reverse order of the sends
      if (r == 0)
        check(chorusSendTagged(bufs[t].data(), bufs[t].size(), chorusFloat32, 1, t, c, s.s), c, "send");
      else
        check(chorusRecvTagged(bufs[t].data(), bufs[t].size(), chorusFloat32, CHORUS_ANY_SOURCE, t, &from[t], c,
                               s.s),
              c, "recv");
    }
    s.sync(c, "stream");
    if (r == 1)
      for (int t = 0; t < kTags; ++t) {
        expectEqual(bufs[t], filled(100 * t + 1, static_cast<float>(t)), "tag " + std::to_string(t));
        if (from[t] != 0) throw std::runtime_error("source of tag " + std::to_string(t));
      }
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
  destroyAll(comms);
}

TEST(Tagged, SendToSelf) {
  Watchdog wd;
  auto comms = makeComms(2);
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    std::vector<int64_t> v(33, 40 + r), got(33);
    check(chorusSendTagged(v.data(), v.size(), chorusInt64, r, 4, c, nullptr), c, "send to self");
    int from = -1;
    check(chorusRecvTagged(got.data(), got.size(), chorusInt64, CHORUS_ANY_SOURCE, 4, &from, c, nullptr), c,
          "recv from self");
    if (got != v || from != r) throw std::runtime_error("self message");
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
  destroyAll(comms);
}

TEST(Tagged, SizeMismatchFailsTheReceiveOnly) {
  Watchdog wd;
  auto comms = makeComms(2);
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    std::vector<float> v = filled(10, 1), got(12);
    if (r == 0) {
      check(chorusSendTagged(v.data(), v.size(), chorusFloat32, 1, 1, c, nullptr), c, "send");
    } else {
      chorusResult_t rc = chorusRecvTagged(got.data(), got.size(), chorusFloat32, 0, 1, nullptr, c, nullptr);
      if (!chorus::test::Refused(rc, chorusInvalidUsage, nullptr, {"rank 1", "tag 1", "48 bytes", "40 bytes",
                                                                   "rank 0"}))
        throw std::runtime_error(std::string("mismatch not refused: ") + chorusGetLastError(nullptr));
    }
    // The communicator goes on: a collective, and a tagged message of the right size.
    std::vector<float> x(7, 1);
    check(chorusAllReduce(x.data(), x.data(), x.size(), chorusFloat32, chorusSum, c, nullptr), c, "AllReduce");
    if (r == 0) {
      check(chorusSendTagged(v.data(), v.size(), chorusFloat32, 1, 1, c, nullptr), c, "send again");
    } else {
      got.resize(10);
      check(chorusRecvTagged(got.data(), got.size(), chorusFloat32, 0, 1, nullptr, c, nullptr), c, "recv again");
      expectEqual(got, v, "second message");
    }
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
  destroyAll(comms);
}

TEST(Tagged, BadArgumentsAreRefusedByName) {
  Watchdog wd;
  auto comms = makeComms(2);
  chorusComm_t c = comms[0];
  float x[4] = {};
  EXPECT_REFUSED(chorusSendTagged(x, 4, chorusFloat32, 1, -1, c, nullptr), chorusInvalidArgument, c, "tag=-1");
  EXPECT_REFUSED(chorusSendTagged(x, 4, chorusFloat32, 2, 0, c, nullptr), chorusInvalidArgument, c, "peer=2");
  EXPECT_REFUSED(chorusSendTagged(x, 4, chorusFloat32, CHORUS_ANY_SOURCE, 0, c, nullptr), chorusInvalidArgument, c,
                 "peer=-1");
  EXPECT_REFUSED(chorusRecvTagged(x, 4, chorusFloat32, -2, 0, nullptr, c, nullptr), chorusInvalidArgument, c,
                 "peer=-2");
  EXPECT_REFUSED(chorusRecvTagged(nullptr, 4, chorusFloat32, 1, 0, nullptr, c, nullptr), chorusInvalidArgument, c,
                 "recvbuff is NULL");
  EXPECT_REFUSED(chorusSendTagged(x, 4, static_cast<chorusDataType_t>(99), 1, 0, c, nullptr), chorusInvalidArgument,
                 c, "datatype=99");
  EXPECT_REFUSED(chorusSendTagged(x, 4, chorusFloat32, 1, 0, nullptr, nullptr), chorusInvalidArgument, nullptr,
                 "comm");
  ASSERT_EQ(chorusGroupStart(), chorusSuccess);
  EXPECT_REFUSED(chorusSendTagged(x, 4, chorusFloat32, 1, 0, c, nullptr), chorusInvalidUsage, c, "group");
  ASSERT_EQ(chorusGroupEnd(), chorusSuccess);
  // Nothing was sent: the communicators still agree.
  auto errs = onAll(comms, [&](int, chorusComm_t cc) {
    float y = 1;
    check(chorusAllReduce(&y, &y, 1, chorusFloat32, chorusSum, cc, nullptr), cc, "AllReduce");
    if (y != 2) throw std::runtime_error("AllReduce after refusals");
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
  destroyAll(comms);
}

TEST(Tagged, PendingReceiveEndsOnAbort) {
  Watchdog wd;
  auto comms = makeComms(2);
  chorusStream_t s = nullptr;
  ASSERT_EQ(chorusStreamCreate(comms[1], &s), chorusSuccess);
  float got[8];
  ASSERT_EQ(chorusRecvTagged(got, 8, chorusFloat32, 0, 6, nullptr, comms[1], s), chorusSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(chorusCommAbort(comms[1]), chorusSuccess);  // destroys it; its streams stay until destroyed
  comms[1] = nullptr;
  const auto t0 = Clock::now();
  EXPECT_REFUSED(chorusStreamSynchronize(s), chorusInvalidUsage, nullptr, "tagged receive (tag 6 from rank 0");
  EXPECT_LT(secondsSince(t0), 2.0);
  EXPECT_EQ(chorusStreamDestroy(s), chorusSuccess);
  chorusCommDestroy(comms[0]);
}

TEST(Tagged, PendingReceiveTimesOutNamingIt) {
  Watchdog wd;
  EnvGuard env;
  env.set("CHORUS_TIMEOUT", "1");
  auto comms = makeComms(2);
  float got[8];
  const auto t0 = Clock::now();
  EXPECT_REFUSED(chorusRecvTagged(got, 8, chorusFloat32, CHORUS_ANY_SOURCE, 9, nullptr, comms[1], nullptr),
                 chorusTimeout, nullptr, "tagged receive (tag 9 from any source, 32 bytes)", "CHORUS_TIMEOUT");
  EXPECT_LT(secondsSince(t0), 5.0);
  for (auto& c : comms) chorusCommDestroy(c);
}

// A peer that destroys its communicator while this rank waits for a message from it (or from any source) fails the
// receive promptly, naming that peer; a peer no receive waits on may leave.
TEST(Tagged, PeerLeavingFailsAReceiveWaitingForIt) {
  Watchdog wd;
  for (int anySource = 0; anySource < 2; ++anySource) {
    SCOPED_TRACE(anySource ? "from any source" : "from rank 0");
    auto comms = makeComms(3);
    if (!anySource) {  // nothing waits on rank 2: a clean exit (an any-source receive waits on every peer)
      EXPECT_EQ(chorusCommDestroy(comms[2]), chorusSuccess);
      comms[2] = nullptr;
    }
    std::thread leaver([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      EXPECT_EQ(chorusCommDestroy(comms[0]), chorusSuccess);
    });
    float got[4];
    const auto t0 = Clock::now();
    const chorusResult_t rc =
        chorusRecvTagged(got, 4, chorusFloat32, anySource ? CHORUS_ANY_SOURCE : 0, 2, nullptr, comms[1], nullptr);
    leaver.join();
    comms[0] = nullptr;
    EXPECT_TRUE(chorus::test::Refused(rc, chorusRemoteError, nullptr, {"rank 0"}));
    EXPECT_LT(secondsSince(t0), 3.0);
    chorusCommDestroy(comms[1]);
    if (comms[2] != nullptr) chorusCommDestroy(comms[2]);
  }
}

TEST(Tagged, DestroyEndsAPendingReceive) {
  Watchdog wd;
  auto comms = makeComms(2);
  chorusStream_t s = nullptr;
  ASSERT_EQ(chorusStreamCreate(comms[1], &s), chorusSuccess);
  float got[8];
  ASSERT_EQ(chorusRecvTagged(got, 8, chorusFloat32, 0, 6, nullptr, comms[1], s), chorusSuccess);
  const auto t0 = Clock::now();
  destroyAll(comms);  // returns although the receive never got its message
  EXPECT_LT(secondsSince(t0), 5.0);
  // Rank 0 goes first, so rank 1's receive ends because its peer left (or, had rank 1 gone first, because its own
  // communicator was destroyed): either way the stream says so, naming the receive.
  EXPECT_NE(chorusStreamSynchronize(s), chorusSuccess);
  EXPECT_NE(std::string(chorusGetLastError(nullptr)).find("destroyed"), std::string::npos)
      << chorusGetLastError(nullptr);
  EXPECT_NE(std::string(chorusGetLastError(nullptr)).find("tagged receive (tag 6 from rank 0"), std::string::npos)
      << chorusGetLastError(nullptr);
  EXPECT_EQ(chorusStreamDestroy(s), chorusSuccess);
}

// The slow reference: a plan every rank derives from one seed. Message i goes from src to dst with tag i (or,
// for every third, tag kShared, received with CHORUS_ANY_SOURCE) and a length crossing the transports'
// thresholds. Each rank sends its messages on a stream in plan order, with an AllReduce every few messages, and
// posts its receives in an order of its own; every payload is compared with what its sender sent.
TEST(Tagged, RandomPlanMatchesTheReference) {
  Watchdog wd(60);
  const int n = 4, kMessages = 120, kShared = 100000;
  auto comms = makeComms(n);
  struct Msg {
    int src, dst, tag;
    size_t len;
  };
  std::mt19937 gen(12345);
  std::vector<Msg> plan;
  const size_t lens[] = {0, 1, 7, 1023, 4096, 16385, 70001, 300000};
  for (int i = 0; i < kMessages; ++i) {
    const int src = static_cast<int>(gen() % n), dst = static_cast<int>(gen() % n);
    plan.push_back({src, dst, i % 3 == 0 ? kShared : i, lens[gen() % 8]});
  }
  auto payload = [](int i, size_t len) {
    std::vector<uint8_t> v(len);
    for (size_t k = 0; k < len; ++k) v[k] = static_cast<uint8_t>(i * 31 + k * 7);
    return v;
  };
  auto errs = onAll(comms, [&](int r, chorusComm_t c) {
    Stream sends(c), recvs(c);
    std::vector<std::vector<uint8_t>> out, in;
    std::vector<int> inIdx, from;
    std::vector<std::pair<int, size_t>> sharedExpected;  // (plan index, len) of any-source messages to r
    for (int i = 0; i < kMessages; ++i)
      if (plan[i].dst == r) inIdx.push_back(i);
    std::mt19937 mine(static_cast<unsigned>(r));
    std::shuffle(inIdx.begin(), inIdx.end(), mine);
    // Any-source receives of one length must not take a message of another: shared tags are per length here.
    in.resize(inIdx.size());
    from.assign(inIdx.size(), -1);
    for (size_t k = 0; k < inIdx.size(); ++k) {
      const Msg& m = plan[inIdx[k]];
      in[k].resize(m.len);
      const bool shared = m.tag == kShared;
      check(chorusRecvTagged(in[k].data(), m.len, chorusUint8, shared ? CHORUS_ANY_SOURCE : m.src,
                             shared ? kShared + static_cast<int>(m.len) : m.tag, &from[k], c, recvs.s),
            c, "recv");
    }
    for (int i = 0; i < kMessages; ++i) {
      const Msg& m = plan[i];
      if (m.src == r) {
        out.push_back(payload(i, m.len));
        check(chorusSendTagged(out.back().data(), m.len, chorusUint8, m.dst,
                               m.tag == kShared ? kShared + static_cast<int>(m.len) : m.tag, c, sends.s),
              c, "send");
      }
      if (i % 10 == 9) {
        int32_t x = 1;
        check(chorusAllReduce(&x, &x, 1, chorusInt32, chorusSum, c, nullptr), c, "AllReduce");
        if (x != n) throw std::runtime_error("AllReduce in the plan");
      }
    }
    sends.sync(c, "sends");
    recvs.sync(c, "receives");
    // Specific receives got exactly their message; any-source ones some message of their length and tag, each
    // once, whose payload is its sender's.
    std::multiset<std::pair<int, int>> sharedGot, sharedWant;  // (source, len)
    for (size_t k = 0; k < inIdx.size(); ++k) {
      const Msg& m = plan[inIdx[k]];
      if (m.tag != kShared) {
        if (in[k] != payload(inIdx[k], m.len) || from[k] != m.src)
          throw std::runtime_error("message " + std::to_string(inIdx[k]) + " arrived wrong");
        continue;
      }
      sharedWant.insert({m.src, static_cast<int>(m.len)});
      sharedGot.insert({from[k], static_cast<int>(m.len)});
      bool someSender = false;  // the payload is that of a shared message of this length from the reported source
      for (int i = 0; i < kMessages && !someSender; ++i)
        someSender = plan[i].tag == kShared && plan[i].dst == r && plan[i].src == from[k] && plan[i].len == m.len &&
                     in[k] == payload(i, m.len);
      if (!someSender) throw std::runtime_error("an any-source message arrived wrong");
    }
    if (sharedGot != sharedWant) throw std::runtime_error("any-source receives got the wrong set of messages");
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
  destroyAll(comms);
}

}  // namespace
