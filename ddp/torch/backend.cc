// The backend's frame: creating the communicator, naming the group, issuing a call, coalescing. The operations
// themselves are in operations.cc.
#include "ddp/torch/backend.h"

#include <cstring>

#include "ddp/torch/convert.h"

namespace chorus::torchpg {

namespace {

const char* const kStoreKey = "chorus_unique_id";

bool pointToPoint(c10d::OpType t) {
  return t == c10d::OpType::SEND || t == c10d::OpType::RECV || t == c10d::OpType::RECVANYSOURCE;
}

}  // namespace

ChorusBackend::ChorusBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                             std::chrono::milliseconds timeout, Identity identity)
    : BackendBase(rank, size), identity_(std::move(identity)) {
  // Rank 0 starts the bootstrap root and publishes its id; the others wait for it in the store (its timeout).
  chorusUniqueId id;
  if (rank == 0) {
    const chorusResult_t rc = chorusGetUniqueId(&id);
    if (rc != chorusSuccess) refused(rc, "chorusGetUniqueId", chorusGetLastError(nullptr));
    store->set(kStoreKey, std::vector<uint8_t>(id.internal, id.internal + sizeof id.internal));
  } else {
    store->setTimeout(timeout);
    const std::vector<uint8_t> got = store->get(kStoreKey);
    TORCH_CHECK(got.size() == sizeof id.internal, "chorus: the store's ", kStoreKey, " has ", got.size(),
                " bytes, expected ", sizeof id.internal, " (another Chorus version?)");
    std::memcpy(id.internal, got.data(), got.size());
  }
  chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
  config.timeoutSec = config.initTimeoutSec = std::chrono::duration<double>(timeout).count();
  const chorusResult_t rc = chorusCommInitRankConfig(&comm_, size, id, rank, &config);
  if (rc != chorusSuccess) refused(rc, "creating the communicator", chorusGetLastError(nullptr));
}

ChorusBackend::~ChorusBackend() {
  completer_.close();  // their streams belong to the communicator
  p2pCompleter_.close();
  if (comm_ != nullptr) chorusCommDestroy(comm_);
}

std::shared_ptr<const std::string> ChorusBackend::where() {
#if CHORUS_TORCH_BACKEND
  const std::string& desc = getGroupDesc();  // torch 2.x sets it after making the backend
#else
  const std::string desc;
#endif
  if (where_ != nullptr && desc == whereDesc_) return where_;
  const int me = getRank();
  const std::string name = !desc.empty() && desc != "undefined" ? desc : identity_.name;
  const int64_t global = me < static_cast<int>(identity_.globalRanks.size()) ? identity_.globalRanks[me] : me;
  whereDesc_ = desc;
  where_ = std::make_shared<const std::string>(c10::str("group '", name, "' rank ", me, " (global ", global, ")"));
  return where_;
}

void ChorusBackend::refused(chorusResult_t rc, const char* call, const std::string& text) {
  const std::string what = c10::str("chorus: ", call, " on ", *where(), " failed: ", chorusGetErrorString(rc), ": ",
                                    text);
  if (rc == chorusInvalidArgument) TORCH_CHECK(false, what);
  throwBackendError(what);
}

void ChorusBackend::checkRank(int64_t r, const char* what) const {
  TORCH_CHECK(r >= 0 && r < getSize(), "chorus: ", what, " ", r, " is not a rank of this group (size ", getSize(),
              ")");
}

std::shared_ptr<SharedStream> ChorusBackend::newStream(const char* call) {
  chorusStream_t stream = nullptr;
  const chorusResult_t rc = chorusStreamCreate(comm_, &stream);
  if (rc != chorusSuccess) refused(rc, call, chorusGetLastError(comm_));
  return std::make_shared<SharedStream>(stream);
}

namespace {

// Issues `issue` on stream (in a group when asked); the first failure with its text.
chorusResult_t issueOn(chorusStream_t stream, const std::function<chorusResult_t(chorusStream_t)>& issue, bool group,
                       std::string* text) {
  if (group) chorusGroupStart();
  chorusResult_t rc = issue(stream);
  if (rc != chorusSuccess) *text = chorusGetLastError(nullptr);
  if (group) {
    const chorusResult_t end = chorusGroupEnd();
    if (rc == chorusSuccess && end != chorusSuccess) {
      rc = end;
      *text = chorusGetLastError(nullptr);
    }
  }
  return rc;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ChorusBackend::run(Call call) {
  const bool p2p = pointToPoint(call.type);
  std::lock_guard<std::mutex> g(mu_);
  auto work = c10::make_intrusive<ChorusWork>(getRank(), call.type, call.name, where(), std::move(call.outputs),
                                              std::move(call.keep), std::move(call.after),
                                              p2p ? &p2pCompleter_ : &completer_);
  if (!p2p) ++seq_;
  if (coalescing_ && !p2p) {
    deferred_.push_back({.work = work, .issue = std::move(call.issue), .group = call.group});
    region_.push_back(work);
    return work;
  }
  std::shared_ptr<SharedStream> stream = newStream(call.name);
  std::string text;
  const chorusResult_t rc = issueOn(stream->get(), call.issue, call.group, &text);
  if (rc != chorusSuccess) refused(rc, call.name, text);
  work->issued(std::move(stream));
  (p2p ? p2pCompleter_ : completer_).push(work);
  if (coalescing_) region_.push_back(work);
  return work;
}

// Note [Coalescing]
// Between startCoalescing and endCoalescing (torch's _coalescing_manager) the collectives called are validated at
// the call, as any, and then held; the region's end issues them, in call order, as one Chorus group on one stream
// (what NCCL's coalescing does), and each call's Work completes with that stream. Point-to-point calls are issued at
// once, as outside a region: they are Chorus's tagged messages, which never deadlock whatever the order and so need
// no group (Chorus refuses them in one). The region's Work is done when all of its calls are. A Work of a held call
// cannot be waited for before the region ends (it would wait forever): that raises, naming the call.
void ChorusBackend::startCoalescing() {
  std::lock_guard<std::mutex> g(mu_);
  TORCH_CHECK(!coalescing_, "chorus: startCoalescing on ", *where(), " while a coalescing region is open");
  coalescing_ = true;
}

#if CHORUS_TORCH_BACKEND
c10::intrusive_ptr<c10d::Work> ChorusBackend::endCoalescing() {
#else
void ChorusBackend::endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& /*reqs: the region's, ours*/) {
#endif
  std::vector<c10::intrusive_ptr<ChorusWork>> works;
  {
    std::lock_guard<std::mutex> g(mu_);
    TORCH_CHECK(coalescing_, "chorus: endCoalescing on ", *where(), " without startCoalescing");
    coalescing_ = false;
    works.swap(region_);
    std::vector<Deferred> held;
    held.swap(deferred_);
    if (!held.empty()) {
      std::shared_ptr<SharedStream> stream = newStream("the coalesced calls");
      std::string text;
      chorusGroupStart();
      chorusResult_t rc = chorusSuccess;
      size_t failed = 0;
      for (; failed < held.size() && rc == chorusSuccess; ++failed)
        rc = issueOn(stream->get(), held[failed].issue, held[failed].group, &text);
      const chorusResult_t end = chorusGroupEnd();
      if (rc == chorusSuccess && end != chorusSuccess) {
        rc = end;
        text = chorusGetLastError(nullptr);
      }
      if (rc != chorusSuccess) refused(rc, "the coalesced calls", text);
      for (Deferred& d : held) {
        d.work->issued(stream);
        completer_.push(d.work);
      }
    }
  }
#if CHORUS_TORCH_BACKEND
  return c10::make_intrusive<CoalescedWork>(getRank(), std::move(works));
#endif
}

}  // namespace chorus::torchpg
