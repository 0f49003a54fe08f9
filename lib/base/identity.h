// Random numbers, the identity of this host (what ranks compare to know they may share memory), and whether a
// process of this host is gone.
#pragma once

#include <cstdint>
#include <string>

namespace chorus {

uint64_t randomU64();  // from getrandom(2); throws chorusSystemError
std::string hostIdentity(const std::string& overrideId);  // hostname + boot id unless overridden
// True when process `pid` of this host has exited, also when its parent has not reaped it yet (a zombie).
bool processGone(int pid);

}  // namespace chorus
