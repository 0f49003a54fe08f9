// The transport registry and the plugins: the CHORUS_TRANSPORTS grammar and its errors, the choice per pair,
// communicators formed with a forced transport; plugin files that are not plugins of this version are refused
// without a crash while the communicator forms without them; with the UCX plugin absent the library still forms
// over shm/tcp and forcing ucx fails naming why; libchorus.so needs no UCX library; as root, a communicator
// of 2 simulated hosts x 2 ranks with shm inside a host and UCX across; and, driving transports directly, the
// handshake with strangers on the ports, a peer that never connects, a rank that blocks right after its setup,
// and UCX addresses that do not unpack; the ibverbs plugin without an RDMA device says why, and with one forms
// communicators and names bad settings.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/error.h"
#include "lib/base/socket.h"
#include "test/comms.h"
#include "test/ports.h"
#include "test/shell.h"
#include "test/watchdog.h"
#include "transports/handshake.h"
#include "transports/registry.h"
#include "transports/tcp/wire.h"
#include "transports/ucx/tls_list.h"

using namespace chorus;
using chorus::test::buildDir;
using chorus::test::EnvGuard;
using chorus::test::occurrences;
using chorus::test::RunResult;
using chorus::test::runShell;
using chorus::test::Watchdog;

namespace {

std::vector<std::string> names(const std::vector<const transport::Descriptor*>& v) {
  std::vector<std::string> out;
  for (const auto* d : v) out.push_back(d->name);
  return out;
}

// The message of the chorus::Error that f throws ("" if none).
template <typename F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool haveUcx() {
  transport::loadAllPlugins();
  return transport::find("ucx") != nullptr;
}

std::string sourceDir() {
  const char* s = std::getenv("TEST_SOURCE_DIR");
  return s ? s : "..";
}

// A fresh folder under /tmp, removed at the end of the scope.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/chorus-plugins.XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { (void)!std::system(("rm -rf " + path).c_str()); }
};

}  // namespace

TEST(Grammar, DefaultOrderAndLists) {
  EnvGuard env;
  env.set("CHORUS_SHM_DISABLE", nullptr);
  env.set("CHORUS_UCX_DISABLE", nullptr);
  std::vector<std::string> all = names(transport::select(""));
  ASSERT_GE(all.size(), 2u);
  EXPECT_EQ(all[0], "shm");
  EXPECT_EQ(all[1], "tcp");
  EXPECT_EQ(names(transport::select("tcp")), (std::vector<std::string>{"tcp"}));
  EXPECT_EQ(names(transport::select(" TCP , Shm ")), (std::vector<std::string>{"tcp", "shm"}));
  EXPECT_EQ(names(transport::select("tcp,tcp,shm")), (std::vector<std::string>{"tcp", "shm"}));
  std::vector<std::string> noShm = names(transport::select("^shm"));
  EXPECT_EQ(noShm[0], "tcp");
  EXPECT_EQ(std::count(noShm.begin(), noShm.end(), "shm"), 0);
  if (haveUcx()) {
    EXPECT_EQ(names(transport::select("ucx")), (std::vector<std::string>{"ucx"}));
    EXPECT_EQ(names(transport::select("shm,UCX")), (std::vector<std::string>{"shm", "ucx"}));
    EXPECT_EQ(names(transport::select("^shm,tcp")), (std::vector<std::string>{"ucx"}));
  }
}

TEST(Grammar, ShmDisableActsAsExclusion) {
  EnvGuard env;
  env.set("CHORUS_SHM_DISABLE", "1");
  std::vector<std::string> v = names(transport::select(""));
  EXPECT_EQ(v[0], "tcp");
  EXPECT_EQ(std::count(v.begin(), v.end(), "shm"), 0);
  // Naming shm explicitly still gets it: the user asked for it.
  EXPECT_EQ(names(transport::select("shm")), (std::vector<std::string>{"shm"}));
}

TEST(Grammar, UnknownAndUnavailableNamesAreErrors) {
  std::string e = errorOf([] { transport::select("tcp,infiniband"); });
  EXPECT_NE(e.find("unknown transport 'infiniband'"), std::string::npos) << e;
  EXPECT_NE(e.find("available: shm, tcp"), std::string::npos) << e;
  e = errorOf([] { transport::select("^shm,tcp,ucx"); });
  EXPECT_NE(e.find("leaves no transport"), std::string::npos) << e;
  if (!haveUcx()) {
    e = errorOf([] { transport::select("ucx"); });
    EXPECT_NE(e.find("transport ucx is not available"), std::string::npos) << e;
  }
}

TEST(Choice, FirstOfTheLowerRanksListBothOfferThatConnects) {
  std::vector<transport::PeerInfo> peers(4);
  for (int r = 0; r < 4; ++r) peers[r] = {r, 100 + r, "h", r < 2 ? "hostA" : "hostB"};
  std::vector<std::vector<std::string>> offered{{"shm", "tcp"}, {"shm", "tcp"}, {"tcp"}, {"shm", "tcp"}};
  EXPECT_EQ(transport::choosePair(0, 1, offered, peers)->name, "shm");  // same host
  EXPECT_EQ(transport::choosePair(1, 0, offered, peers)->name, "shm");  // symmetric
  EXPECT_EQ(transport::choosePair(0, 3, offered, peers)->name, "tcp");  // shm cannot connect across hosts
  EXPECT_EQ(transport::choosePair(2, 3, offered, peers)->name, "tcp");  // rank 2 offers no shm
  offered = {{"tcp", "shm"}, {"shm", "tcp"}, {"shm"}, {"tcp"}};
  EXPECT_EQ(transport::choosePair(0, 1, offered, peers)->name, "tcp");  // the lower rank's order wins
  EXPECT_EQ(transport::choosePair(2, 3, offered, peers), nullptr);      // nothing in common
}

TEST(Communicator, ForcedTcpOnOneHostAndUnknownName) {
  Watchdog wd(120);
  EnvGuard env;
  env.set("CHORUS_TRANSPORTS", "tcp");
  std::vector<chorusComm_t> comms = chorus::test::makeComms(3);
  std::vector<std::string> errs = chorus::test::onAll(comms, [](int rank, chorusComm_t c) {
    float x[5] = {1, 2, 3, 4, static_cast<float>(rank)};
    if (chorusAllReduce(x, x, 5, chorusFloat32, chorusSum, c, nullptr) != chorusSuccess)
      throw std::runtime_error(chorusGetLastError(c));
    if (x[0] != 3 || x[4] != 3) throw std::runtime_error("wrong sum");
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
  chorus::test::destroyAll(comms);

  env.set("CHORUS_TRANSPORTS", "shm,bogus");
  chorusUniqueId id;
  ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess);
  chorusComm_t c = nullptr;
  EXPECT_EQ(chorusCommInitRank(&c, 1, id, 0), chorusInvalidArgument);
  std::string e = chorusGetLastError(nullptr);
  EXPECT_NE(e.find("unknown transport 'bogus'"), std::string::npos) << e;
}

// libchorus.so names no UCX (nor verbs, nor CUDA) library: a program linked to it runs where they are absent.
TEST(Plugins, LibchorusNeedsNoUcx) {
  const std::string lib = buildDir() + "/libchorus.so";
  RunResult r = runShell("readelf -d " + lib);
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_NE(r.output.find("(NEEDED)"), std::string::npos) << r.output;
  for (const char* dep : {"libucp", "libuct", "libucs", "libibverbs", "libcudart", "libcuda."})
    EXPECT_EQ(r.output.find(dep), std::string::npos) << lib << " needs " << dep << ":\n" << r.output;
  if (!haveUcx()) GTEST_SKIP() << "the UCX plugin was not built";
  const std::string plugin = transport::find("ucx")->origin;
  r = runShell("readelf -d " + plugin);
  EXPECT_NE(r.output.find("libucp"), std::string::npos) << plugin << " should be the one that needs UCX:\n" << r.output;
}

// A text file, a shared object that exports nothing of ours, plugins of other versions and one whose chunk steps
// are invalid: each is refused with the reason, and a communicator forms without them.
TEST(Plugins, ForeignAndStaleFilesAreRefused) {
  Watchdog wd(120);
  TempDir dir;
  { std::ofstream(dir.path + "/libchorus-junk.so") << "not an ELF file\n"; }
  ASSERT_EQ(runShell("cp " + buildDir() + "/test/fixtures/libchorus-noplugin.so " + buildDir() +
                     "/test/fixtures/libchorus-future.so " + buildDir() + "/test/fixtures/libchorus-stale.so " + buildDir() + "/test/fixtures/libchorus-badchunks.so " + dir.path + "/").status, 0);
  const std::string env = "CHORUS_PLUGIN_PATH=" + dir.path + " ";
  RunResult r = runShell(env + buildDir() + "/scripts/chorus_info");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("libchorus-junk.so could not be loaded"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("libchorus-noplugin.so is not a Chorus transport plugin (it exports no "
                          "chorusTransportPlugin_v4) nor a memory plugin (no chorusMemoryPlugin_v4)"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("libchorus-future.so is a plugin of version 5; this libchorus speaks version 4"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("libchorus-stale.so is a plugin of version 1; this libchorus speaks version 4"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("libchorus-badchunks.so (badchunks) is refused: its pipeline chunk steps are invalid: "
                          "step 1 has a chunk of 100 bytes (4 KiB..64 MiB allowed)"), std::string::npos) << r.output;
  const std::string cmd = env + "CHORUS_CHUNK_BYTES=4K " + buildDir() + "/scripts/chorusrun -n 2 -- " + buildDir() +
                          "/test/allreduce_check";
  r = runShell(cmd);
  EXPECT_EQ(r.status, 0) << cmd << "\n" << r.output;
  EXPECT_NE(r.output.find("rank 1: 600 cases ok"), std::string::npos) << r.output;
}

// A program outside the build tree, with no plugin beside it, is what runs on a machine without the UCX plugin.
TEST(Plugins, WithoutTheUcxPluginShmAndTcpStillForm) {
  Watchdog wd(120);
  TempDir dir;
  ASSERT_EQ(runShell("cp " + buildDir() + "/test/allreduce_check " + buildDir() + "/scripts/chorus_info " +
                     dir.path + "/").status, 0);
  RunResult r = runShell("env -u CHORUS_PLUGIN_PATH " + dir.path + "/chorus_info");
  EXPECT_NE(r.output.find("ucx      n/a"), std::string::npos) << r.output;
  const std::string run = "env -u CHORUS_PLUGIN_PATH CHORUS_CHUNK_BYTES=4K " + buildDir() + "/scripts/chorusrun -n 2 -- ";
  r = runShell(run + dir.path + "/allreduce_check");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1: 600 cases ok"), std::string::npos) << r.output;
  r = runShell("CHORUS_TRANSPORTS=ucx " + run + dir.path + "/allreduce_check");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("transport ucx is not available"), std::string::npos) << r.output;
}

namespace {

// chorus_info's line for ibverbs when it is not usable here ("" when it is, or was not built).
std::string ibverbsUnavailable() {
  RunResult r = runShell(buildDir() + "/scripts/chorus_info");
  const size_t at = r.output.find("  ibverbs  n/a");
  if (at == std::string::npos) return "";
  return r.output.substr(at + 2, r.output.find('\n', at) - at - 2);
}

bool ibverbsBuilt() {
  return runShell("test -f " + buildDir() + "/transports/ibverbs/libchorus-ibverbs.so").status == 0;
}

}  // namespace

// Without an RDMA device (this project's machines: the kernel has no RDMA), chorus_info says why in
// ibv_get_device_list's words, and a communicator told to use ibverbs fails with that text instead of forming
// without it.
TEST(Ibverbs, WithoutADeviceChorusInfoSaysWhyAndForcingItFails) {
  Watchdog wd(120);
  if (!ibverbsBuilt()) GTEST_SKIP() << "the ibverbs plugin was not built (no libibverbs-dev)";
  const std::string why = ibverbsUnavailable();
  if (why.empty()) GTEST_SKIP() << "this machine has an active RDMA port: nothing to refuse";
  EXPECT_NE(why.find("no RDMA device (ibv_get_device_list: "), std::string::npos) << why;
  RunResult r = runShell("CHORUS_TRANSPORTS=ibverbs " + buildDir() + "/scripts/chorusrun -n 2 -- " + buildDir() +
                         "/test/allreduce_check");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("transport ibverbs is not available: no RDMA device (ibv_get_device_list: "),
            std::string::npos) << r.output;
  // Not named, it is left out and the others form the communicator.
  r = runShell("CHORUS_CHUNK_BYTES=4K " + buildDir() + "/scripts/chorusrun -n 2 -- " + buildDir() +
               "/test/allreduce_check");
  EXPECT_EQ(r.status, 0) << r.output;
}

// With an RDMA device: every pair over ibverbs (through the port's loopback on one host), and settings that name
// no device or no GID fail at creation naming them. SKIPs with the reason where there is no device.
TEST(Ibverbs, OnADeviceEveryPairRunsAndBadSettingsAreNamed) {
  Watchdog wd(300);
  if (!ibverbsBuilt()) GTEST_SKIP() << "the ibverbs plugin was not built (no libibverbs-dev)";
  if (std::string why = ibverbsUnavailable(); !why.empty()) GTEST_SKIP() << why;
  // chorus_info names every port with its link layer, and the one a rank takes.
  RunResult info = runShell(buildDir() + "/scripts/chorus_info");
  EXPECT_NE(info.output.find("ports: "), std::string::npos) << info.output;
  EXPECT_TRUE(info.output.find("InfiniBand, ") != std::string::npos ||
              info.output.find("Ethernet, ") != std::string::npos) << info.output;
  EXPECT_NE(info.output.find("rank 0 takes "), std::string::npos) << info.output;
  const std::string run = buildDir() + "/scripts/chorusrun -n 3 -- " + buildDir() + "/test/allreduce_check";
  for (const char* qps : {"1", "3"}) {
    RunResult r = runShell(std::string("CHORUS_TRANSPORTS=ibverbs CHORUS_IB_QPS_PER_PEER=") + qps +
                           " CHORUS_CHUNK_BYTES=64K " + run);
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("rank 2: 600 cases ok"), std::string::npos) << r.output;
  }
  RunResult r = runShell("CHORUS_TRANSPORTS=ibverbs CHORUS_IB_HCA==no_such_hca " + run);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("CHORUS_IB_HCA='=no_such_hca' names no RDMA device"), std::string::npos) << r.output;
  r = runShell("CHORUS_TRANSPORTS=ibverbs CHORUS_IB_GID_INDEX=65000 " + run);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("CHORUS_IB_GID_INDEX=65000"), std::string::npos) << r.output;
}

// 2 simulated hosts x 2 ranks: shm between the ranks of a host, UCX (over TCP: UCX would otherwise find shared
// memory across namespaces) between hosts; every pair's choice is logged.
TEST(Plugins, MixedShmInsideHostsUcxAcross) {
  if (!haveUcx()) GTEST_SKIP() << "the UCX plugin was not built";
  if (geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces (scripts/netns-cluster)";
  Watchdog wd(300);
  const std::string cmd = sourceDir() + "/scripts/netns-cluster -k 2 -r 2 --timeout 200 -- env "
                          "CHORUS_TRANSPORTS=shm,ucx UCX_TLS=tcp CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=INIT "
                          "CHORUS_CHUNK_BYTES=4K " + buildDir() + "/test/allreduce_check";
  RunResult r = runShell(cmd);
  if (r.status == 77) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.status, 0) << cmd << "\n" << r.output;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(r.output.find("rank " + std::to_string(rank) + ": 600 cases ok"), std::string::npos) << r.output;
  // Ranks 0,1 on host 0 and 2,3 on host 1.
  EXPECT_NE(r.output.find("rank 0 (pid"), std::string::npos);
  EXPECT_EQ(occurrences(r.output, ": transport shm"), 4u) << r.output;  // 0<->1 and 2<->3, from both ends
  EXPECT_EQ(occurrences(r.output, ": transport ucx"), 8u) << r.output;  // the 4 pairs across, from both ends
}

// UCX_TLS as the UCX transport reads it (which UCX defaults it sets, whether its chunk steps down).
TEST(Plugins, UcxTlsListGrammar) {
  using transport::ucx::tlsListAllows;
  const std::initializer_list<std::string_view> sm = {"sm", "shm", "mm", "posix", "sysv", "xpmem"};
  EXPECT_TRUE(tlsListAllows("", {"tcp"}));
  EXPECT_TRUE(tlsListAllows("all", sm));
  EXPECT_TRUE(tlsListAllows("tcp", {"tcp"}));
  EXPECT_FALSE(tlsListAllows("tcp", sm));
  EXPECT_TRUE(tlsListAllows("sm,self", sm));
  EXPECT_FALSE(tlsListAllows("sm,self", {"tcp"}));
  EXPECT_TRUE(tlsListAllows("self,posix,tcp", sm));
  EXPECT_FALSE(tlsListAllows("self", sm));
  EXPECT_FALSE(tlsListAllows("tcpx", {"tcp"}));  // whole entries only
  EXPECT_FALSE(tlsListAllows("^sm", sm));
  EXPECT_TRUE(tlsListAllows("^sm", {"tcp"}));
  EXPECT_FALSE(tlsListAllows("^ib,tcp", {"tcp"}));
}

// Over UCX's shared memory the chunk steps down from 16 MiB touched on the host (transports/ucx/plugin.cc); both
// ranks log the same steps, and allreduces on both sides of the step are correct. Over UCX's tcp it stays 1 MiB.
TEST(Plugins, UcxChunkDependsOnSizeAndTransport) {
  if (!haveUcx()) GTEST_SKIP() << "the UCX plugin was not built";
  Watchdog wd(300);
  const std::string run = " CHORUS_TRANSPORTS=ucx UCX_NET_DEVICES=lo CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=INIT " +
                          buildDir() + "/scripts/chorusrun -n 2 " + buildDir() +
                          "/bench/all_reduce_perf -c 1 -n 2 -w 1 -b 4M -e 16M -f 2";
  RunResult r = runShell("env UCX_TLS=sm" + run);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(occurrences(r.output, "pipeline chunk 1048576 bytes, 131072 from buffers of 8388608 bytes"), 2u) << r.output;
  EXPECT_NE(r.output.find("Out of bounds values : 0 OK"), std::string::npos) << r.output;  // all checked
  for (const char* size : {"4194304", "8388608", "16777216"})
    EXPECT_NE(r.output.find(size), std::string::npos) << r.output;
  r = runShell("env UCX_TLS=tcp" + run);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(occurrences(r.output, "from buffers of"), 0u) << r.output;
  EXPECT_EQ(occurrences(r.output, "pipeline chunk 1048576 bytes"), 2u) << r.output;
}

// ---- transports driven directly, as the communicator drives them ----

namespace {

struct Pair {
  transport::Setup setup[2];
  std::unique_ptr<transport::Transport> t[2];
};

// Two transports of one kind as ranks 0 and 1 of one communicator in this process.
std::unique_ptr<Pair> makePair(const std::string& name) {
  auto p = std::make_unique<Pair>();
  for (int r = 0; r < 2; ++r) {
    transport::Setup& s = p->setup[r];
    s.rank = r;
    s.nranks = 2;
    s.secret = 0x1234;
    s.commId = 0x77;
    s.socketIfname = "=lo";
    p->t[r] = transport::find(name)->create(s);
  }
  for (int r = 0; r < 2; ++r)
    for (int q = 0; q < 2; ++q) p->setup[r].peers.push_back({q, getpid(), "localhost", "this-host"});
  return p;
}

// Rank 0 connects while rank 1 accepts; both within `seconds`. Returns rank 1's error text ("" if none).
std::string connectPair(Pair& p, double seconds) {
  std::string err;
  std::thread acceptor([&] {
    try {
      p.t[1]->accept(0, p.t[0]->address(), deadlineIn(seconds));
    } catch (const Error& e) {
      err = e.what();
    }
  });
  p.t[0]->connect(1, p.t[1]->address(), deadlineIn(seconds));
  acceptor.join();
  return err;
}

// One message of `bytes` from rank 0 to rank 1, both driven on this thread; true when it arrived intact.
bool sendOne(Pair& p, size_t bytes) {
  std::vector<uint8_t> out(bytes), in(bytes, 0);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 7 + 1);
  OpTag tag;
  tag.kind = OpKind::AllReduce;
  tag.seq = 1;
  tag.count = bytes;
  Request s, r;
  p.t[1]->irecv(0, in.data(), bytes, tag, &r);
  p.t[0]->isend(1, out.data(), bytes, tag, &s);
  Deadline end = deadlineIn(20);
  while (!(s.done && r.done) && Clock::now() < end) {
    p.t[0]->progress();
    p.t[1]->progress();
  }
  return s.done && r.done && in == out;
}

// Connects to a TCP port on loopback and sends junk; returns the socket (closed by the caller).
int sendJunkTo(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  const char junk[] = "GET / HTTP/1.0\r\n\r\n and some more bytes than any Hello has";
  (void)!::send(fd, junk, sizeof junk, MSG_NOSIGNAL);
  return fd;
}

using chorus::test::listeningPorts;

// Device memory asked for where no device runtime can run (this machine: no GPU driver): the caller learns why, in
// the CUDA plugin's own words when it was built, and nothing is allocated.
TEST(DeviceMemory, AnAllocationWithoutADeviceRuntimeSaysWhy) {
  void* p = reinterpret_cast<void*>(0x1);
  const chorusResult_t rc = chorusMemAlloc(&p, 64);
  if (rc == chorusSuccess) {
    chorusMemFree(p);
    GTEST_SKIP() << "this machine has a usable GPU: nothing to refuse";
  }
  const std::string text = chorusGetLastError(nullptr);
  EXPECT_NE(text.find("chorusMemAlloc: no device runtime is loaded in this process"), std::string::npos) << text;
  const bool pluginBuilt =
      chorus::test::runShell("test -f " + chorus::test::buildDir() + "/transports/cuda_ipc/libchorus-cuda_ipc.so").status == 0;
  if (pluginBuilt) {
    EXPECT_EQ(rc, chorusUnhandledCudaError) << text;
    EXPECT_NE(text.find("libchorus-cuda_ipc.so: not available: "), std::string::npos) << text;
  } else {
    EXPECT_EQ(rc, chorusInvalidUsage) << text;
    EXPECT_NE(text.find("built without CUDA"), std::string::npos) << text;
  }
  EXPECT_EQ(chorusMemFree(nullptr), chorusSuccess);
}

}  // namespace

// Once a communicator is formed nothing of it listens any more, so nothing from outside can hold a connection open
// on it: the transports close their listeners, and each rank's rendezvous port (Note [Rendezvous]) stays bound
// without listening until a split or shrink.
TEST(Handshake, ATransportsPortsCloseOnceTheCommunicatorIsFormed) {
  Watchdog wd(60);
  EnvGuard env;
  env.set("CHORUS_TRANSPORTS", "tcp");
  const std::set<uint16_t> before = listeningPorts();
  std::vector<chorusComm_t> comms = chorus::test::makeComms(3);
  auto opened = [&] {  // the bootstrap root's thread closes its port just after its last answer
    std::set<uint16_t> now;
    for (int i = 0; i < 100; ++i) {
      now.clear();
      for (uint16_t port : listeningPorts())
        if (!before.count(port)) now.insert(port);
      if (now.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return now.size();
  };
  EXPECT_EQ(opened(), 0u);
  std::vector<std::string> errs = chorus::test::onAll(comms, [](int, chorusComm_t c) {
    int32_t x = 1;
    if (chorusAllReduce(&x, &x, 1, chorusInt32, chorusSum, c, nullptr) != chorusSuccess || x != 3)
      throw std::runtime_error(chorusGetLastError(c));
  });
  EXPECT_TRUE(errs.empty()) << errs[0];
  chorus::test::destroyAll(comms);
  EXPECT_EQ(opened(), 0u);
}

// Strangers on a transport's listening ports (junk, an HTTP request) while a pair connects: dropped, and the
// pair forms and carries data as if they were not there.
TEST(Handshake, StrangersAreDroppedWhileAPairConnects) {
  Watchdog wd(120);
  std::vector<std::string> kinds{"tcp"};
  if (haveUcx()) kinds.push_back("ucx");
  for (const std::string& kind : kinds) {
    SCOPED_TRACE(kind);
    const std::set<uint16_t> before = listeningPorts();
    std::unique_ptr<Pair> p = makePair(kind);
    std::vector<int> junk;
    for (uint16_t port : listeningPorts())
      if (!before.count(port)) junk.push_back(sendJunkTo(port));
    EXPECT_FALSE(junk.empty()) << kind << " opened no listening port";
    EXPECT_EQ(connectPair(*p, 20), "");
    EXPECT_TRUE(sendOne(*p, 100000));
    for (int fd : junk)
      if (fd >= 0) ::close(fd);
    p->t[0]->close(deadlineIn(2));
    p->t[1]->close(deadlineIn(2));
  }
}

// The acceptor's checks of Hellos themselves (Note [Authentication]): a sealed Hello is taken; the same bytes again
// (a replay, recorded on the wire), one sealed without the secret, one sealed for another communicator, a Hello
// cut short and left hanging, and an oversized stream of junk are each dropped with their reason, and the
// acceptor goes on taking a fresh one.
TEST(Handshake, SealedHellosAreCheckedAndReplaysAndForgeriesRefused) {
  Watchdog wd(60);
  using Hello = chorus::transport::tcp::Hello;
  transport::Setup setup, stranger, otherComm;
  for (transport::Setup* s : {&setup, &stranger, &otherComm}) {
    s->rank = 1;
    s->nranks = 2;
    s->secret = 0x1234;
    s->commId = 0x77;
    for (int q = 0; q < 2; ++q) s->peers.push_back({q, getpid(), "localhost", "this-host"});
  }
  stranger.secret = 0x9999;
  otherComm.commId = 0x78;
  SockAddr bound;
  SockAddr lo = SockAddr::parse("127.0.0.1:1");
  lo.setPort(0);
  Fd listener = listenOn(lo, &bound);
  setNonBlocking(listener.get());
  transport::HelloAcceptor acceptor("tcp", setup, sizeof(Hello), [&](const uint8_t* bytes, const Fd&) {
    Hello h;
    std::memcpy(&h, bytes, sizeof h);
    return transport::helloProblem(h, transport::tcp::kHelloMagic, transport::tcp::kWireVersion, setup);
  });
  auto hello = [&](const transport::Setup& as) {
    Hello h{transport::tcp::kHelloMagic, transport::tcp::kWireVersion, as.commId, 0, 0, 1, 1, {}};
    transport::seal(h, as);
    return h;
  };
  auto sendBytes = [&](const void* p, size_t n) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&bound.ss), bound.len) != 0) return -1;
    (void)!::send(fd, p, n, MSG_NOSIGNAL);
    return fd;
  };
  int taken = 0;
  auto pump = [&](double seconds) {
    const Deadline end = deadlineIn(seconds);
    while (Clock::now() < end) acceptor.poll(listener.get(), end, [&](transport::HelloAcceptor::Arrival&&) { ++taken; });
  };
  const Hello good = hello(setup);
  std::vector<int> fds;
  fds.push_back(sendBytes(&good, sizeof good));
  pump(0.3);
  EXPECT_EQ(taken, 1);
  fds.push_back(sendBytes(&good, sizeof good));  // replayed
  const Hello forged = hello(stranger), elsewhere = hello(otherComm);
  fds.push_back(sendBytes(&forged, sizeof forged));
  fds.push_back(sendBytes(&elsewhere, sizeof elsewhere));
  fds.push_back(sendBytes(&good, sizeof good / 2));  // half a Hello, then silence
  std::vector<uint8_t> junk(1 << 20, 0xEE);
  fds.push_back(sendBytes(junk.data(), junk.size()));
  pump(0.5);
  EXPECT_EQ(taken, 1);
  const Hello fresh = hello(setup);
  fds.push_back(sendBytes(&fresh, sizeof fresh));
  pump(0.3);
  EXPECT_EQ(taken, 2);
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
}

// Nobody connects: accept fails at its deadline naming the peer, and does not hang.
TEST(Handshake, AcceptTimesOutNamingThePeer) {
  Watchdog wd(60);
  std::unique_ptr<Pair> p = makePair("tcp");
  std::string e = errorOf([&] { p->t[1]->accept(0, p->t[0]->address(), deadlineIn(0.5)); });
  EXPECT_NE(e.find("rank 0"), std::string::npos) << e;
  EXPECT_NE(e.find("did not connect"), std::string::npos) << e;
}

// A rank that blocks right after its setup (in the device IPC setup, the bootstrap, the caller's code) without
// progressing its transports: its peer's accept() still completes, late as it may come, because settle() finished
// what connect() left to this side. Before settle(), UCX over tcp left the peer to time out.
TEST(Handshake, ARankThatBlocksAfterSettlingLeavesNothingToItsPeer) {
  Watchdog wd(120);
  EnvGuard env;
  env.set("UCX_TLS", "tcp");
  env.set("UCX_NET_DEVICES", "lo");
  std::vector<std::string> kinds{"tcp"};
  if (haveUcx()) kinds.push_back("ucx");
  for (const std::string& kind : kinds) {
    SCOPED_TRACE(kind);
    std::unique_ptr<Pair> p = makePair(kind);
    std::atomic<bool> accepted{false};
    std::string err;
    std::thread acceptor([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // past connect()'s head start
      try {
        p->t[1]->accept(0, p->t[0]->address(), deadlineIn(10));
      } catch (const Error& e) {
        err = e.what();
      }
      accepted = true;
    });
    p->t[0]->connect(1, p->t[1]->address(), deadlineIn(10));
    p->t[0]->settle(deadlineIn(10));
    while (!accepted) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // blocked: no progress
    acceptor.join();
    EXPECT_EQ(err, "");
    if (err.empty()) {
      EXPECT_TRUE(sendOne(*p, 100000));
    }
    p->t[0]->close(deadlineIn(2));
    p->t[1]->close(deadlineIn(2));
  }
}

// A UCX address that does not unpack, or a worker that cannot be reached: an error naming the rank, the
// transport and the reason, within the deadline.
TEST(Handshake, BadUcxAddressIsAnErrorNamingRankAndTransport) {
  if (!haveUcx()) GTEST_SKIP() << "the UCX plugin was not built";
  Watchdog wd(60);
  std::unique_ptr<Pair> p = makePair("ucx");
  std::vector<uint8_t> garbage(200);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<uint8_t>(i * 37 + 11);
  std::string e = errorOf([&] { p->t[0]->connect(1, garbage, deadlineIn(3)); });
  EXPECT_NE(e.find("the ucx address that rank 1"), std::string::npos) << e;
  EXPECT_NE(e.find("does not unpack: it is not a Chorus UCX address"), std::string::npos) << e;
  // A real address with one byte changed: the checksum, not UCX, finds it.
  std::vector<uint8_t> bent = p->t[1]->address();
  bent[bent.size() / 2] ^= 0x40;
  e = errorOf([&] { p->t[0]->connect(1, bent, deadlineIn(3)); });
  EXPECT_NE(e.find("its checksum does not match"), std::string::npos) << e;
  e = errorOf([&] { p->t[0]->connect(1, {}, deadlineIn(3)); });
  EXPECT_NE(e.find("shorter than its header"), std::string::npos) << e;
}
