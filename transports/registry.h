// The transport registry: every transport describes itself here (name, default preference, its section of the
// environment table, the link numbers the cost model needs, whether it can serve a pair, how to create it), so
// the communicator names none of them. Built-in transports are listed by transports/registry.cc; plugins
// (transports/plugin.h) are found and loaded once per process, when something first asks for a transport that
// is not built in (Note [Loading plugins on demand] in registry.cc).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lib/base/env.h"
#include "transports/transport.h"

namespace chorus::transport {

// What the cost model (algorithms/cost_model.h) needs of a link this transport serves between two ranks of one
// host. Across hosts the link is measured at creation instead (lib/comm/tuning.h).
struct LinkTraits {
  double alphaUs = 10, gbps = 3.5;                    // latency and bandwidth, each rank with a core of its own
  double alphaUsOversubscribed = 35, gbpsOversubscribed = 1.5;  // more ranks on the host than cores
  bool reducesOnReceive = false;  // irecvReduce works (the data can be reduced in place as it arrives)
  // The pipeline chunk it runs best with, by the bytes a collective touches on one host (ChunkSteps, ops.h), and
  // when that host runs more ranks than cores (empty: the same).
  ChunkSteps chunks = {{0, 96 * 1024}};
  ChunkSteps chunksOversubscribed = {};
};

struct Descriptor {
  std::string name;    // lower case, as CHORUS_TRANSPORTS names it
  int preference = 0;  // the default order: lower first
  std::string origin;  // "built-in", or the plugin's file
  std::span<const EnvSpec> env;  // its section of the environment table
  LinkTraits traits;
  // "" when it can be used in this process; else why not (a library or device missing). Asked once.
  std::function<std::string()> unavailable;
  // True when it says by its own settings not to be used by default (CHORUS_SHM_DISABLE=1).
  std::function<bool()> disabledByEnv;
  // True when it can carry traffic between the two ranks (e.g. the same host, for shared memory). Symmetric.
  std::function<bool(const PeerInfo& a, const PeerInfo& b)> canConnect;
  // Throws chorus::Error (a bad setting of its own, a library failure).
  std::function<std::unique_ptr<Transport>(const Setup&)> create;
  // What it found here, for chorus_info ("" or unset: nothing to say).
  std::function<std::string()> describe;
};

// A transport that is known but cannot be used here, and why (plugin missing or refused, library missing).
struct Unavailable {
  std::string name;  // the transport's name, or the file's when it could not even say its name
  std::string why;
  std::span<const EnvSpec> env;  // its section of the environment table, where it loaded and could say it
};

// Finds and loads the plugins (once per process); select() does it when the spec needs them.
void loadAllPlugins();

// Every usable transport (built-ins and loaded plugins) in default order, and those that are not usable.
const std::vector<Descriptor>& registered();
const std::vector<Unavailable>& unavailable();

// The transports that may serve pairs, in order of preference, as CHORUS_TRANSPORTS says (Note
// [CHORUS_TRANSPORTS] in registry.cc). Throws chorusInvalidArgument naming an unknown or unavailable name.
std::vector<const Descriptor*> select(const std::string& spec);

// The transport a pair uses: the first in the lower rank's list that the higher rank also offers and that can
// connect them (both ends compute the same from the bootstrap's table); nullptr when there is none.
// `offered[r]`: the names rank r published, in its order of preference.
const Descriptor* choosePair(int a, int b, const std::vector<std::vector<std::string>>& offered,
                             const std::vector<PeerInfo>& peers);

const Descriptor* find(const std::string& name);

}  // namespace chorus::transport
