// Which communicator and stream handles are alive. Every API call holds a CallRef on its communicator, so a
// destroyed or aborted handle is reported (chorusInvalidUsage) instead of used, and chorusCommAbort can free
// the communicator once the last call on it has returned.
#pragma once

#include <vector>

#include "chorus/chorus.h"
#include "lib/comm/comm.h"

namespace chorus {

void registerComm(Comm* c);
// Removes c so that new calls are refused, then waits until no call holds it.
void retireComm(Comm* c);

class CallRef {
 public:
  CallRef(chorusComm_t c, const char* argName);  // throws for NULL or dead handles
  ~CallRef();
  CallRef(const CallRef&) = delete;
  CallRef& operator=(const CallRef&) = delete;
  Comm& operator*() const { return *comm_; }
  Comm* operator->() const { return comm_; }

 private:
  Comm* comm_;
  void* entry_ = nullptr;  // its slot in the lock-free table (Note [Call registry] in registry.cc), if any
};

bool commAlive(chorusComm_t c);
// The communicators alive now (a snapshot: take a CallRef before using one).
std::vector<Comm*> liveComms();
void registerStream(chorusStream_t s);
void unregisterStream(chorusStream_t s);
// Throws unless s is a live stream created for comm.
void checkStream(chorusStream_t s, const Comm& comm);
bool streamAlive(chorusStream_t s);

}  // namespace chorus
