// A torch Work for an operation issued on a Chorus stream of its own, and the thread that completes them: it waits
// for each stream in issue order, copies results back where torch's tensors were not contiguous, and finishes the
// Work and its Future (DDP waits on getFuture()), with Chorus's error text when the operation failed. The Future's
// callbacks run on threads of their own (CallbackThreads). A Work that is waited for completes on the waiting
// thread, and the completer is in a hurry only for Works whose Future was handed out (Note [Lazy completion]).
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

class Completer;

class ChorusWork final : public c10d::Work {
 public:
  // `outputs`: what result() and the future hold; `keep`: tensors the operation reads or writes until it is done;
  // `after`: run once it succeeded (copies back into non-contiguous outputs).
  ChorusWork(int rank, c10d::OpType type, chorusStream_t stream, std::string call,
             std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep, std::function<void()> after,
             Completer* completer);
  ~ChorusWork() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // recvAnysource's: the rank the message came from, once the Work completed.
  int sourceRank() const override;
  void setSource(std::shared_ptr<int> source) { source_ = std::move(source); }
  // Hands the Future out: from then on its callbacks may exist, and the completer completes this Work promptly.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  // The thread that waits runs the completion itself (no hand-off to the completer's thread), once, and the
  // Future's callbacks too.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  // Completes the Work here when its stream is done.
  bool isCompleted() override;
  bool futureHandedOut();
  bool streamDone();  // the operation finished (or failed), though the Work may not be completed yet
  // Waits for the stream, then finishes; runs once, on whichever of the completer and a waiter comes first.
  // The Future is marked (running its callbacks) on `callbacks`, or right here when it is null.
  void complete(CallbackThreads* callbacks);

 private:
  void completeOnce(CallbackThreads* callbacks);
  std::mutex streamMu_;  // stream_ goes to nullptr once completed
  chorusStream_t stream_;
  std::string call_;
  std::vector<at::Tensor> outputs_, keep_;
  std::function<void()> after_;
  std::shared_ptr<int> source_;  // written by chorusRecvTagged before the stream completes
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::mutex futureMu_;
  bool handedOut_ = false;  // guarded by futureMu_
  Completer* completer_;
  std::once_flag once_;
};

class Completer {
 public:
  Completer();
  ~Completer() { close(); }
  // Queues w, and completes the Works at the queue's front whose operations are done.
  void push(c10::intrusive_ptr<ChorusWork> w);
  void hurry();  // a queued Work's Future was handed out: complete the queue now
  void close();  // completes what is queued (and runs its callbacks), then ends the threads

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<ChorusWork>> queue_;
  bool hurry_ = false;  // complete what is queued now (the thread sleeps otherwise)
  bool stop_ = false;
  CallbackThreads callbacks_;  // outlives thread_
  std::thread thread_;
};

}  // namespace chorus::torchpg
