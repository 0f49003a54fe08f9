// A torch Work for calls issued on a Chorus stream, and the thread that completes them: it waits for each stream in
// issue order, copies results back where torch's tensors were not contiguous, and finishes the Work and its Future
// (DDP waits on getFuture()), with Chorus's error text when the operation failed (DistBackendError on torch 2.x).
// The Future's callbacks run on a thread of their own, in the order of the calls (Note [Callback order]). A Work
// that is waited for completes on the waiting thread, and the completer is in a hurry only for Works whose Future
// was handed out (Note [Lazy completion]). The calls of a coalescing region share one stream (Note [Coalescing] in
// backend.cc): their Works exist from the call, and are issued, with the stream, at the region's end.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "ddp/torch/future_taker.h"

namespace chorus::torchpg {

// The thread that runs Futures' callbacks, one at a time, in the order they were posted (Note [Callback order]).
class CallbackThread {
 public:
  ~CallbackThread() { close(); }
  void post(std::function<void()> fn);  // runs fn after everything posted before it
  void close();                         // runs what is queued, then ends the thread
  // Whether the calling thread is running a callback of some CallbackThread.
  static bool current();

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;  // started by the first post
};

// A Chorus stream that one or more Works complete on, destroyed with the last of them.
class SharedStream {
 public:
  explicit SharedStream(chorusStream_t s) : stream_(s) {}
  ~SharedStream() { chorusStreamDestroy(stream_); }
  SharedStream(const SharedStream&) = delete;
  SharedStream& operator=(const SharedStream&) = delete;
  chorusStream_t get() const { return stream_; }

 private:
  chorusStream_t stream_;
};

class Completer;

// How many calls the issuing threads have made on a backend (those not made from a Future's callback): a Future
// handed out before the count moved on is not marked yet (Note [Callback order]).
using CallCount = std::shared_ptr<std::atomic<uint64_t>>;

class ChorusWork final : public c10d::Work {
 public:
  // `name` and `where`: what errors name ("all_reduce", "group 'tp' rank 1 (global 3)"); `outputs`: what result()
  // and the Future hold; `keep`: tensors the operation reads or writes until it is done; `after`: run once it
  // succeeded (copies back into non-contiguous outputs).
  ChorusWork(int rank, c10d::OpType type, const char* name, std::shared_ptr<const std::string> where,
             std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep, std::function<void()> after,
             Completer* completer, CallCount calls);
  std::vector<at::Tensor> result() override { return outputs_; }
  // recvAnysource's: the rank the message came from, once the Work completed.
  int sourceRank() const override;
  void setSource(std::shared_ptr<int> source) { source_ = std::move(source); }
  // The operation was issued on `stream`; the completer may now take it.
  void issued(std::shared_ptr<SharedStream> stream);
  // Hands the Future out: from then on its callbacks may exist, and the completer completes this Work promptly.
  // A Work issued from a callback completes first (Note [Callback order]).
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  // Issued from a Future's callback: its own Future is completed where it is asked for.
  void setFromCallback() { fromCallback_ = true; }
  // Held in a coalescing region: wait() first issues what the region holds (Note [Coalescing] in backend.cc).
  void setFlush(std::function<void()> flush) {
    std::lock_guard<std::mutex> g(streamMu_);
    flush_ = std::move(flush);
  }
  // The thread that waits runs the completion itself (no hand-off to the completer's thread), once, and the
  // Future's callbacks too. With a timeout, a Work not done by then raises DistBackendError naming the call (the
  // operation goes on: the communicator's own timeout ends it if it never completes).
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  // Completes the Work here when its stream is done.
  bool isCompleted() override;
  bool futureHandedOut();
  bool streamDone();  // the operation finished (or failed), though the Work may not be completed yet
  // Waits for the stream, then finishes; runs once, on whichever of the completer and a waiter comes first.
  // The Future is marked (running its callbacks) on `callbacks`, or right here when it is null.
  void complete(CallbackThread* callbacks);
  std::string call() const;  // "all_reduce on group 'tp' rank 1 (global 3)"

 private:
  void completeOnce(CallbackThread* callbacks);
  std::mutex streamMu_;
  std::shared_ptr<SharedStream> stream_;  // null before it was issued and once completed
  bool issued_ = false;                   // guarded by streamMu_
  const char* name_;
  std::shared_ptr<const std::string> where_;
  std::vector<at::Tensor> outputs_, keep_;
  std::function<void()> after_;
  std::function<void()> flush_;  // set while held in a coalescing region; guarded by streamMu_
  std::shared_ptr<int> source_;  // written by chorusRecvTagged before the stream completes
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::mutex futureMu_;
  bool handedOut_ = false;  // guarded by futureMu_
  bool fromCallback_ = false;
  Completer* completer_;
  CallCount calls_;
  uint64_t callsAtHandOut_ = 0;                          // guarded by futureMu_
  std::chrono::steady_clock::time_point handedOutAt_{};  // guarded by futureMu_
  std::shared_ptr<FutureTaker> taker_;                    // the Python frame that took it; guarded by futureMu_
  std::mutex completeMu_;  // held while completing: a second caller waits for the first
  bool completed_ = false;  // guarded by completeMu_
};

// The Work of a coalescing region's end (Note [Coalescing] in backend.cc): done when every call of the region is, and
// failed with the first failure among them.
class CoalescedWork final : public c10d::Work {
 public:
  CoalescedWork(int rank, std::vector<c10::intrusive_ptr<ChorusWork>> members);
  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  std::vector<c10::intrusive_ptr<ChorusWork>> members_;
};

class Completer {
 public:
  Completer();
  ~Completer() { close(); }
  // Queues an issued w, and completes the Works at the queue's front whose operations are done.
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
  CallbackThread callbacks_;  // outlives thread_
  std::thread thread_;
};

}  // namespace chorus::torchpg
