#include "ddp/torch/work.h"

#include <Python.h>
#include <ATen/core/ivalue.h>

#include <exception>
#include <stdexcept>

namespace chorus::torchpg {

ChorusWork::ChorusWork(int rank, c10d::OpType type, chorusStream_t stream, std::string call,
                       std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep, std::function<void()> after,
                       Completer* completer)
    : Work(rank, type),
      stream_(stream),
      call_(std::move(call)),
      outputs_(std::move(outputs)),
      keep_(std::move(keep)),
      after_(std::move(after)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))),
      completer_(completer) {}

ChorusWork::~ChorusWork() {
  if (stream_ != nullptr) chorusStreamDestroy(stream_);
}

int ChorusWork::sourceRank() const {
  TORCH_CHECK(source_ != nullptr, "chorus: sourceRank() is known only for a recv from any source (", call_, ")");
  TORCH_CHECK(*source_ >= 0, "chorus: sourceRank() of ", call_, " before it completed (wait() first)");
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

bool ChorusWork::wait(std::chrono::milliseconds timeout) {
  complete(nullptr);
  return Work::wait(timeout);
}

bool ChorusWork::streamDone() {
  std::lock_guard<std::mutex> g(streamMu_);
  return stream_ == nullptr || chorusStreamQuery(stream_) != chorusInProgress;
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
  const chorusResult_t rc = chorusStreamSynchronize(stream_);
  std::exception_ptr error;
  if (rc != chorusSuccess) {
    error = std::make_exception_ptr(std::runtime_error("chorus: " + call_ + " failed: " + chorusGetErrorString(rc) +
                                                       ": " + chorusGetLastError(nullptr)));
  } else {
    try {
      if (after_) after_();
    } catch (...) {
      error = std::current_exception();
    }
  }
  {
    std::lock_guard<std::mutex> g(streamMu_);
    chorusStreamDestroy(stream_);
    stream_ = nullptr;
  }
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
