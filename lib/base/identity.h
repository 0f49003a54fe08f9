// Random numbers and the identity of this host: what ranks compare to know they may share memory.
#pragma once

#include <cstdint>
#include <string>

namespace chorus {

uint64_t randomU64();  // from getrandom(2); throws chorusSystemError
std::string hostIdentity(const std::string& overrideId);  // hostname + boot id unless overridden

}  // namespace chorus
