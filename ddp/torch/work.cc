#include "ddp/torch/work.h"

#include <Python.h>
#include <ATen/core/ivalue.h>

#include <algorithm>
#include <exception>
#include <thread>

#include "ddp/torch/compat.h"

namespace chorus::torchpg {

ChorusWork::ChorusWork(int rank, c10d::OpType type, const char* name, std::shared_ptr<const std::string> where,
                       std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep, std::function<void()> after,
                       Completer* completer)
    : Work(rank, type),
      name_(name),
      where_(std::move(where)),
      outputs_(std::move(outputs)),
      keep_(std::move(keep)),
      after_(std::move(after)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))),
      completer_(completer) {}

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
  std::lock_guard<std::mutex> g(futureMu_);
  if (!handedOut_ && completer_ != nullptr) completer_->hurry();
  handedOut_ = true;
  return future_;
}

void ChorusWork::issued(std::shared_ptr<SharedStream> stream) {
  std::lock_guard<std::mutex> g(streamMu_);
  stream_ = std::move(stream);
  issued_ = true;
}

bool ChorusWork::wait(std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> g(streamMu_);
    TORCH_CHECK(issued_, "chorus: ", call(), " was called inside a coalescing region and runs at the region's end: ",
                "wait for it after the region");
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

bool ChorusWork::isCompleted() {
  if (Work::isCompleted()) return true;
  if (!streamDone()) return false;
  complete(nullptr);
  return true;
}

void ChorusWork::complete(CallbackThreads* callbacks) {
  std::call_once(once_, [this, callbacks] { completeOnce(callbacks); });
}

void ChorusWork::completeOnce(CallbackThreads* callbacks) {
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
  {
    std::lock_guard<std::mutex> g(futureMu_);
    completer_ = nullptr;
    if (!handedOut_) {  // nobody holds the Future, so no callback can run here
      mark();
      return;
    }
  }
  if (callbacks != nullptr) callbacks->post(std::move(mark));
  else mark();
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
                                        c10::ListType::create(c10::TensorType::get()));
}

void CallbackThreads::close() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
}

void CallbackThreads::post(std::function<void()> fn) {
  std::unique_lock<std::mutex> g(mu_);
  if (stop_) {  // closing: no thread would take it
    g.unlock();
    fn();
    return;
  }
  queue_.push_back(std::move(fn));
  if (queue_.size() > idle_) threads_.emplace_back([this] { run(); });
  else cv_.notify_one();
}

void CallbackThreads::run() {
  std::unique_lock<std::mutex> g(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(g, [&] { return stop_ || !queue_.empty(); });
    --idle_;
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

namespace {

// Releases the GIL for a scope where this thread holds it (a process group destroyed from Python): the threads
// joined there may need it, to drop the last reference to a tensor that has a Python object.
class WithoutGil {
 public:
  WithoutGil() : state_(Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr) {}
  ~WithoutGil() {
    if (state_ != nullptr) PyEval_RestoreThread(state_);
  }
  WithoutGil(const WithoutGil&) = delete;
  WithoutGil& operator=(const WithoutGil&) = delete;

 private:
  PyThreadState* state_;
};

}  // namespace

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
  // Works whose operations are done leave the queue here, in order (Note [Lazy completion]).
  while (!queue_.empty() && queue_.front()->streamDone()) {
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
