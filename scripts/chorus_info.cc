// chorus_info: prints the library version, the reduction ISA in use, the network interface a communicator
// would pick, every transport (built-in, plugin loaded, or not available and why) with the order
// CHORUS_TRANSPORTS gives, and every environment variable Chorus reads, section by section, with its current
// value (chorusrun --info runs it).
// chorus_info --comm, run as every rank of a communicator (e.g. chorusrun -n 8 chorus_info --comm), creates the
// communicator from the environment and rank 0 prints its cost model: the measured link costs, the AllReduce
// algorithm AUTO (or CHORUS_ALGO's allowed set) picks from each crossover size up, and the predicted time of
// every algorithm at powers of 4 from 8 B to 1 GiB.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "chorus/chorus.h"
#include "lib/comm/comm.h"
#include "lib/base/env.h"
#include "lib/base/error.h"
#include "lib/kernels/reduce.h"
#include "lib/base/socket.h"
#include "transports/plugin_host.h"
#include "transports/plugin_memory.h"
#include "transports/registry.h"

namespace {

int printCostModel() {
  chorusComm_t comm = nullptr;
  if (chorusCommInitFromEnv(&comm) != chorusSuccess) {
    std::fprintf(stderr, "chorus_info --comm: %s\n", chorusGetLastError(nullptr));
    return 1;
  }
  const chorus::Comm& c = *comm;
  if (c.rank() == 0) {
    const chorus::algo::CostModel& m = c.costModel();
    std::printf("cost model: %s\n", m.describe().c_str());
    std::printf("AllReduce choices (CHORUS_ALGO=%s):\n", chorus::envValue("CHORUS_ALGO").c_str());
    for (const auto& x : m.crossovers(c.config().algo.allReduce))
      std::printf("  from %12zu B: %-18s (predicted %.1f us)\n", x.fromBytes, chorus::algo::algoName(x.algo), x.us);
    std::printf("\npredicted us %12s", "bytes");
    for (auto a : chorus::algo::kAllReduceAlgos) std::printf(" %19s", chorus::algo::algoName(a));
    std::printf("\n");
    for (size_t b = 8; b <= (size_t{1} << 30); b *= 4) {
      std::printf("%25zu", b);
      for (auto a : chorus::algo::kAllReduceAlgos) std::printf(" %19.1f", m.allReduceUs(a, b));
      std::printf("\n");
    }
  }
  return chorusCommDestroy(comm) == chorusSuccess ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--comm") return printCostModel();
  int version = 0;
  chorusGetVersion(&version);
  std::printf("Chorus %d.%d.%d\n", version / 10000, version / 100 % 100, version % 100);
  std::printf("reduction kernels: %s\n", chorus::kernels::activeIsa());
  try {
    std::string ifname;
    chorus::SockAddr a = chorus::findInterfaceAddress(chorus::envValue("CHORUS_SOCKET_IFNAME"), &ifname);
    a.setPort(0);
    std::printf("network interface: %s %s\n", ifname.c_str(), a.str().c_str());
    chorus::Config::fromEnv();
    std::printf("environment: valid\n");
  } catch (const chorus::Error& e) {
    std::printf("environment: INVALID: %s\n", e.what());
  }
  namespace tr = chorus::transport;
  std::string order;  // what a communicator would use, before listing the plugins loads them all
  try {
    for (const tr::Descriptor* d : tr::select(chorus::envValue("CHORUS_TRANSPORTS"))) order += " " + d->name;
  } catch (const chorus::Error& e) {
    order = std::string(": INVALID: ") + e.what();
  }
  tr::loadAllPlugins();
  std::printf("\ntransports (default order first; plugins searched in");
  for (const std::string& d : tr::pluginSearchPath()) std::printf(" %s", d.c_str());
  std::printf("):\n");
  for (const tr::Descriptor& d : tr::registered()) {
    std::printf("  %-8s %-9s %s\n", d.name.c_str(), d.origin == "built-in" ? "built-in" : "plugin", d.origin.c_str());
    if (const std::string what = d.describe ? d.describe() : ""; !what.empty())
      std::printf("  %-8s %-9s %s\n", "", "", what.c_str());
  }
  for (const tr::Unavailable& u : tr::unavailable())
    std::printf("  %-8s %-9s %s\n", u.name.c_str(), "n/a", u.why.c_str());
  std::printf("CHORUS_TRANSPORTS='%s' ->%s\n", chorus::envValue("CHORUS_TRANSPORTS").c_str(), order.c_str());
  std::printf("\nmemory: host (built in)\n");
  for (const std::string& m : tr::memoryPlugins()) std::printf("  %s\n", m.c_str());
  auto section = [](const char* title, std::span<const chorus::EnvSpec> vars) {
    if (vars.empty()) return;
    std::printf("\n[%s]\n%-24s %-7s %-8s %-14s %s\n", title, "variable", "type", "default", "value", "description");
    for (const chorus::EnvSpec& s : vars) {
      const char* v = std::getenv(s.name);
      std::printf("%-24s %-7s %-8s %-14s %s\n", s.name, s.type, *s.defaultValue ? s.defaultValue : "-",
                  v ? v : "(unset)", s.description);
    }
  };
  section("core", chorus::envTable());
  for (const tr::Descriptor& d : tr::registered()) section(d.name.c_str(), d.env);
  return 0;
}
