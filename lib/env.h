// Every environment variable Chorus reads lives in one table (kEnvTable): name, type, default, description.
// Config::fromEnv() reads and validates them once per communicator init; chorus_info prints the table.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace chorus {

struct EnvSpec {
  const char* name;
  const char* type;  // "int", "bytes", "string", "enum"
  const char* defaultValue;
  const char* description;
};

std::span<const EnvSpec> envTable();

// The value in the environment, or the table's default when unset/empty.
std::string envValue(const char* name);

enum class Algo { Auto, Ring };

struct Config {
  Algo algo = Algo::Auto;
  int nsocks = 1;
  size_t chunkBytes = 0;  // 0: chosen at init by transport (Comm::chooseChunk)
  int spinUs = -1;  // -1: chosen at init from ranks per host and cores (Comm::chooseSpin)
  int yieldUs = 200;
  double timeoutSec = 600;
  double initTimeoutSec = 120;
  std::string socketIfname;
  std::string hostId;
  bool shmDisable = false;
  uint64_t shmDirectBytes = 0;

  // Throws chorusInvalidArgument naming the variable, its value and what is accepted.
  static Config fromEnv();
};

// Parses "64K", "1M", "2G" or a plain number; false when malformed.
bool parseBytes(const std::string& text, uint64_t* out);

}  // namespace chorus
