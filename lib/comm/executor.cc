#include "lib/comm/executor.h"

#include <string_view>

#include "lib/comm/comm.h"
#include "lib/base/error.h"
#include "lib/base/log.h"
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
  queue_.push_back(Task{fn, {}, done});
  queued_.fetch_add(1);
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


void Executor::enqueue(Fn fn, std::vector<chorusStream*> streams, bool workerOnly) {
  for (chorusStream* s : streams) s->add();
  std::lock_guard<std::mutex> g(mu_);
  queue_.push_back(Task{std::move(fn), std::move(streams), nullptr, workerOnly});
  queued_.fetch_add(1);
  startWorker();
  cv_.notify_all();
  if (driving_.load()) comm_.kick();
}

void Executor::drain() {
  std::unique_lock<std::mutex> g(mu_);
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
  std::unique_lock<std::mutex> g(mu_);
  auto tagged = [&] { return !stop_ && comm_.tagged().needsDriving() && !comm_.failed(); };
  while (true) {
    workerParked_ = true;
    cv_.wait(g, [&] { return stop_ || (!busy_.load() && (!queue_.empty() || tagged())); });
    workerParked_ = false;
    if (queue_.empty() && !tagged()) return;  // stop_ with nothing left
    bool idle = false;
    if (!busy_.compare_exchange_strong(idle, true)) continue;  // an inline call got there first
    if (queue_.empty()) {
      drive(g);
      continue;
    }
    runFront(g, true);
  }
}

void Executor::runFront(std::unique_lock<std::mutex>& g, bool wakeWorker) {
  Task t = std::move(queue_.front());
  queue_.pop_front();
  queued_.fetch_sub(1);
  g.unlock();
  chorusResult_t rc;
  std::string msg;
  execute(t.fn, &rc, &msg);
  t.fn = nullptr;  // what the operation holds (its device fences) goes before its streams may be destroyed
  for (chorusStream* s : t.streams) s->finish(rc, msg);
  g.lock();
  busy_.store(false);
  if (t.done) {
    t.done->finished = true;
    t.done->rc = rc;
    t.done->msg = msg;
  }
  if (wakeWorker || t.done || waiters_.load() != 0) cv_.notify_all();
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
  if (!workerParked_ || done() || queue_.size() != 1 || queue_.front().workerOnly) return;
  bool idle = false;
  if (!busy_.compare_exchange_strong(idle, true)) return;
  runFront(g, false);
  // Work the worker may have seen busy_ for and gone back to sleep: operations issued meanwhile, or tagged traffic
  // the operation posted (a receive finishes after its task; the worker drives it).
  if (!queue_.empty() || comm_.tagged().needsDriving()) cv_.notify_all();
}

}  // namespace chorus
