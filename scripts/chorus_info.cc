// chorus_info: prints the library version, the reduction ISA in use, the network interface a communicator
// would pick, and every environment variable Chorus reads with its current value (chorusrun --info runs it).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "chorus/chorus.h"
#include "lib/env.h"
#include "lib/error.h"
#include "lib/kernels/reduce.h"
#include "lib/socket.h"

int main() {
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
  std::printf("\n%-22s %-7s %-8s %-14s %s\n", "variable", "type", "default", "value", "description");
  for (const chorus::EnvSpec& s : chorus::envTable()) {
    const char* v = std::getenv(s.name);
    std::printf("%-22s %-7s %-8s %-14s %s\n", s.name, s.type, *s.defaultValue ? s.defaultValue : "-",
                v ? v : "(unset)", s.description);
  }
  return 0;
}
