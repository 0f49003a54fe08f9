// The DDP reducer: gradient buckets, their AllReduces launched strictly in bucket order while backward runs,
// and the averages written back at the end of backward (PyTorch's Reducer semantics; include/chorus/ddp.h is
// the contract).
//
// Note [Bucket launch order]: collectives on a communicator are matched by issue order, so every rank must launch
// bucket i before bucket i+1 whatever order its gradients become ready in (otherwise ranks would add different
// buckets together). A cursor `next_` launches only the consecutive complete buckets starting at it.
//
// Note [One step's collectives]: every rank issues, per step and in this order: at pre-forward the bucket
// rebuild's order broadcast (once, after the first backward) and the buffer broadcasts; at prepare-for-backward
// one small asynchronous control AllReduce {active ranks, synchronising ranks}; in a synchronised backward the
// buckets 0..B-1 and, with findUnusedParameters, the used-parameter counts. A joined rank (chorusDdpJoin)
// replays exactly this sequence with zeros until the control AllReduce counts no active rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "chorus/ddp.h"
#include "ddp/buckets.h"
#include "ddp/tensors.h"
#include "ddp/unused.h"

namespace chorus::ddp {

struct Options {
  size_t capBytes = 25u << 20;
  size_t firstCapBytes = 1u << 20;
  bool findUnused = false;
  bool asView = false;
  bool broadcastBuffers = true;
  int compression = -1;  // -1 or chorusFloat16 / chorusBfloat16
};

class Reducer {
 public:
  // Collective: checks the parameters across ranks and broadcasts them from rank 0. grads may be empty (asView);
  // with asView, grads given are copied into the buckets. `problem` non-empty: this rank's arguments were
  // rejected; it still takes part in the check so that the other ranks fail too instead of waiting, then
  // throws chorusInvalidArgument with `problem`.
  Reducer(chorusComm_t comm, std::vector<Tensor> params, std::vector<void*> grads, const Options& options,
          const std::string& problem);
  ~Reducer();  // waits for outstanding communication
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  void registerBuffers(std::vector<Tensor> buffers, const std::string& problem);  // `problem`: as the constructor
  bool stepped() const { return stepped_; }
  void preForward();
  void prepareForBackward(const int* used);
  void markReady(int param);
  void finalizeBackward();
  void setGradSync(bool enabled);
  void* gradPointer(int param) const;
  void join();
  void setCommHook(chorusDdpCommHook hook, void* state);

  int nparams() const { return static_cast<int>(params_.size()); }
  int rank() const { return rank_; }
  const std::vector<BucketLayout>& buckets() const { return layout_; }
  const chorusDdpStats& stats() const { return stats_; }
  // When bucket b's communication ran in the last synchronised backward, us since prepare-for-backward; -1:
  // never.
  void bucketTiming(int b, double* started, double* finished) const;
  chorusComm_t comm() const { return comm_; }

 private:
  using Clock = std::chrono::steady_clock;
  enum class Phase { Idle, Forward, Backward, Joined };
  struct Bucket {
    std::vector<uint8_t> data;        // the parameters' gradients, contiguous, in layout order
    std::vector<uint8_t> compressed;  // the 16-bit copy sent with compression
    int pending = 0;                  // gradients still to come in this backward
    Clock::time_point launched, started, finished;  // handed to the communicator, running, done
  };
  struct Slot {
    int bucket;
    size_t offset;  // bytes into the bucket
  };

  void build(std::span<const int> order);   // (re)creates buckets and slots, keeping gradient values
  void rebuildIfDue();
  void broadcastBuffers();
  void issueControl(int active, int sync);
  void contribute(int param, bool zero);   // param's gradient (or zeros) into its bucket; launches what it can
  void launchReady();
  void launch(int b);
  void wait();                              // the stream, turning a failure into chorus::Error
  void writeBack();
  std::string notReadyList() const;
  void requirePhase(Phase want, const char* fn) const;
  [[noreturn]] void fail(chorusResult_t code, const char* fn, const std::string& text) const;

  chorusComm_t comm_;
  int rank_ = 0, nranks_ = 1;
  chorusStream_t stream_ = nullptr;
  Options opt_;
  std::vector<Tensor> params_;
  std::vector<void*> userGrads_;  // empty with asView
  std::vector<Tensor> buffers_;
  std::vector<BucketLayout> layout_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slot_;
  int next_ = 0;                  // the next bucket to launch (Note [Bucket launch order])
  std::vector<char> ready_;       // per parameter, this backward
  std::vector<int> readyOrder_;   // recorded during the first backward, for the rebuild
  bool firstBackwardDone_ = false, rebuilt_ = false, stepped_ = false;
  Phase phase_ = Phase::Idle;
  bool gradSync_ = true, syncThisBackward_ = true;
  UsedTracker used_;
  std::map<int, std::vector<uint8_t>> saved_;  // asView: gradients zeroed as unused, restored if no rank used them
  int32_t control_[2] = {0, 0};
  chorusDdpCommHook hook_ = nullptr;
  void* hookState_ = nullptr;
  chorusDdpStats stats_{};
  Clock::time_point backwardStart_;
  uint64_t bytesAtStart_ = 0;
};

}  // namespace chorus::ddp
