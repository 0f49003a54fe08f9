#include "lib/comm/executor.h"

#include <algorithm>
#include <chrono>
#include <string_view>

#include "lib/comm/comm.h"
#include "lib/base/error.h"
#include "lib/base/log.h"
#include "lib/base/thread_name.h"
#include "lib/comm/stream.h"

namespace chorus {

struct Completion {
  bool finished = false;
  chorusResult_t rc = chorusSuccess;
  std::string msg;
};

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

// Marks the communicator failed and reports it; errors of a transport or the algorithms name the rank already,
// others (a device runtime's, an unexpected exception) get its name in front.
void Executor::report(const Error& e, chorusResult_t* rc, std::string* msg) {
  const std::string who = comm_.name();
  const bool named = std::string_view(e.what()).find(who) != std::string_view::npos;
  Error f = comm_.markFailed(named ? e : Error(e.code(), fmt::format("{}: {}", who, e.what())));
  *rc = f.code();
  *msg = f.what();
  comm_.tagged().failAll(f.code(), f.what());
}

void Executor::startWorker() {
  if (!worker_.joinable()) worker_ = std::thread(&Executor::workerLoop, this);
}

void Executor::execute(FunctionRef<void()> fn, chorusResult_t* rc, std::string* msg) {
  log::LogRankScope scope(comm_.rank());
  try {
    comm_.throwIfFailed();
    fn();
    *rc = chorusSuccess;
  } catch (const Error& e) {
    report(e, rc, msg);
  } catch (const std::bad_alloc&) {
    report(Error(chorusSystemError, "out of memory while running an operation"), rc, msg);
  } catch (const std::exception& e) {
    report(Error(chorusInternalError, fmt::format("unexpected failure while running an operation: {}", e.what())),
           rc, msg);
  } catch (...) {  // nothing may escape to the worker thread (std::terminate) or leave busy_ set on the inline path
    report(Error(chorusInternalError, "unexpected failure while running an operation (an exception of unknown type)"),
           rc, msg);
  }
  comm_.endCall();
}

void Executor::runBlocking(FunctionRef<void()> fn) {
  bool idle = false;
  if (queued_.load() == 0 && busy_.compare_exchange_strong(idle, true)) {  // the fast path: no lock
    chorusResult_t rc;
    std::string msg;
    execute(fn, &rc, &msg);
    releaseInline();
    if (rc != chorusSuccess) throw Error(rc, msg);
    return;
  }
  std::unique_lock<std::mutex> g(mu_);
  auto done = std::make_shared<Completion>();
  push(fn, {}, done, false);
  startWorker();
  cv_.notify_all();
  if (driving_.load()) comm_.kick();
  cv_.wait(g, [&] { return done->finished; });
  if (done->rc != chorusSuccess) throw Error(done->rc, done->msg);
}

// Note [Inline fast path]: a blocking call on an idle executor claims busy_ with one compare-exchange and runs
// on the caller's thread; no mutex is taken (four uncontended lock/unlock pairs per call cost ~0.03 us, 15% of
// an 8-byte AllReduce between two ranks). Whoever may wait for it to finish (the worker with queued work, a
// drain) is seen through queued_ / waiters_: those are raised before the waiter checks busy_, and released
// here after busy_ is cleared, all seq_cst, so one side always sees the other and the notification (under the
// mutex, so it cannot fall between a waiter's check and its wait) is never lost.
void Executor::releaseInline() {
  busy_.store(false);
  if (queued_.load() != 0 || waiters_.load() != 0 || comm_.tagged().needsDriving()) {
    std::lock_guard<std::mutex> g(mu_);
    startWorker();
    cv_.notify_all();
  }
}


// Note [Deferred wake]: a worker that ran an operation or was woken for one rests afterwards: it sleeps
// CHORUS_DEFER_US (1 ms) at a time instead of until woken, and while it rests, an operation queued alone on an
// idle communicator does not wake it. Most such operations are waited for a few microseconds later (torch's
// blocking calls are a Work and its wait()), and the waiting thread then runs it itself (Note [Helping]); a wake
// that the helper then makes useless still costs a thread switch, which on an oversubscribed host is most of a
// small call (torch's all_reduce of 8 bytes, 4 processes on 2 cores over shm: 50 against 23 us). An operation
// nobody waits for is still started within CHORUS_DEFER_US, when the worker looks. Whoever waits for or polls the
// stream (synchronize, query, destroy, drain, a helper that cannot run it) wakes the worker first, and a second
// queued operation wakes it at once, so batches and work issued ahead of a wait keep their overlap. Only a
// caller that synchronizes promptly is bet on: the worker defers only while the last operation was run by, or
// waited for during its run by, a synchronizing thread; once the worker runs one itself (a batch it keeps up with,
// work nobody waited for within CHORUS_DEFER_US) it is woken again at once (all_reduce_perf -z 0 over TCP, 8 B:
// 11-12 us with every lone operation deferred, 9 us with neither). A resting worker that finds no deferred wake
// when it looks sleeps until woken, so an idle process does not wake up. One that finds wakes were deferred but
// every such operation already taken by its synchronizing thread doubles the time to its next look, up to
// kMaxRestScale x CHORUS_DEFER_US, and is back at CHORUS_DEFER_US once it runs an operation or sleeps until woken:
// each look is a thread wake-up, and on a host with no idle core it preempts a rank in a lockstep collective
// (a Python loop of stream calls and synchronizes, 2 ranks on 2 cores, 1 MiB: ~1000 looks a second cost 10%;
// docs/results/2026-12-07-deferred-look.md). So an operation nobody waits for starts within CHORUS_DEFER_US
// unless it follows a run of promptly synchronized ones, and within kMaxRestScale x CHORUS_DEFER_US always.
// Device streams, host functions and blocking callers always wake the worker.
//
// Note [Allocation-free queueing]: the issuing thread of a stream's operations shares the cores with the workers
// that run them (2 ranks on 2 cores: four threads), so what it spends per call is taken from the operations.
// Each queued operation used to cost three allocations there (the std::function's lambda, its copy of the call's
// arguments, the list of streams) and as many frees on the worker: with all_reduce_perf -z 0 queueing thousands
// ahead, malloc and the page faults of a heap that grew and was trimmed again were a quarter of the run's CPU
// time. Now the lambda and its one call sit in the task (Fn), the tasks in a Ring whose slots keep their stream
// lists' capacity, and the runner swaps the front task out instead of moving it, handing back its buffers.
void Executor::enqueue(Fn fn, std::span<chorusStream* const> streams, Launch launch) {
  for (chorusStream* s : streams) s->add();
  std::lock_guard<std::mutex> g(mu_);
  const bool started = worker_.joinable();
  startWorker();
  push(std::move(fn), streams, nullptr, launch == Launch::kWorkerOnly);
  if (launch == Launch::kDefer && started && helperWaits_ && workerResting_ && workerParked_ && queue_.size() == 1) {
    deferredSinceLook_ = true;
    deferrals_.fetch_add(1);
    deferred_.store(true);
  } else {
    cv_.notify_all();
  }
  if (driving_.load()) comm_.kick();
}

void Executor::wakeDeferred() {
  if (!deferred_.load()) return;
  std::lock_guard<std::mutex> g(mu_);
  wakeDeferredLocked();
}

void Executor::wakeDeferredLocked() {
  if (!deferred_.load()) return;
  deferred_.store(false);
  if (!queue_.empty()) cv_.notify_all();
}

int Executor::restScale() {
  std::lock_guard<std::mutex> g(mu_);
  return restScale_;
}

void Executor::drain() {
  std::unique_lock<std::mutex> g(mu_);
  wakeDeferredLocked();
  waiters_.fetch_add(1);  // before looking at busy_ (Note [Inline fast path])
  cv_.wait(g, [&] { return queue_.empty() && (!busy_.load() || driving_.load()); });
  waiters_.fetch_sub(1);
}

void Executor::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  comm_.kick();
  if (worker_.joinable()) worker_.join();
}

// The worker's turn with nothing queued. Failures break the communicator (Executor::report fails what is in
// flight) exactly as an operation's would.
void Executor::drive(std::unique_lock<std::mutex>& g) {
  driving_.store(true);
  g.unlock();
  chorusResult_t rc;
  std::string msg;
  execute([&] { comm_.driveTagged([&] { return queued_.load() != 0 || stop_.load(); }); }, &rc, &msg);
  g.lock();
  driving_.store(false);
  busy_.store(false);
  cv_.notify_all();
}

void Executor::workerLoop() {
  nameThisThread("chorus-worker");
  std::unique_lock<std::mutex> g(mu_);
  auto tagged = [&] { return !stop_ && comm_.tagged().needsDriving() && !comm_.failed(); };
  auto work = [&] { return stop_ || (!busy_.load() && (!queue_.empty() || tagged())); };
  const std::chrono::microseconds rest(comm_.config().deferUs);
  while (true) {
    workerParked_ = true;
    if (!work()) {
      if (!workerResting_) {
        cv_.wait(g);  // woken (a helper may take the work meanwhile): rest from now on (Note [Deferred wake])
        workerResting_ = rest.count() > 0;
        continue;
      }
      deferredSinceLook_ = false;
      if (!cv_.wait_for(g, rest * restScale_, work)) {
        if (!deferredSinceLook_) {  // a quiet period: sleep until woken
          workerResting_ = false;
          restScale_ = 1;
        } else {  // every deferred operation was taken by its synchronizing thread: look less often
          restScale_ = std::min(restScale_ * 2, kMaxRestScale);
        }
        continue;
      }
    }
    workerParked_ = false;
    workerResting_ = rest.count() > 0;
    deferred_.store(false);
    if (queue_.empty() && !tagged()) return;  // stop_ with nothing left
    bool idle = false;
    if (!busy_.compare_exchange_strong(idle, true)) continue;  // an inline call got there first
    if (queue_.empty()) {
      drive(g);
      continue;
    }
    helperWaits_ = false;
    restScale_ = 1;
    runFront(g, true);
  }
}

void Executor::push(Fn fn, std::span<chorusStream* const> streams, std::shared_ptr<Completion> done,
                    bool workerOnly) {
  Task& t = queue_.push_back();  // a reused slot: every field is set
  t.fn = std::move(fn);
  t.streams.assign(streams.begin(), streams.end());
  t.done = std::move(done);
  t.workerOnly = workerOnly;
  queued_.fetch_add(1);
}

void Executor::runFront(std::unique_lock<std::mutex>& g, bool wakeWorker) {
  Task& t = running_;
  std::swap(t, queue_.front());  // the slot gets the last task's emptied buffers back
  queue_.pop_front();
  queued_.fetch_sub(1);
  if (queue_.empty()) deferred_.store(false);
  g.unlock();
  chorusResult_t rc;
  std::string msg;
  execute(t.fn, &rc, &msg);
  t.fn = nullptr;  // what the operation holds (its device fences) goes before its streams may be destroyed
  for (chorusStream* s : t.streams) s->finish(rc, msg);
  t.streams.clear();
  const std::shared_ptr<Completion> done = std::move(t.done);
  g.lock();
  busy_.store(false);
  if (done) {
    done->finished = true;
    done->rc = rc;
    done->msg = msg;
  }
  if (wakeWorker || done || waiters_.load() != 0) cv_.notify_all();
}

// Note [Helping]: a thread about to wait for a stream (chorusStreamSynchronize; a torch Work's wait()) runs the
// operation itself when it is the only one queued and the worker is parked, as a blocking call would: handing an
// 8-byte call to the worker and sleeping until it is done costs two thread wake-ups, several times the call
// (torch's blocking all_reduce: 50 against 20 us per call, 2 ranks). Order is kept: it runs under busy_, exactly as
// on the worker; whichever thread claims busy_ first runs it. A batch stays with the worker: a helper that took
// its turns with the worker through a queue of calls doubled the context switches and cut all_reduce_perf -z 0's
// busbw (2 ranks over shm, 64 KiB: 4-8 against 10-12 GB/s). Host functions stay on the worker (chorus.h promises
// them the communicator's thread).
void Executor::help(FunctionRef<bool()> done) {
  if (done()) return;
  std::unique_lock<std::mutex> g(mu_);
  bool idle = false;
  if (!workerParked_ || done() || queue_.size() != 1 || queue_.front().workerOnly ||
      !busy_.compare_exchange_strong(idle, true)) {
    if (!workerParked_ && queue_.empty() && !done()) helperWaits_ = true;  // the worker runs what it waits for
    wakeDeferredLocked();  // the caller waits next: whoever runs the work must be awake
    return;
  }
  helperWaits_ = true;
  runFront(g, false);
  // Work the worker may have seen busy_ for and gone back to sleep: operations issued meanwhile, or tagged traffic
  // the operation posted (a receive finishes after its task; the worker drives it).
  if (!queue_.empty() || comm_.tagged().needsDriving()) cv_.notify_all();
}

}  // namespace chorus
