#include "lib/executor.h"

#include "lib/comm.h"
#include "lib/error.h"
#include "lib/log.h"
#include "lib/stream.h"

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

void Executor::execute(const Fn& fn, chorusResult_t* rc, std::string* msg) {
  log::LogRankScope scope(comm_.rank());
  try {
    comm_.throwIfFailed();
    fn();
    *rc = chorusSuccess;
  } catch (const Error& e) {
    Error f = comm_.markFailed(e);
    *rc = f.code();
    *msg = f.what();
  } catch (const std::bad_alloc&) {
    Error f = comm_.markFailed(Error(chorusSystemError, "out of memory while running an operation"));
    *rc = f.code();
    *msg = f.what();
  }
}

void Executor::runBlocking(const Fn& fn) {
  std::unique_lock<std::mutex> g(mu_);
  if (queue_.empty() && !busy_) {
    busy_ = true;
    g.unlock();
    chorusResult_t rc;
    std::string msg;
    execute(fn, &rc, &msg);
    g.lock();
    busy_ = false;
    g.unlock();
    cv_.notify_all();
    if (rc != chorusSuccess) throw Error(rc, msg);
    return;
  }
  auto done = std::make_shared<Completion>();
  queue_.push_back(Task{fn, {}, done});
  if (!worker_.joinable()) worker_ = std::thread(&Executor::workerLoop, this);
  cv_.notify_all();
  cv_.wait(g, [&] { return done->finished; });
  if (done->rc != chorusSuccess) throw Error(done->rc, done->msg);
}

void Executor::enqueue(Fn fn, std::vector<chorusStream*> streams) {
  for (chorusStream* s : streams) s->add();
  std::lock_guard<std::mutex> g(mu_);
  queue_.push_back(Task{std::move(fn), std::move(streams), nullptr});
  if (!worker_.joinable()) worker_ = std::thread(&Executor::workerLoop, this);
  cv_.notify_all();
}

void Executor::drain() {
  std::unique_lock<std::mutex> g(mu_);
  cv_.wait(g, [&] { return queue_.empty() && !busy_; });
}

void Executor::workerLoop() {
  std::unique_lock<std::mutex> g(mu_);
  while (true) {
    cv_.wait(g, [&] { return stop_ || (!queue_.empty() && !busy_); });
    if (queue_.empty()) return;  // stop_ with nothing left
    Task t = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    g.unlock();
    chorusResult_t rc;
    std::string msg;
    execute(t.fn, &rc, &msg);
    for (chorusStream* s : t.streams) s->finish(rc, msg);
    g.lock();
    busy_ = false;
    if (t.done) {
      t.done->finished = true;
      t.done->rc = rc;
      t.done->msg = msg;
    }
    cv_.notify_all();
  }
}

}  // namespace chorus
