// A torch Work for an operation issued on a Chorus stream of its own, and the thread that completes them: it waits
// for each stream in issue order, copies results back where torch's tensors were not contiguous, and finishes the
// Work and its Future (DDP waits on getFuture()), with Chorus's error text when the operation failed. The Future's
// callbacks run on threads of their own (CallbackThreads).
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::torchpg {

// Threads that run Futures' callbacks, one more whenever all are busy: a callback may block on another Work's
// Future (PowerSGD's hook waits inside its then()), and the completion it waits for must not queue behind it.
class CallbackThreads {
 public:
  ~CallbackThreads() { close(); }
  void post(std::function<void()> fn);
  void close();  // runs what is queued, then ends the threads

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  size_t idle_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

class ChorusWork final : public c10d::Work {
 public:
  // `outputs`: what result() and the future hold; `keep`: tensors the operation reads or writes until it is done;
  // `after`: run once it succeeded (copies back into non-contiguous outputs).
  ChorusWork(int rank, c10d::OpType type, chorusStream_t stream, std::string call,
             std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep, std::function<void()> after);
  ~ChorusWork() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // recvAnysource's: the rank the message came from, once the Work completed.
  int sourceRank() const override;
  void setSource(std::shared_ptr<int> source) { source_ = std::move(source); }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  // The thread that waits runs the completion itself (no hand-off to the completer's thread), once, and the
  // Future's callbacks too.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  // Waits for the stream, then finishes; runs once, on whichever of the completer and a waiter comes first.
  // The Future is marked (running its callbacks) on `callbacks`, or right here when it is null.
  void complete(CallbackThreads* callbacks);

 private:
  void completeOnce(CallbackThreads* callbacks);
  chorusStream_t stream_;
  std::string call_;
  std::vector<at::Tensor> outputs_, keep_;
  std::function<void()> after_;
  std::shared_ptr<int> source_;  // written by chorusRecvTagged before the stream completes
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::once_flag once_;
};

class Completer {
 public:
  Completer();
  ~Completer() { close(); }
  void push(c10::intrusive_ptr<ChorusWork> w);
  void close();  // completes what is queued (and runs its callbacks), then ends the threads

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<ChorusWork>> queue_;
  bool stop_ = false;
  CallbackThreads callbacks_;  // outlives thread_
  std::thread thread_;
};

}  // namespace chorus::torchpg
