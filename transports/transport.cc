#include "transports/transport.h"

#include <fmt/format.h>

namespace chorus::transport {

std::string PeerInfo::name() const { return fmt::format("rank {} (pid {} on {})", rank, pid, host); }

}  // namespace chorus::transport
