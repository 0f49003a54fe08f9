// libchorus.so's side of transport plugins (transports/plugin.h): finds libchorus-NAME.so files, loads each
// once per process, refuses what is not a plugin of this version (Note [Plugin versions]), and wraps each
// loaded table as a registry Descriptor whose transports forward to it.
//
// Search order (first file of a transport name wins): the folders of CHORUS_PLUGIN_PATH, then the folder of the
// object this code was linked into (libchorus.so, or a program linked statically) and its chorus/ sub-folder
// (the install layout), then, when that object lies inside the meson build tree, the folders where the build puts
// the plugins.
#pragma once

#include <string>
#include <vector>

#include "transports/registry.h"

namespace chorus::transport {

// The plugins found, loaded and accepted; `refused` receives every file or expected plugin that was not, and why.
std::vector<Descriptor> loadPlugins(std::vector<Unavailable>* refused);

// The folders searched, in order (for messages and chorus_info).
std::vector<std::string> pluginSearchPath();

}  // namespace chorus::transport
