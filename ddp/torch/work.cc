#include "ddp/torch/work.h"

#include <Python.h>
#include <pthread.h>
#include <ATen/core/ivalue.h>

#include <algorithm>
#include <exception>
#include <thread>

#include "ddp/torch/compat.h"
#include "ddp/torch/gil.h"

namespace chorus::torchpg {

namespace {

// How long a Future that C++ took stays unmarked while its issuing thread makes no further call.
constexpr std::chrono::milliseconds kAttachWindow{1};

}  // namespace

ChorusWork::ChorusWork(int rank, c10d::OpType type, const char* name, std::shared_ptr<const std::string> where,
                       std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep, std::function<void()> after,
                       Completer* completer, CallCount calls)
    : Work(rank, type),
      name_(name),
      where_(std::move(where)),
      outputs_(std::move(outputs)),
      keep_(std::move(keep)),
      after_(std::move(after)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors())),
      completer_(completer),
      calls_(std::move(calls)) {}

std::string ChorusWork::call() const { return c10::str(name_, " on ", *where_); }

int ChorusWork::sourceRank() const {
  TORCH_CHECK(source_ != nullptr, "chorus: sourceRank() is known only for a recv from any source (", call(), ")");
  TORCH_CHECK(*source_ >= 0, "chorus: sourceRank() of ", call(), " before it completed (wait() first)");
  return *source_;
}

// Note [Lazy completion]: a Work is completed by whichever comes first: a thread waiting for it (which also runs
// the operation itself if the communicator has not started it: Note [Helping] in lib/comm/executor.cc), one asking
// isCompleted() once its stream is done, or the completer. The completer's thread wakes only for Works whose
// Future was handed out (DDP's buckets: the Future's callbacks must run without anyone waiting), and then completes
// the queue in order; otherwise the next push takes the finished Works off the queue's front (releasing their
// tensors). Waking the completer for every Work cost a blocking 8-byte all_reduce two more thread wake-ups. The
// completer pointer is cleared under futureMu_ at completion, and the completer completes every queued Work
// before it goes, so getFuture() never reaches a completer that is gone.
c10::intrusive_ptr<c10::ivalue::Future> ChorusWork::getFuture() {
  if (fromCallback_) {
    complete(nullptr);  // the callback waits for it next (PowerSGD's), on the callback thread (Note [Callback order])
    return future_;
  }
  std::lock_guard<std::mutex> g(futureMu_);
  if (!handedOut_) {
    callsAtHandOut_ = calls_->load();
    handedOutAt_ = std::chrono::steady_clock::now();
    taker_ = FutureTaker::here(future_.get(), sizeof(c10::ivalue::Future));
    if (completer_ != nullptr) completer_->hurry();
  }
  handedOut_ = true;
  return future_;
}

void ChorusWork::issued(std::shared_ptr<SharedStream> stream) {
  std::lock_guard<std::mutex> g(streamMu_);
  stream_ = std::move(stream);
  issued_ = true;
  flush_ = nullptr;
}

bool ChorusWork::wait(std::chrono::milliseconds timeout) {
  std::function<void()> flush;
  {
    std::lock_guard<std::mutex> g(streamMu_);
    if (!issued_) flush = flush_;
  }
  if (flush) flush();  // a blocking call inside a coalescing region
  {
    std::lock_guard<std::mutex> g(streamMu_);
    TORCH_CHECK(issued_, "chorus: ", call(), " was never issued");
  }
  if (timeout != kNoTimeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!streamDone()) {
      if (std::chrono::steady_clock::now() >= until)
        throwBackendError(c10::str("chorus: ", call(), " did not complete within ", timeout.count(),
                                   " ms (the timeout given to wait)"));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  complete(nullptr);
  return Work::wait(timeout);
}

bool ChorusWork::streamDone() {
  std::lock_guard<std::mutex> g(streamMu_);
  if (!issued_) return false;
  return stream_ == nullptr || chorusStreamQuery(stream_->get()) != chorusInProgress;
}

bool ChorusWork::futureHandedOut() {
  std::lock_guard<std::mutex> g(futureMu_);
  return handedOut_;
}

bool ChorusWork::isCompleted() {
  if (Work::isCompleted()) return true;
  if (!streamDone()) return false;
  complete(nullptr);
  return true;
}

// Not std::call_once: glibc's ends it with a futex wake system call whether anyone waits or not, and every torch
// call completes a Work (docs/torch-results.md, "Third step").
void ChorusWork::complete(CallbackThread* callbacks) {
  std::lock_guard<std::mutex> g(completeMu_);
  if (completed_) return;
  completeOnce(callbacks);
  completed_ = true;
}

void ChorusWork::completeOnce(CallbackThread* callbacks) {
  std::shared_ptr<SharedStream> stream;
  {
    std::lock_guard<std::mutex> g(streamMu_);
    stream = stream_;
  }
  TORCH_INTERNAL_ASSERT(stream != nullptr, "chorus: ", call(), " completed before it was issued");
  const chorusResult_t rc = chorusStreamSynchronize(stream->get());
  std::exception_ptr error;
  if (rc != chorusSuccess) {
    error = backendError(c10::str("chorus: ", call(), " failed: ", chorusGetErrorString(rc), ": ",
                                  chorusGetLastError(nullptr)));
  } else {
    try {
      if (after_) after_();
    } catch (...) {
      error = std::current_exception();
    }
  }
  {
    std::lock_guard<std::mutex> g(streamMu_);
    stream_.reset();
  }
  stream.reset();  // the last Work on it destroys the Chorus stream
  keep_.clear();
  finish(error);
  auto mark = [future = future_, outputs = outputs_, error] {
    if (error) future->setError(error);
    else future->markCompleted(c10::IValue(outputs));
  };
  std::shared_ptr<FutureTaker> taker;
  {
    std::lock_guard<std::mutex> g(futureMu_);
    completer_ = nullptr;
    taker = std::move(taker_);
    if (!handedOut_) {  // nobody holds the Future, so no callback can run here
      mark();
      return;
    }
  }
  if (callbacks == nullptr) return mark();
  callbacks->post([mark = std::move(mark), calls = calls_, at = callsAtHandOut_, since = handedOutAt_,
                   taker = std::move(taker)] {
    // Not before the thread that took the Future has attached its callbacks (Note [Callback order]).
    auto attached = [&] {
      if (taker != nullptr) return taker->settled();
      return calls->load() != at || std::chrono::steady_clock::now() - since >= kAttachWindow;
    };
    auto pause = std::chrono::microseconds(50);
    while (!attached()) {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
    WithGil gil;
    mark();
  });
}

CoalescedWork::CoalescedWork(int rank, std::vector<c10::intrusive_ptr<ChorusWork>> members)
    : Work(rank, kCoalescedOpType), members_(std::move(members)) {}

bool CoalescedWork::isCompleted() {
  for (auto& m : members_)
    if (!m->isCompleted()) return false;
  return true;
}

bool CoalescedWork::wait(std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (auto& m : members_) {  // each raises its own failure
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    m->wait(timeout == kNoTimeout ? kNoTimeout : std::max(left, std::chrono::milliseconds(0)));
  }
  return true;
}

std::vector<at::Tensor> CoalescedWork::result() {
  std::vector<at::Tensor> all;
  for (auto& m : members_) {
    std::vector<at::Tensor> r = m->result();
    all.insert(all.end(), r.begin(), r.end());
  }
  return all;
}

c10::intrusive_ptr<c10::ivalue::Future> CoalescedWork::getFuture() {
  c10::List<c10::intrusive_ptr<c10::ivalue::Future>> futures(c10::FutureType::create(c10::AnyType::get()));
  for (auto& m : members_) futures.push_back(m->getFuture());
  std::vector<at::Tensor> outputs = result();
  // collectAll's Future fails with the first member's failure, and then() passes a failure on.
  return c10::collectAll(futures)->then([outputs](c10::ivalue::Future&) { return c10::IValue(outputs); },
                                        c10::ListType::ofTensors());
}

// Note [Callback order]:
// A Future's callbacks may issue collectives: PowerSGD's hook all-reduces its P and Q matrices from callbacks of the
// bucket's all_reduce, and waits for each inside the callback. Collectives must be called in one order on every
// rank, yet those callbacks run while the issuing thread (autograd's) goes on calling the next buckets' all_reduce:
// issued on the group's communicator, the two threads' calls interleaved differently on each rank, and Chorus
// rightly failed the mismatched calls (torch 2.6, DDP with small buckets; gloo aborts on the same run, its tags
// mismatched). So the callbacks' collectives form a sequence of their own, the same on every rank:
//  * callbacks run on one thread per completer, one at a time, in the order the Works were called (the completer
//    completes in that order, and Completer::push leaves every handed-out Work to the completer's thread);
//  * a collective called from that thread goes to a second communicator of the group (ChorusBackend::run);
//  * the Future of such a call completes where it is asked for: the callback waits for it next;
//  * a callback must never run on the issuing thread instead, which torch does when then() finds the Future
//    already marked: a handed-out Future is marked only once its callbacks are attached. A C++ caller (DDP's
//    reducer with its built-in hooks) attaches them before it calls again, so the Future waits for the issuing
//    thread's next call or kAttachWindow. A Python caller (a comm hook: PowerSGD's runs ~70 lines between
//    get_future() and then()) may be preempted anywhere in between: the thread that waits 5 ms for the GIL makes
//    CPython switch at the next bytecode, so holding the GIL proves nothing (CI hung that way: the callback ran
//    inline on one rank and issued its all_reduce on the main communicator). So the Future waits for the frame that
//    took it to leave its thread's stack (FutureTaker): then() must be called in that frame, as torch's hooks do
//    (the thread's next collective proves nothing here: a hook may issue two before it chains the first). A frame
//    that waits for the Future instead is seen blocked on the Future's futex (/proc/self/task/<tid>/syscall), one
//    that waits for something else is seen off the CPU for FutureTaker::kBlocked, and FutureTaker::kLongest bounds
//    the rest (a frame polling done()).
//    (Waiting for the Future in C++ costs nothing: Work::wait completes there.)
// A callback that blocks on a Future of a call it did not issue itself waits for callbacks queued behind it: it
// must chain with then() instead, as every hook of torch does.
namespace {
thread_local bool tOnCallbackThread = false;
}

bool CallbackThread::current() { return tOnCallbackThread; }

void CallbackThread::close() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CallbackThread::post(std::function<void()> fn) {
  std::unique_lock<std::mutex> g(mu_);
  if (stop_) {  // closing: no thread would take it
    g.unlock();
    fn();
    return;
  }
  queue_.push_back(std::move(fn));
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  else cv_.notify_one();
}

void CallbackThread::run() {
  pthread_setname_np(pthread_self(), "chorus-callback");  // as libchorus names its own threads
  tOnCallbackThread = true;
  std::unique_lock<std::mutex> g(mu_);
  for (;;) {
    cv_.wait(g, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    std::function<void()> fn = std::move(queue_.front());
    queue_.pop_front();
    g.unlock();
    fn();
    fn = nullptr;  // its captures go before the lock is taken again
    g.lock();
  }
}

Completer::Completer() : thread_([this] { run(); }) {}


void Completer::close() {
  WithoutGil nogil;
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  callbacks_.close();
}

void Completer::push(c10::intrusive_ptr<ChorusWork> w) {
  std::vector<c10::intrusive_ptr<ChorusWork>> finished;
  std::unique_lock<std::mutex> g(mu_);
  if (stop_) {  // closing (a callback issued it): completed here
    g.unlock();
    w->complete(nullptr);
    return;
  }
  // Works whose operations are done leave the queue here, in order (Note [Lazy completion]), up to the first whose
  // Future was handed out: the completer's thread completes those, so their callbacks are posted in call order
  // (Note [Callback order]).
  while (!queue_.empty() && !queue_.front()->futureHandedOut() && queue_.front()->streamDone()) {
    finished.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  queue_.push_back(std::move(w));
  g.unlock();
  for (auto& f : finished) f->complete(&callbacks_);  // a no-op for those their waiters completed
}

void Completer::hurry() {
  {
    std::lock_guard<std::mutex> g(mu_);
    hurry_ = true;
  }
  cv_.notify_one();
}

void Completer::run() {
  std::unique_lock<std::mutex> g(mu_);
  for (;;) {
    cv_.wait(g, [&] { return stop_ || (hurry_ && !queue_.empty()); });
    if (queue_.empty()) return;  // stop_ with nothing left
    c10::intrusive_ptr<ChorusWork> w = std::move(queue_.front());
    queue_.pop_front();
    if (queue_.empty()) hurry_ = false;
    g.unlock();
    w->complete(&callbacks_);
    w.reset();
    g.lock();
  }
}

}  // namespace chorus::torchpg
