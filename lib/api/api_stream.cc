// Exported functions: streams.
#include "lib/api/api_guard.h"
#include "lib/comm/comm.h"
#include "lib/api/registry.h"
#include "lib/comm/stream.h"

using namespace chorus;

namespace {
void checkLive(chorusStream_t s) {
  if (s == nullptr) fail(chorusInvalidArgument, "stream is NULL");
  if (!streamAlive(s))
    fail(chorusInvalidUsage, "stream ({}) is not a live stream: it was destroyed or never created",
         static_cast<void*>(s));
}
// Runs f on the executor of the stream's communicator; a communicator being destroyed or aborted is left alone
// (it finishes the stream's work itself).
template <typename F>
void withExecutor(chorusStream_t s, F&& f) {
  try {
    CallRef ref(static_cast<chorusComm_t>(s->comm), "the stream's communicator");
    f(ref->executor());
  } catch (const Error&) {  // it went meanwhile
  }
}
// Runs the stream's queued work on this thread while its communicator is idle (Note [Helping]).
void helpWith(chorusStream_t s) {
  withExecutor(s, [s](Executor& e) { e.help([s] { return s->idle(); }); });
}
// For a caller about to poll the stream: its worker must be awake (Note [Deferred wake]).
void wakeWorkerFor(chorusStream_t s) {
  withExecutor(s, [](Executor& e) { e.wakeDeferred(); });
}
}  // namespace

extern "C" {

chorusResult_t chorusStreamCreate(chorusComm_t comm, chorusStream_t* stream) {
  return apiCall(comm, [&] {
    CallRef ref(comm, "comm");
    if (stream == nullptr) fail(chorusInvalidArgument, "stream (the output pointer) is NULL");
    *stream = new chorusStream(&*ref);
    registerStream(*stream);
  });
}

chorusResult_t chorusStreamCreateFromCuda(chorusComm_t comm, void* cudaStream, chorusStream_t* stream) {
  return apiCall(comm, [&] {
    CallRef ref(comm, "comm");
    if (stream == nullptr) fail(chorusInvalidArgument, "stream (the output pointer) is NULL");
    std::unique_ptr<mem::DeviceStream> device = openDeviceStream(*ref, cudaStream);
    *stream = new chorusStream(&*ref, std::move(device));
    registerStream(*stream);
  });
}

chorusResult_t chorusStreamSynchronize(chorusStream_t stream) {
  return apiCall(nullptr, [&] {
    checkLive(stream);
    if (!stream->idle()) helpWith(stream);
    std::string msg;
    chorusResult_t rc = stream->waitAll(&msg);
    if (stream->device != nullptr) {
      try {
        stream->device->synchronize();  // after a failure too: the stream's later work has been released
      } catch (const Error&) {
        if (rc == chorusSuccess) throw;  // else the operation's error is the one to report
      }
    }
    if (rc != chorusSuccess) throw Error(rc, msg);
  });
}

chorusResult_t chorusStreamQuery(chorusStream_t stream) {
  chorusResult_t rc = chorusSuccess;
  chorusResult_t api = apiCall(nullptr, [&] {
    checkLive(stream);
    std::string msg;
    rc = stream->query(&msg);
    if (rc == chorusInProgress) wakeWorkerFor(stream);
    if (rc != chorusSuccess && rc != chorusInProgress) throw Error(rc, msg);
  });
  return api != chorusSuccess ? api : rc;
}

chorusResult_t chorusLaunchHostFunc(chorusStream_t stream, chorusHostFn_t fn, void* userData) {
  return apiCall(nullptr, [&] {
    checkLive(stream);
    if (fn == nullptr) fail(chorusInvalidArgument, "fn is NULL");
    CallRef ref(static_cast<chorusComm_t>(stream->comm), "the stream's communicator");
    chorusStream* const streams[1] = {stream};
    ref->executor().enqueue(orderWithDevices(*ref, [fn, userData] { fn(userData); }, streams), streams,
                            Executor::Launch::kWorkerOnly);
  });
}

chorusResult_t chorusStreamDestroy(chorusStream_t stream) {
  return apiCall(nullptr, [&] {
    checkLive(stream);
    unregisterStream(stream);
    if (!stream->idle()) wakeWorkerFor(stream);
    std::string msg;
    stream->waitAll(&msg);
    delete stream;
  });
}

}  // extern "C"
