// A plugin's side of transports/plugin.h: turns a transport written in C++ against transports/transport.h into
// the exported C table, catching every exception at the boundary (its text becomes lastError()). A plugin
// defines, in one of its files:
//
//   extern "C" CHORUS_PLUGIN_EXPORT const chorusTransportPlugin_v4_t chorusTransportPlugin_v4 =
//       chorus::transport::exportPlugin(kSpec);
//
// where kSpec is a PluginSpec with static storage. The plugin links its own copy of the foundations
// (lib/base), so its log lines follow the same CHORUS_DEBUG settings.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "lib/base/env.h"
#include "transports/plugin.h"
#include "transports/registry.h"

#define CHORUS_PLUGIN_EXPORT __attribute__((visibility("default")))

namespace chorus::transport {

struct PluginSpec {
  const char* name;
  int preference;
  std::span<const EnvSpec> env;
  LinkTraits (*traits)();  // asked once, when the plugin is loaded (it may read its settings)
  std::string (*unavailable)();  // "" when usable here
  bool (*disabledByEnv)();       // may be nullptr
  bool (*canConnect)(const PeerInfo& a, const PeerInfo& b);
  std::unique_ptr<Transport> (*create)(const Setup& setup);
};

// The table that forwards to spec's transport. One spec per plugin; spec must outlive the process's use of it.
chorusTransportPlugin_v4_t exportPlugin(const PluginSpec& spec);

}  // namespace chorus::transport
