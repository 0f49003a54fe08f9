// The backend's frame: creating the communicator, naming the group, issuing a call, coalescing. The operations
// themselves are in operations.cc.
#include "ddp/torch/backend.h"

#include <cstring>
#include <utility>

#include "ddp/torch/convert.h"

namespace chorus::torchpg {

namespace {

const char* const kStoreKey = "chorus_unique_id";
const char* const kCallbackStoreKey = "chorus_callback_unique_id";

bool pointToPoint(c10d::OpType t) {
  return t == c10d::OpType::SEND || t == c10d::OpType::RECV || t == c10d::OpType::RECVANYSOURCE;
}

}  // namespace

ChorusBackend::ChorusBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                             std::chrono::milliseconds timeout, Identity identity)
    : BackendBase(rank, size), identity_(std::move(identity)), store_(store), timeout_(timeout) {
  comm_ = makeComm(kStoreKey);
}

// Note [Teardown]:
// c10::intrusive_ptr runs an object's destructor only once its weak references are gone too; when the last strong
// one goes first, it calls release_resources(). A backend always has weak references: closeAll's list holds one
// (Note [Threads at exit]), and torch may hold others. So the communicators go in release_resources(): in the
// destructor alone they outlived destroy_process_group until the next backend was made or the process exited, kept
// their threads and shared memory, and a peer that had exited meanwhile without a goodbye (a forked test rank ends
// with os._exit) was declared silent 30 s later. Either path that runs first does it; the other finds it done.
ChorusBackend::~ChorusBackend() { close(); }

void ChorusBackend::release_resources() { close(); }  // torch's Backend (and 1.13's ProcessGroup) have none

void ChorusBackend::close() {
  completer_.close();  // their streams belong to the communicators
  p2pCompleter_.close();
  callbackCompleter_.close();
  {
    std::lock_guard<std::mutex> g(callbackCommMu_);  // guards callbackComm_ alone
    if (callbackComm_ != nullptr) chorusCommDestroy(std::exchange(callbackComm_, nullptr));
  }
  if (comm_ != nullptr) chorusCommDestroy(std::exchange(comm_, nullptr));
}

// Note [Threads at exit]:
// A backend's threads complete Works and run their Futures' callbacks, which take the GIL (a callback in Python, or
// dropping the last reference to a tensor Python made). A backend torch still holds when the script ends (a DDP
// module keeps its group) lives on into interpreter finalization, where a thread that takes the GIL is ended by
// Python with pthread_exit, and the forced unwind through a C++ frame aborts the process ("terminate called without
// an active exception": 3 of 6 runs of DDP with PowerSGD, 2 processes, torch 2.6). So chorus_torch registers with
// Python's atexit, which runs before finalization, a call that closes every live backend's threads; what is issued
// after that completes on the calling thread.
namespace {
std::mutex gLiveMu;
// Never destroyed: torch destroys backends from libtorch's exit-time destructors, after this library's statics
// would have gone (Note [Immortal statics] in lib/base/immortal.h, for the same reason in libchorus).
auto& gLive = *new std::vector<c10::weak_intrusive_ptr<ChorusBackend>>;
}  // namespace

void ChorusBackend::live(const c10::intrusive_ptr<ChorusBackend>& backend) {
  std::lock_guard<std::mutex> g(gLiveMu);
  std::erase_if(gLive, [](const c10::weak_intrusive_ptr<ChorusBackend>& w) { return w.expired(); });
  gLive.emplace_back(backend);
}

void ChorusBackend::closeAll() {
  std::vector<c10::intrusive_ptr<ChorusBackend>> backends;
  {
    std::lock_guard<std::mutex> g(gLiveMu);
    for (const auto& w : gLive)
      if (auto b = w.lock()) backends.push_back(std::move(b));
    gLive.clear();
  }
  for (auto& b : backends) {
    b->completer_.close();
    b->p2pCompleter_.close();
    b->callbackCompleter_.close();
  }
}

chorusComm_t ChorusBackend::makeComm(const char* key) {
  // Rank 0 starts the bootstrap root and publishes its id; the others wait for it in the store (its timeout).
  chorusUniqueId id;
  if (getRank() == 0) {
    const chorusResult_t rc = chorusGetUniqueId(&id);
    if (rc != chorusSuccess) refused(rc, "chorusGetUniqueId", chorusGetLastError(nullptr));
    store_->set(key, std::vector<uint8_t>(id.internal, id.internal + sizeof id.internal));
  } else {
    store_->setTimeout(timeout_);
    const std::vector<uint8_t> got = store_->get(key);
    TORCH_CHECK(got.size() == sizeof id.internal, "chorus: the store's ", key, " has ", got.size(),
                " bytes, expected ", sizeof id.internal, " (another Chorus version?)");
    std::memcpy(id.internal, got.data(), got.size());
  }
  chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
  config.timeoutSec = config.initTimeoutSec = std::chrono::duration<double>(timeout_).count();
  chorusComm_t comm = nullptr;
  const chorusResult_t rc = chorusCommInitRankConfig(&comm, getSize(), id, getRank(), &config);
  if (rc != chorusSuccess) refused(rc, "creating the communicator", chorusGetLastError(nullptr));
  return comm;
}

chorusComm_t ChorusBackend::callbackComm() {
  std::lock_guard<std::mutex> g(callbackCommMu_);
  if (callbackComm_ == nullptr) callbackComm_ = makeComm(kCallbackStoreKey);
  return callbackComm_;
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

std::shared_ptr<SharedStream> ChorusBackend::newStream(chorusComm_t comm, const char* call) {
  chorusStream_t stream = nullptr;
  const chorusResult_t rc = chorusStreamCreate(comm, &stream);
  if (rc != chorusSuccess) refused(rc, call, chorusGetLastError(comm));
  return std::make_shared<SharedStream>(stream);
}

namespace {

// Issues `issue` on comm and stream (in a group when asked); the first failure with its text.
template <class Issue>
chorusResult_t issueOn(chorusComm_t comm, chorusStream_t stream, const Issue& issue, bool group, std::string* text) {
  if (group) chorusGroupStart();
  chorusResult_t rc = issue(comm, stream);
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
  // A collective called from a Future's callback goes to the callbacks' communicator (Note [Callback order]).
  const bool fromCallback = !p2p && CallbackThread::current();
  const chorusComm_t comm = fromCallback ? callbackComm() : comm_;
  Completer& completer = p2p ? p2pCompleter_ : fromCallback ? callbackCompleter_ : completer_;
  std::lock_guard<std::mutex> g(mu_);
  if (!fromCallback) issuingCalls_->fetch_add(1);
  auto work = c10::make_intrusive<ChorusWork>(getRank(), call.type, call.name, where(), std::move(call.outputs),
                                              std::move(call.keep), std::move(call.after), &completer,
                                              issuingCalls_);
  if (fromCallback) work->setFromCallback();
  if (!p2p) ++seq_;
  if (coalescing_ && !p2p && !fromCallback) {
    deferred_.push_back({.work = work, .issue = std::move(call.issue), .group = call.group});
    region_.push_back(work);
    work->setFlush([this] {
      std::lock_guard<std::mutex> g(mu_);
      issueDeferred();
    });
    return work;
  }
  std::shared_ptr<SharedStream> stream = newStream(comm, call.name);
  std::string text;
  const chorusResult_t rc = issueOn(comm, stream->get(), call.issue, call.group, &text);
  if (rc != chorusSuccess) refused(rc, call.name, text);
  work->issued(std::move(stream));
  completer.push(work);
  if (coalescing_ && !fromCallback) region_.push_back(work);
  return work;
}

// Note [Coalescing]:
// Between startCoalescing and endCoalescing (torch's _coalescing_manager) the collectives called are validated at
// the call, as any, and then held; the region's end issues them, in call order, as one Chorus group on one stream
// (what NCCL's coalescing does), and each call's Work completes with that stream. Point-to-point calls are issued at
// once, as outside a region: they are Chorus's tagged messages, which never deadlock whatever the order and so need
// no group (Chorus refuses them in one). The region's Work is done when all of its calls are. Waiting for a held
// call's Work inside the region (a blocking call made there) issues what the region holds so far, as one group, and
// the region goes on.
void ChorusBackend::startCoalescing() {
  std::lock_guard<std::mutex> g(mu_);
  TORCH_CHECK(!coalescing_, "chorus: startCoalescing on ", *where(), " while a coalescing region is open");
  coalescing_ = true;
}

void ChorusBackend::issueDeferred() {
  if (deferred_.empty()) return;
  std::vector<Deferred> held;
  held.swap(deferred_);
  std::shared_ptr<SharedStream> stream = newStream(comm_, "the coalesced calls");
  std::string text;
  chorusResult_t rc = chorusGroupStart();
  for (size_t i = 0; i < held.size() && rc == chorusSuccess; ++i)
    rc = issueOn(comm_, stream->get(), held[i].issue, held[i].group, &text);
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
    issueDeferred();
  }
#if CHORUS_TORCH_BACKEND
  return c10::make_intrusive<CoalescedWork>(getRank(), std::move(works));
#endif
}

}  // namespace chorus::torchpg
