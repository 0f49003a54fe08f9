#include "lib/comm/stream.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "lib/base/error.h"
#include "lib/comm/comm.h"
#include "lib/comm/devices.h"

bool chorusStream::idle() {
  std::lock_guard<std::mutex> g(mu);
  return pending == 0;
}

void chorusStream::add() {
  std::lock_guard<std::mutex> g(mu);
  ++pending;
}

void chorusStream::finish(chorusResult_t rc, const std::string& msg) {
  std::lock_guard<std::mutex> g(mu);
  if (rc != chorusSuccess && error == chorusSuccess) {
    error = rc;
    message = msg;
  }
  if (--pending == 0) cv.notify_all();
}

chorusResult_t chorusStream::waitAll(std::string* msg) {
  std::unique_lock<std::mutex> g(mu);
  cv.wait(g, [&] { return pending == 0; });
  *msg = message;
  return error;
}

chorusResult_t chorusStream::query(std::string* msg) {
  std::lock_guard<std::mutex> g(mu);
  *msg = message;
  if (error != chorusSuccess) return error;
  return pending == 0 ? chorusSuccess : chorusInProgress;
}

namespace chorus {

// Note [Device streams]:
// chorusStreamCreateFromCuda wraps an application's CUDA stream, and a call on it keeps NCCL's contract: it starts
// after the work queued on that stream before the call, work queued after waits for it, and the calling thread
// does not block. At the call, the issuing thread queues a fence on the device stream (mem::DeviceStream): a point
// the host can see reached (a CUDA event), then a wait that holds the stream until the host releases it (a
// stream memory operation waiting on a host-mapped flag, transports/cuda_ipc/cuda_stream.cc). The operation runs
// on the communicator's worker, in issue order as every asynchronous operation: it first waits for its fences to
// be reached (spinning CHORUS_SPIN_US, then sleeping up to 50 us between looks, so that the call starts within about
// that of the kernel before it; the application's own work may take long, so no timeout, but an abort or a failed
// communicator ends the wait), runs, and releases them whatever its outcome, so a failure never leaves the device
// stream stuck: the error goes to the chorusStream (chorusStreamSynchronize, chorusStreamQuery) and the
// communicator (chorusCommGetAsyncError), like NCCL's.
namespace {

struct Fence {
  mem::DeviceStream* stream;
  uint64_t id;
};

// An operation's fences, released once it is done with them, and also when it is dropped without running (its
// communicator failed first), so the device streams never stay held.
class Fences {
 public:
  std::vector<Fence> list;
  ~Fences() { releaseAll(); }
  // The first error of a release, if any.
  std::optional<Error> releaseAll() noexcept {
    std::optional<Error> first;
    for (; released_ < list.size(); ++released_) {
      try {
        list[released_].stream->release(list[released_].id);
      } catch (const Error& e) {
        if (!first) first = e;
      }
    }
    return first;
  }

 private:
  size_t released_ = 0;
};

void waitReached(Comm& comm, const std::vector<Fence>& fences) {
  using namespace std::chrono;
  const auto start = steady_clock::now();
  auto nap = microseconds(20);
  for (size_t i = 0; i < fences.size();) {
    if (fences[i].stream->reached(fences[i].id)) {
      ++i;
      continue;
    }
    comm.throwIfFailed();  // an abort, or a peer that failed meanwhile
    if (steady_clock::now() - start < microseconds(comm.config().spinUs)) continue;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, microseconds(50));
  }
}

}  // namespace

std::unique_ptr<mem::DeviceStream> openDeviceStream(Comm& comm, void* native) {
  mem::Runtime* runtime = findDeviceRuntime(true);
  if (runtime == nullptr) {
    chorusResult_t code = chorusInvalidUsage;
    const std::string why = whyNoRuntime(&code);
    fail(code, "cudaStream {} cannot be used: {}", native, why);
  }
  std::unique_ptr<mem::DeviceStream> device = runtime->openStream(native);
  if (mem::Space(device->device()) != comm.space())
    fail(chorusInvalidArgument, "cudaStream {} belongs to {}, but this communicator works on {}", native,
         device->device()->name(),
         comm.space().isHost() ? "host memory only (no device was current at its creation)" : comm.space().name());
  return device;
}

// Note [The default stream]:
// NCCL's stream 0 is CUDA's legacy default stream: a call on it starts after the kernels queued there before it (and,
// by the legacy stream's rule, after those of every blocking stream). Chorus's call with no stream is blocking and
// runs on streams of its own that do not wait for the default one, so a program ported from NCCL, which launched the
// kernel writing the input on stream 0 and then called, had its input read before the kernel wrote it. So a blocking
// call on device memory first waits for the default stream of the communicator's device, opened once. The host
// waits (not just Chorus's streams): peers read the buffer through IPC, which no stream of this process orders.
void followDefaultStream(Comm& comm) {
  if (mem::DeviceStream* s = comm.defaultStream()) s->synchronize();
}

Executor::Fn orderWithDevices(Comm& comm, Executor::Fn fn, std::span<chorusStream* const> streams) {
  if (std::none_of(streams.begin(), streams.end(), [](chorusStream* s) { return s->device != nullptr; })) return fn;
  // Made in issue order on the issuing thread; should one fail, ~Fences releases those made already.
  auto fences = std::make_shared<Fences>();
  for (chorusStream* s : streams)
    if (s->device != nullptr) fences->list.push_back({s->device.get(), s->device->fence()});
  return [&comm, fn = std::move(fn), fences] {
    try {
      waitReached(comm, fences->list);
      fn();
    } catch (...) {
      fences->releaseAll();
      throw;
    }
    if (std::optional<Error> e = fences->releaseAll()) throw *e;
  };
}

}  // namespace chorus
