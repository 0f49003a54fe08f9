#include "lib/registry.h"

#include <condition_variable>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "lib/error.h"
#include "lib/stream.h"

namespace chorus {

namespace {
std::mutex gMu;
std::condition_variable gCv;
std::unordered_map<Comm*, int> gComms;  // live communicator -> calls in progress
std::unordered_map<Comm*, int> gRetiring;
std::unordered_set<chorusStream_t> gStreams;
}  // namespace

void registerComm(Comm* c) {
  std::lock_guard<std::mutex> g(gMu);
  gComms[c] = 0;
}

void retireComm(Comm* c) {
  std::unique_lock<std::mutex> g(gMu);
  auto it = gComms.find(c);
  if (it == gComms.end()) return;
  gRetiring[c] = it->second;
  gComms.erase(it);
  gCv.wait(g, [&] { return gRetiring[c] == 0; });
  gRetiring.erase(c);
}

CallRef::CallRef(chorusComm_t c, const char* argName) : comm_(c) {
  if (c == nullptr) fail(chorusInvalidArgument, "{} is NULL", argName);
  std::lock_guard<std::mutex> g(gMu);
  auto it = gComms.find(c);
  if (it == gComms.end())
    fail(chorusInvalidUsage, "{} ({}) is not a live communicator: it was destroyed, aborted or never created",
         argName, static_cast<void*>(c));
  ++it->second;
}

CallRef::~CallRef() {
  std::lock_guard<std::mutex> g(gMu);
  auto it = gComms.find(comm_);
  if (it != gComms.end()) {
    --it->second;
    return;
  }
  auto r = gRetiring.find(comm_);
  if (r != gRetiring.end() && --r->second == 0) gCv.notify_all();
}

bool commAlive(chorusComm_t c) {
  std::lock_guard<std::mutex> g(gMu);
  return gComms.count(c) != 0;
}

void registerStream(chorusStream_t s) {
  std::lock_guard<std::mutex> g(gMu);
  gStreams.insert(s);
}

void unregisterStream(chorusStream_t s) {
  std::lock_guard<std::mutex> g(gMu);
  gStreams.erase(s);
}

bool streamAlive(chorusStream_t s) {
  std::lock_guard<std::mutex> g(gMu);
  return gStreams.count(s) != 0;
}

void checkStream(chorusStream_t s, const Comm& comm) {
  if (s == nullptr) return;
  if (!streamAlive(s))
    fail(chorusInvalidUsage, "stream ({}) is not a live stream: it was destroyed or never created",
         static_cast<void*>(s));
  if (s->comm != &comm)
    fail(chorusInvalidUsage, "stream ({}) was created for another communicator", static_cast<void*>(s));
}

}  // namespace chorus
