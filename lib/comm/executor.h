// Note [Issue order]: operations on one communicator run one at a time, in the order they were issued,
// whatever stream they were given. A blocking call runs on the caller's thread when nothing is queued (no
// hand-off latency); otherwise it queues behind the asynchronous work and waits. Asynchronous work runs on a
// worker thread started on first use. While nothing is queued and tagged point-to-point has work in flight
// (lib/comm/tagged.h), the worker drives it, giving way as soon as an operation is queued. A thread about to wait
// for a stream's work may run the queued operations itself (Note [Helping]).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <span>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "lib/base/function_ref.h"
#include "lib/base/inline_function.h"
#include "lib/base/ring.h"

struct chorusStream;

namespace chorus {

class Comm;
class Error;

class Executor {
 public:
  // Room for an operation's lambda with one call's arguments in place (Note [Allocation-free queueing]).
  using Fn = InlineFunction<void(), 96>;
  explicit Executor(Comm& comm) : comm_(comm) {}
  ~Executor();

  // Runs fn after all earlier work and returns when it is done; rethrows its chorus::Error.
  void runBlocking(FunctionRef<void()> fn);
  // How a queued operation reaches the worker. kWake: the worker is woken for it. kDefer: a resting worker is not
  // (Note [Deferred wake]); only for work on host streams that nobody waits for without telling the executor (a
  // synchronize, a query). kWorkerOnly: a host function, woken for, and run on the worker, never on a helping thread.
  enum class Launch { kWake, kDefer, kWorkerOnly };
  // Queues fn and returns; each stream counts it as pending until it finishes.
  void enqueue(Fn fn, std::span<chorusStream* const> streams, Launch launch = Launch::kWake);
  // Unless `done`, runs the queued operation on the calling thread if it is the only one, the executor is idle,
  // the worker parked, and it is not a host function (Note [Helping]). Otherwise wakes a deferred worker.
  void help(FunctionRef<bool()> done);
  // For a thread about to wait for queued work or poll it: wakes the worker if its wake was deferred.
  void wakeDeferred();
  // Waits until every queued operation has finished.
  void drain();
  // How many operations were queued without waking the worker (Note [Deferred wake]); for tests.
  uint64_t deferrals() const { return deferrals_.load(); }
  // How many CHORUS_DEFER_US the resting worker sleeps before it looks (Note [Deferred wake]); for tests.
  int restScale();
  // Ends the worker once the queue is empty; no tagged traffic is driven afterwards.
  void stop();

 private:
  struct Task {
    Fn fn;
    std::vector<chorusStream*> streams;
    std::shared_ptr<struct Completion> done;  // set for a blocking caller waiting on the queue
    bool workerOnly = false;
  };
  void execute(FunctionRef<void()> fn, chorusResult_t* rc, std::string* msg);
  void report(const Error& e, chorusResult_t* rc, std::string* msg);  // a failed operation
  void releaseInline();  // after an operation ran on the caller's thread
  void workerLoop();
  void wakeDeferredLocked();  // with mu_ held
  // Runs the front task, whose busy_ the caller claimed; g is held on entry and on return. Notifies the waiters of
  // that task and drain()'s, and the worker when `wakeWorker`.
  void runFront(std::unique_lock<std::mutex>& g, bool wakeWorker);
  void startWorker();  // with mu_ held
  // Appends a task to queue_, with mu_ held.
  void push(Fn fn, std::span<chorusStream* const> streams, std::shared_ptr<Completion> done, bool workerOnly);
  void drive(std::unique_lock<std::mutex>& g);  // tagged traffic, with busy_ claimed

  Comm& comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  Ring<Task> queue_;                      // guarded by mu_
  Task running_;                          // the operation being run; whoever claimed busy_ owns it
  std::atomic<int> queued_{0};            // queue_.size(), readable without mu_
  std::atomic<int> waiters_{0};           // drain() calls waiting for the executor to become idle
  std::atomic<bool> busy_{false};         // an operation is running (inline or on the worker), or the worker drives
  std::atomic<bool> driving_{false};      // the worker drives tagged traffic (busy_ is set too)
  std::atomic<bool> stop_{false};  // written under mu_; the driver reads it without
  bool workerParked_ = true;       // guarded by mu_: the worker (if started) waits for work
  bool workerResting_ = false;     // guarded by mu_: it waits with a timeout (Note [Deferred wake])
  bool helperWaits_ = false;       // guarded by mu_: a synchronizing thread ran the last operation, or waited for it
  bool deferredSinceLook_ = false;  // guarded by mu_: a wake was deferred since the resting worker last looked
  static constexpr int kMaxRestScale = 16;
  int restScale_ = 1;  // guarded by mu_: the resting worker looks every restScale_ x CHORUS_DEFER_US
  std::atomic<uint64_t> deferrals_{0};
  std::atomic<bool> deferred_{false};  // a queued operation's wake was deferred and nobody has taken it yet
  std::thread worker_;
};

}  // namespace chorus
