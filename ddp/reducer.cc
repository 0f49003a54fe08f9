#include "ddp/reducer.h"

#include <algorithm>
#include <cstring>

#include "lib/base/error.h"
#include "lib/kernels/reduce.h"
#include "lib/base/log.h"

namespace chorus::ddp {

namespace {
double us(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

void stamp(void* when) { *static_cast<std::chrono::steady_clock::time_point*>(when) = std::chrono::steady_clock::now(); }

unsigned long long bytesSent(chorusComm_t comm) {
  unsigned long long b = 0;
  check(comm, chorusCommGetBytesSent(comm, &b), "chorusCommGetBytesSent");
  return b;
}
}  // namespace

Reducer::Reducer(chorusComm_t comm, std::vector<Tensor> params, std::vector<void*> grads, const Options& options,
                 const std::string& problem)
    : comm_(comm), opt_(options), params_(std::move(params)), userGrads_(std::move(grads)) {
  check(comm_, chorusCommUserRank(comm_, &rank_), "chorusCommUserRank");
  check(comm_, chorusCommCount(comm_, &nranks_), "chorusCommCount");
  verifyAcrossRanks(comm_, params_, "parameter", "chorusDdpCreate", problem);
  broadcastFromRoot(comm_, params_);
  check(comm_, chorusStreamCreate(comm_, &stream_), "chorusStreamCreate");
  ready_.assign(params_.size(), 0);
  used_.reset(nparams());
  build(reverseOrder(nparams()));
  if (opt_.asView && !userGrads_.empty()) {  // the caller's starting gradients move into the buckets
    for (int p = 0; p < nparams(); ++p)
      if (userGrads_[static_cast<size_t>(p)] != nullptr)
        std::memcpy(gradPointer(p), userGrads_[static_cast<size_t>(p)], params_[static_cast<size_t>(p)].bytes());
    userGrads_.clear();
  }
}

Reducer::~Reducer() {
  if (stream_ != nullptr) chorusStreamDestroy(stream_);  // waits for what is in flight
}

void Reducer::fail(chorusResult_t code, const char* fn, const std::string& text) const {
  throw Error(code, fmt::format("{} on rank {}: {}", fn, rank_, text));
}

void Reducer::requirePhase(Phase want, const char* fn) const {
  if (phase_ == want) return;
  if (phase_ == Phase::Joined) fail(chorusInvalidUsage, fn, "this rank has joined (chorusDdpJoin); only destroy is left");
  static const char* const kWhat[] = {"between steps", "after chorusDdpPreForward", "in a backward"};
  static const char* const kHow[] = {
      "call chorusDdpFinalizeBackward to end the backward first",
      "call chorusDdpPreForward at the start of forward first",
      "call chorusDdpPrepareForBackward at the end of forward first"};
  fail(chorusInvalidUsage, fn,
       fmt::format("called out of order: it belongs {}, but the step is {}; {}", kWhat[static_cast<int>(want)],
                   kWhat[static_cast<int>(phase_)], kHow[static_cast<int>(want)]));
}

// ---- layout ----

void Reducer::build(std::span<const int> order) {
  std::vector<ParamShape> shapes;
  for (const Tensor& t : params_) shapes.push_back({t.count, t.dtype});
  std::vector<BucketLayout> layout = assignBuckets(shapes, order, opt_.firstCapBytes, opt_.capBytes);
  std::vector<Bucket> buckets(layout.size());
  std::vector<Slot> slots(params_.size());
  for (size_t b = 0; b < layout.size(); ++b) {
    buckets[b].data.assign(layout[b].bytes, 0);
    size_t off = 0;
    for (int p : layout[b].params) {
      slots[static_cast<size_t>(p)] = {static_cast<int>(b), off};
      off += params_[static_cast<size_t>(p)].bytes();
    }
  }
  if (opt_.asView && !buckets_.empty())  // gradients live in the buckets: carry them over
    for (size_t p = 0; p < params_.size(); ++p)
      std::memcpy(buckets[static_cast<size_t>(slots[p].bucket)].data.data() + slots[p].offset,
                  buckets_[static_cast<size_t>(slot_[p].bucket)].data.data() + slot_[p].offset, params_[p].bytes());
  layout_ = std::move(layout);
  buckets_ = std::move(buckets);
  slot_ = std::move(slots);
  CHORUS_INFO(kColl, "ddp rank {}: {} buckets over {} parameters", rank_, layout_.size(), params_.size());
}

void* Reducer::gradPointer(int param) const {
  const size_t p = static_cast<size_t>(param);
  if (!opt_.asView) return userGrads_[p];
  return const_cast<uint8_t*>(buckets_[static_cast<size_t>(slot_[p].bucket)].data.data()) + slot_[p].offset;
}

// Rank 0's recorded order for everyone (Note [One step's collectives]); an incomplete one (rank 0 joined
// before its first backward) keeps the current buckets, on every rank alike.
void Reducer::rebuildIfDue() {
  if (!firstBackwardDone_ || rebuilt_ || opt_.findUnused) return;
  rebuilt_ = true;
  std::vector<int32_t> order(params_.size(), -1);
  if (readyOrder_.size() == params_.size()) std::copy(readyOrder_.begin(), readyOrder_.end(), order.begin());
  check(comm_, chorusBroadcast(order.data(), order.data(), order.size(), chorusInt32, 0, comm_, nullptr),
        "broadcasting the gradient-ready order for the bucket rebuild");
  if (std::find(order.begin(), order.end(), -1) != order.end()) return;
  build(std::vector<int>(order.begin(), order.end()));
}

void Reducer::registerBuffers(std::vector<Tensor> buffers, const std::string& problem) {
  verifyAcrossRanks(comm_, buffers, "buffer", "chorusDdpRegisterBuffers", problem);
  buffers_ = std::move(buffers);
  broadcastFromRoot(comm_, buffers_);
}

void Reducer::broadcastBuffers() {
  if (opt_.broadcastBuffers && !buffers_.empty()) broadcastFromRoot(comm_, buffers_);
}

// ---- one step ----

void Reducer::preForward() {
  requirePhase(Phase::Idle, "chorusDdpPreForward");
  stepped_ = true;
  rebuildIfDue();
  broadcastBuffers();
  phase_ = Phase::Forward;
}

void Reducer::issueControl(int active, int sync) {
  control_[0] = active;
  control_[1] = sync;
  check(comm_, chorusAllReduce(control_, control_, 2, chorusInt32, chorusSum, comm_, stream_),
        "the step's control AllReduce");
}

void Reducer::prepareForBackward(const int* used) {
  requirePhase(Phase::Forward, "chorusDdpPrepareForBackward");
  syncThisBackward_ = gradSync_;
  issueControl(1, syncThisBackward_ ? 1 : 0);
  std::fill(ready_.begin(), ready_.end(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) buckets_[b].pending = static_cast<int>(layout_[b].params.size());
  next_ = 0;
  stats_ = {};
  backwardStart_ = Clock::now();
  bytesAtStart_ = bytesSent(comm_);
  phase_ = Phase::Backward;
  if (!opt_.findUnused || used == nullptr) return;
  for (int p = 0; p < nparams(); ++p) {
    if (used[p] != 0) continue;
    ready_[static_cast<size_t>(p)] = 2;  // declared unused: its gradient contributes zeros (or what it accumulated)
    if (syncThisBackward_) contribute(p, !used_.locallyUsed(p));
  }
  if (syncThisBackward_) launchReady();
}

void Reducer::markReady(int param) {
  requirePhase(Phase::Backward, "chorusDdpMarkGradReady");
  char& r = ready_[static_cast<size_t>(param)];
  if (r != 0)
    fail(chorusInvalidUsage, "chorusDdpMarkGradReady",
         fmt::format("parameter {} was marked ready {} in this backward. Expected to mark a parameter ready only "
                     "once per backward: report it after its gradient is complete (a parameter used several "
                     "times in forward or shared between layers still gets one call){}",
                     param, r == 2 ? "although chorusDdpPrepareForBackward's used[] said the forward did not use it"
                                   : "twice",
                     r == 2 ? "; fix used[] so that it lists every parameter the forward used" : ""));
  r = 1;
  used_.markUsed(param);
  if (!firstBackwardDone_) readyOrder_.push_back(param);
  if (!syncThisBackward_) return;
  contribute(param, false);
  launchReady();
}

void Reducer::contribute(int param, bool zero) {
  const Slot& s = slot_[static_cast<size_t>(param)];
  Bucket& b = buckets_[static_cast<size_t>(s.bucket)];
  uint8_t* dst = b.data.data() + s.offset;
  const size_t bytes = params_[static_cast<size_t>(param)].bytes();
  if (zero) {
    if (opt_.asView) saved_[param].assign(dst, dst + bytes);  // restored if no rank used it
    std::memset(dst, 0, bytes);
  } else if (!opt_.asView) {
    std::memcpy(dst, userGrads_[static_cast<size_t>(param)], bytes);
  }
  --b.pending;
}

void Reducer::launchReady() {
  while (next_ < static_cast<int>(buckets_.size()) && buckets_[static_cast<size_t>(next_)].pending == 0)
    launch(next_++);
}

void Reducer::launch(int bi) {
  Bucket& b = buckets_[static_cast<size_t>(bi)];
  const BucketLayout& l = layout_[static_cast<size_t>(bi)];
  const size_t count = l.bytes / kernels::dataTypeSize(l.dtype);
  b.launched = Clock::now();
  if (hook_ != nullptr) {
    chorusResult_t rc = hook_(hookState_, comm_, bi, b.data.data(), count, l.dtype, stream_);
    if (rc != chorusSuccess)
      throw Error(rc, fmt::format("the communication hook failed for bucket {} on rank {}: {}", bi, rank_,
                                  chorusGetLastError(comm_)));
  } else if (opt_.compression >= 0 && opt_.compression != static_cast<int>(l.dtype)) {
    const auto small = static_cast<chorusDataType_t>(opt_.compression);
    b.compressed.resize(count * kernels::dataTypeSize(small));
    // Divided before the cast, as PyTorch's fp16 hook does, so that the sum cannot overflow float16's range.
    kernels::convert(b.compressed.data(), small, b.data.data(), l.dtype, count, nranks_);
    check(comm_, chorusAllReduce(b.compressed.data(), b.compressed.data(), count, small, chorusSum, comm_, stream_),
          "a bucket's AllReduce");
  } else {
    check(comm_, chorusAllReduce(b.data.data(), b.data.data(), count, l.dtype, chorusAvg, comm_, stream_),
          "a bucket's AllReduce");
  }
  // Runs on the communicator's worker right after the bucket's collectives: when the bucket was done.
  check(comm_, chorusLaunchHostFunc(stream_, stamp, &b.finished), "chorusLaunchHostFunc");
}

void Reducer::bucketTiming(int bi, double* started, double* finished) const {
  const Bucket& b = buckets_[static_cast<size_t>(bi)];
  const bool ran = b.launched >= backwardStart_ && b.finished >= b.started;
  if (started != nullptr) *started = ran ? us(b.started - backwardStart_) : -1;
  if (finished != nullptr) *finished = ran ? us(b.finished - backwardStart_) : -1;
}

void Reducer::wait() { check(comm_, chorusStreamSynchronize(stream_), "waiting for the gradient AllReduces"); }

std::string Reducer::notReadyList() const {
  std::string params, buckets;
  for (int p = 0; p < nparams(); ++p)
    if (ready_[static_cast<size_t>(p)] == 0) params += (params.empty() ? "" : " ") + std::to_string(p);
  for (size_t b = static_cast<size_t>(next_); b < buckets_.size(); ++b)
    buckets += (buckets.empty() ? "" : " ") + std::to_string(b);
  return fmt::format("parameter indices that did not receive a gradient on rank {}: {} (buckets never reduced: {})",
                     rank_, params, buckets);
}

void Reducer::finalizeBackward() {
  requirePhase(Phase::Backward, "chorusDdpFinalizeBackward");
  const auto entered = Clock::now();
  stats_.backwardUs = us(entered - backwardStart_);
  stats_.bucketsLaunched = next_;
  phase_ = Phase::Idle;
  firstBackwardDone_ = true;
  if (!syncThisBackward_) {
    wait();  // the control AllReduce
    if (control_[1] != 0)
      fail(chorusInvalidUsage, "chorusDdpFinalizeBackward",
           fmt::format("ranks disagree on gradient sync: this rank ran a no_sync backward while {} of {} active "
                       "ranks synchronised; call chorusDdpSetGradSync alike on every rank", control_[1], control_[0]));
    return;
  }
  const bool complete = next_ == static_cast<int>(buckets_.size());
  if (!complete && !opt_.findUnused) {
    std::string list = notReadyList();
    wait();  // what was launched; the missing buckets are never issued
    fail(chorusInvalidUsage, "chorusDdpFinalizeBackward",
         "expected to have finished reduction in this backward, but some parameters were not used in producing "
         "the loss. Pass findUnusedParameters=1 to chorusDdpCreate (and, if the framework knows, used[] to "
         "chorusDdpPrepareForBackward), or make sure every parameter takes part in the loss. " + list);
  }
  if (opt_.findUnused) {
    for (int p = 0; p < nparams(); ++p)
      if (ready_[static_cast<size_t>(p)] == 0) {
        ready_[static_cast<size_t>(p)] = 2;
        contribute(p, !used_.locallyUsed(p));
      }
    launchReady();
    int32_t* counts = used_.globalCounts();
    check(comm_, chorusAllReduce(counts, counts, used_.size(), chorusInt32, chorusSum, comm_, stream_),
          "the used-parameter AllReduce");
  }
  wait();
  if (control_[1] != control_[0])
    fail(chorusInvalidUsage, "chorusDdpFinalizeBackward",
         fmt::format("ranks disagree on gradient sync: {} of {} active ranks synchronised this backward; call "
                     "chorusDdpSetGradSync alike on every rank", control_[1], control_[0]));
  writeBack();
  const auto done = Clock::now();
  stats_.exposedUs = us(done - entered);
  // A bucket's communication runs once it is launched and the bucket before it has finished (issue order).
  Clock::time_point busyUntil{};
  for (Bucket& b : buckets_) {
    b.started = std::max(b.launched, busyUntil);
    if (b.finished > b.started) stats_.commUs += us(b.finished - b.started);
    busyUntil = std::max(busyUntil, b.finished);
  }
  stats_.bytesSent = bytesSent(comm_) - bytesAtStart_;
}

void Reducer::writeBack() {
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    Bucket& b = buckets_[bi];
    const BucketLayout& l = layout_[bi];
    if (hook_ == nullptr && opt_.compression >= 0 && opt_.compression != static_cast<int>(l.dtype))
      kernels::convert(b.data.data(), l.dtype, b.compressed.data(), static_cast<chorusDataType_t>(opt_.compression),
                       l.bytes / kernels::dataTypeSize(l.dtype));
  }
  for (int p = 0; p < nparams(); ++p) {
    const Slot& s = slot_[static_cast<size_t>(p)];
    uint8_t* src = buckets_[static_cast<size_t>(s.bucket)].data.data() + s.offset;
    const size_t bytes = params_[static_cast<size_t>(p)].bytes();
    const bool untouched = opt_.findUnused && !used_.globallyUsed(p);
    if (opt_.asView) {
      auto it = saved_.find(p);
      if (untouched && it != saved_.end()) std::memcpy(src, it->second.data(), bytes);
    } else if (!untouched) {
      std::memcpy(userGrads_[static_cast<size_t>(p)], src, bytes);
    }
  }
  saved_.clear();
  used_.endWindow();
}

void Reducer::setGradSync(bool enabled) {
  if (phase_ == Phase::Joined) requirePhase(Phase::Idle, "chorusDdpSetGradSync");
  gradSync_ = enabled;
}

void Reducer::setCommHook(chorusDdpCommHook hook, void* state) {
  requirePhase(Phase::Idle, "chorusDdpRegisterCommHook");
  hook_ = hook;
  hookState_ = state;
}

// ---- Join: replay the other ranks' steps with zeros (Note [One step's collectives]) ----

void Reducer::join() {
  requirePhase(Phase::Idle, "chorusDdpJoin");
  stepped_ = true;
  for (;;) {
    rebuildIfDue();
    broadcastBuffers();
    issueControl(0, 0);
    wait();
    if (control_[0] == 0) break;  // every rank has joined
    firstBackwardDone_ = true;
    if (control_[1] == 0) continue;  // the others ran a no_sync step: nothing to answer
    next_ = 0;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      std::fill(buckets_[b].data.begin(), buckets_[b].data.end(), 0);
      launch(static_cast<int>(b));
    }
    if (opt_.findUnused) {
      int32_t* zeros = used_.zeroCounts();
      check(comm_, chorusAllReduce(zeros, zeros, used_.size(), chorusInt32, chorusSum, comm_, stream_),
            "the used-parameter AllReduce");
    }
    wait();
  }
  phase_ = Phase::Joined;
}

}  // namespace chorus::ddp
