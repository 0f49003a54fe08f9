#include "lib/api/group.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>

#include "lib/comm/collectives.h"
#include "lib/comm/scratch_plan.h"
#include "lib/base/error.h"
#include "lib/api/registry.h"
#include "lib/comm/stream.h"

namespace chorus {

namespace {

struct Recorded {
  Comm* comm;
  CollArgs args;
  chorusStream_t stream;
};

struct GroupState {
  int depth = 0;
  std::vector<Recorded> calls;
};
thread_local GroupState tGroup;
// Threads inside a group, all of them: when none is, a call need not look up its thread's group (a TLS lookup
// through __tls_get_addr in a shared library).
std::atomic<int> gOpenGroups{0};

void tagAndRun(Comm& comm, std::span<const CollArgs> calls) {
  if (calls.size() == 1) {  // the common case, without allocating
    TaggedCall one = tagCall(comm, calls[0]);
    runCalls(comm, std::span<const TaggedCall>(&one, 1));
    return;
  }
  std::vector<TaggedCall> tagged;
  tagged.reserve(calls.size());
  for (const auto& a : calls) tagged.push_back(tagCall(comm, a));
  runCalls(comm, tagged);
}

// An asynchronous task owns copies of its calls; one call sits in the task itself (Note [Allocation-free
// queueing]).
Executor::Fn makeTask(Comm& comm, std::span<const CollArgs> calls) {
  if (calls.size() == 1) {
    auto one = [&comm, args = calls[0]] { tagAndRun(comm, std::span<const CollArgs>(&args, 1)); };
    static_assert(Executor::Fn::fitsInline<decltype(one)>, "a queued call would allocate");
    return one;
  }
  return [&comm, owned = std::vector<CollArgs>(calls.begin(), calls.end())] { tagAndRun(comm, owned); };
}

bool onDevice(std::span<const CollArgs> calls) {
  return std::any_of(calls.begin(), calls.end(), [](const CollArgs& a) { return !a.space.isHost(); });
}

// The task, after it adopts the memory grown for it on this thread (Note [Scratch before the fence]).
Executor::Fn adoptingMemory(Comm& comm, std::span<const CollArgs> calls, Executor::Fn task) {
  if (!onDevice(calls)) return task;
  auto memory = std::make_shared<CallMemory>(growMemoryFor(comm, calls));
  if (memory->empty()) return task;
  return [&comm, memory, task = std::move(task)]() mutable {
    memory->adopt(comm);
    task();
  };
}

}  // namespace

// This thread's own groupStart raised the count before (program order), so a zero means no group here.
int groupDepth() { return gOpenGroups.load(std::memory_order_relaxed) == 0 ? 0 : tGroup.depth; }
void groupStart() {
  if (tGroup.depth++ == 0) gOpenGroups.fetch_add(1, std::memory_order_relaxed);
}

bool groupRecord(Comm* comm, const CollArgs& args, chorusStream_t stream) {
  if (groupDepth() == 0) return false;
  tGroup.calls.push_back({comm, args, stream});
  return true;
}

// Queues calls on comm; when the caller must block, returns a private stream that completes with them.
std::unique_ptr<chorusStream> start(Comm& comm, std::span<const CollArgs> calls,
                                    std::span<const chorusStream_t> streams) {
  bool blocking = streams.empty() || std::count(streams.begin(), streams.end(), nullptr) > 0;
  std::span<chorusStream* const> live = streams;  // one call on one stream, the common case, as it is
  std::vector<chorusStream*> distinct;
  std::unique_ptr<chorusStream> waiter;
  if (blocking || streams.size() > 1) {
    for (chorusStream_t s : streams)
      if (s != nullptr && std::find(distinct.begin(), distinct.end(), s) == distinct.end()) distinct.push_back(s);
    if (blocking) {
      waiter = std::make_unique<chorusStream>(&comm);
      distinct.push_back(waiter.get());
    }
    live = distinct;
  }
  const bool host = std::all_of(live.begin(), live.end(), [](chorusStream* s) { return s->device == nullptr; });
  // Memory first: its allocation may wait for the device, which the fences are about to hold.
  Executor::Fn task = adoptingMemory(comm, calls, makeTask(comm, calls));
  comm.executor().enqueue(orderWithDevices(comm, std::move(task), live), live,
                          !blocking && host ? Executor::Launch::kDefer : Executor::Launch::kWake);
  return waiter;
}

void issue(Comm& comm, std::span<const CollArgs> calls, std::span<const chorusStream_t> streams) {
  if (std::all_of(streams.begin(), streams.end(), [](chorusStream_t s) { return s == nullptr; })) {
    // Inline when idle (no hand-off latency). The task only refers to this frame, which outlives it: a
    // blocking call returns after its work ran, even when it had to queue.
    if (onDevice(calls)) {
      followDefaultStream(comm);
      CallMemory memory = growMemoryFor(comm, calls);
      comm.executor().runBlocking([&] {
        memory.adopt(comm);
        tagAndRun(comm, calls);
      });
      return;
    }
    comm.executor().runBlocking([&] { tagAndRun(comm, calls); });  // two references: no allocation
    return;
  }
  std::unique_ptr<chorusStream> waiter = start(comm, calls, streams);
  std::string msg;
  if (waiter && waiter->waitAll(&msg) != chorusSuccess) throw Error(waiter->error, msg);
}

void groupEnd() {
  if (tGroup.depth == 0) fail(chorusInvalidUsage, "chorusGroupEnd called without a matching chorusGroupStart");
  if (--tGroup.depth > 0) return;
  gOpenGroups.fetch_sub(1, std::memory_order_relaxed);
  std::vector<Recorded> calls = std::move(tGroup.calls);
  tGroup.calls.clear();
  // One operation per communicator, in the order communicators first appear.
  std::vector<Comm*> order;
  std::map<Comm*, std::pair<std::vector<CollArgs>, std::vector<chorusStream_t>>> byComm;
  for (const Recorded& r : calls) {
    if (!byComm.count(r.comm)) order.push_back(r.comm);
    byComm[r.comm].first.push_back(r.args);
    byComm[r.comm].second.push_back(r.stream);
  }
  for (Comm* c : order) CallRef ref(static_cast<chorusComm_t>(c), "comm (recorded in this group)");
  if (order.size() == 1) {
    CallRef ref(static_cast<chorusComm_t>(order[0]), "comm");
    issue(*order[0], byComm[order[0]].first, byComm[order[0]].second);
    return;
  }
  // Several communicators: start all before waiting on any, so cross-communicator dependencies cannot deadlock.
  std::vector<std::unique_ptr<chorusStream>> waiters;
  for (Comm* c : order) {
    CallRef ref(static_cast<chorusComm_t>(c), "comm");
    waiters.push_back(start(*c, byComm[c].first, byComm[c].second));
  }
  chorusResult_t first = chorusSuccess;
  std::string firstMsg;
  for (auto& w : waiters) {
    std::string msg;
    if (w && w->waitAll(&msg) != chorusSuccess && first == chorusSuccess) {
      first = w->error;
      firstMsg = msg;
    }
  }
  if (first != chorusSuccess) throw Error(first, firstMsg);
}

}  // namespace chorus
