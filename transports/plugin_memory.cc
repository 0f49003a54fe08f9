#include "transports/plugin_memory.h"

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <new>
#include <string_view>
#include <vector>

#include "lib/base/error.h"
#include "lib/base/immortal.h"
#include "lib/mem/space.h"

namespace chorus::transport {

static_assert(mem::kIpcHandleBytes == CHORUS_IPC_HANDLE_BYTES);

namespace {

// Throws the plugin's failure rc as chorus::Error: "WHO: WHAT failed: the plugin's lastError()".
void throwOnFailure(const chorusMemoryPlugin_v4_t* t, int rc, std::string_view who, std::string_view what) {
  if (rc == 0) return;
  const char* why = t->lastError != nullptr ? t->lastError() : nullptr;
  throw Error(static_cast<chorusResult_t>(rc), fmt::format("{}: {} failed: {}", who, what, why ? why : "?"));
}

// Note [Frees wait for quiet]:
// A fence (Note [Device streams] in lib/comm/stream.cc) holds an application's stream until Chorus releases it,
// and the runtime's frees (cudaFree, cudaFreeHost, cudaIpcCloseMemHandle) wait for every stream of the device
// first. A free made while any fence of this process is held on the device would wait for a stream that only
// Chorus's own next step releases, and no timeout of Chorus runs inside the driver: the process hangs (as in
// NVIDIA/nccl#48). Scratch growth (DDP's first step: 1 MiB, then 25 MiB) frees while its own call's fence holds
// the stream. So every free goes through the device's gate: it runs at once when no fence of this process is held
// on the device, else it waits in a list that the release of the last such fence runs. The gate's lock is held
// while a free runs, so that no fence is queued meanwhile, and while a fence is queued, so that a free never
// starts beside it. The lists are per device: a runtime's frees wait for their own device only.
class PluginDevice final : public mem::Device {
 public:
  PluginDevice(const chorusMemoryPlugin_v4_t* t, int ordinal)
      : t_(t), ordinal_(ordinal), name_(fmt::format("{}:{}", t->name, ordinal)) {}
  const char* name() const override { return name_.c_str(); }
  int ordinal() const { return ordinal_; }
  void copy(void* dst, const void* src, size_t bytes) override { check(t_->copy(ordinal_, dst, src, bytes), "copy"); }
  void reduce(void* dst, const void* a, const void* b, size_t count, chorusDataType_t dt,
              chorusRedOp_t op) override {
    check(t_->reduce(ordinal_, dst, a, b, count, dt, op), "reduce");
  }
  void reduceN(void* dst, const void* const* srcs, int n, size_t count, chorusDataType_t dt,
               chorusRedOp_t op) override {
    check(t_->reduceN(ordinal_, dst, srcs, n, count, dt, op), "reduceN");
  }
  void scaleDivide(void* buf, size_t count, chorusDataType_t dt, int divisor) override {
    check(t_->scaleDivide(ordinal_, buf, count, dt, divisor), "scaleDivide");
  }
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    check(t_->allocate(ordinal_, bytes, &p), fmt::format("allocating {} bytes", bytes));
    return p;
  }
  // From destructors: a failure is not thrown.
  void release(void* p) override {
    whenQuiet([t = t_, ordinal = ordinal_, p] { t->release(ordinal, p); });
  }
  bool hostAccessible() const override { return t_->hostAccessible != nullptr && t_->hostAccessible(ordinal_) != 0; }
  // Without the runtime's own: plain host memory, and copies that have finished when they return.
  void* allocateHost(size_t bytes) override {
    void* p = nullptr;
    if (t_->hostAllocate == nullptr) {
      p = std::malloc(bytes == 0 ? 1 : bytes);
      if (p == nullptr) throw std::bad_alloc();
      return p;
    }
    check(t_->hostAllocate(ordinal_, bytes, &p), fmt::format("allocating {} bytes of host memory", bytes));
    return p;
  }
  void releaseHost(void* p) override {
    if (t_->hostRelease == nullptr) std::free(p);
    else whenQuiet([t = t_, ordinal = ordinal_, p] { t->hostRelease(ordinal, p); });
  }
  uint64_t copyStart(void* dst, const void* src, size_t bytes) override {
    uint64_t ticket = 0;
    if (t_->copyStart == nullptr || t_->copyDone == nullptr) copy(dst, src, bytes);
    else check(t_->copyStart(ordinal_, dst, src, bytes, &ticket), "starting a copy");
    return ticket;
  }
  bool copyDone(uint64_t ticket) override {
    if (t_->copyDone == nullptr) return true;
    int done = 0;
    check(t_->copyDone(ordinal_, ticket, &done), "waiting for a copy");
    return done != 0;
  }
  bool hasIpc() const override {
    return t_->ipcExport != nullptr && t_->ipcOpen != nullptr && t_->ipcClose != nullptr && t_->copyStart != nullptr &&
           t_->copyDone != nullptr;
  }
  size_t ipcExport(const void* p, uint8_t* handle) override {
    size_t offset = 0;
    check(t_->ipcExport(ordinal_, p, handle, &offset), fmt::format("exporting {} for IPC", p));
    return offset;
  }
  void* ipcOpen(const uint8_t* handle) override {
    void* base = nullptr;
    check(t_->ipcOpen(ordinal_, handle, &base), "opening a peer's memory (IPC)");
    return base;
  }
  void ipcClose(const uint8_t* handle, void* base) override {
    std::array<uint8_t, CHORUS_IPC_HANDLE_BYTES> h;
    std::memcpy(h.data(), handle, h.size());
    whenQuiet([t = t_, ordinal = ordinal_, h, base] { t->ipcClose(ordinal, h.data(), base); });
  }
  bool hasReduceStart() const override { return t_->reduceStart != nullptr && t_->copyDone != nullptr; }
  uint64_t reduceStart(void* dst, const void* a, const void* b, size_t count, chorusDataType_t dt,
                       chorusRedOp_t op) override {
    uint64_t ticket = 0;
    check(t_->reduceStart(ordinal_, dst, a, b, count, dt, op, &ticket), "starting a reduction");
    return ticket;
  }

  std::string hostWideId() override { return t_->deviceId != nullptr ? nameOf(ordinal_) : std::string(); }
  std::vector<std::string> unreachablePeers() override {
    std::vector<std::string> out;
    if (t_->deviceCount == nullptr || t_->deviceId == nullptr || t_->peerAccess == nullptr) return out;
    int n = 0;
    check(t_->deviceCount(&n), "counting the devices");
    for (int other = 0; other < n; ++other) {
      if (other == ordinal_) continue;
      int yes = 1;
      check(t_->peerAccess(ordinal_, other, &yes), fmt::format("asking for peer access to device {}", other));
      if (yes == 0) out.push_back(nameOf(other));
    }
    return out;
  }

  // Queues a fence with `queue` (Note [Frees wait for quiet]); `queue` throws when it queued none.
  template <class F>
  uint64_t fenced(F&& queue) {
    std::lock_guard<std::mutex> g(quietMu_);
    const uint64_t f = queue();
    ++fencesHeld_;
    return f;
  }
  // `n` fences of this device were released: the last one runs the frees that waited.
  void unfenced(int n) {
    if (n == 0) return;
    std::lock_guard<std::mutex> g(quietMu_);
    fencesHeld_ -= n;
    if (fencesHeld_ > 0) return;
    for (auto& free : waitingFrees_) free();
    waitingFrees_.clear();
  }

 private:
  void check(int rc, std::string_view what) const { throwOnFailure(t_, rc, name_, what); }
  // The host-wide name of device `ordinal` (deviceId, version 4).
  std::string nameOf(int ordinal) const {
    std::array<char, 64> id{};
    check(t_->deviceId(ordinal, id.data(), id.size()), fmt::format("naming device {}", ordinal));
    return std::string(id.data(), strnlen(id.data(), id.size()));
  }
  void whenQuiet(std::function<void()> free) {
    std::lock_guard<std::mutex> g(quietMu_);
    if (fencesHeld_ == 0) free();
    else waitingFrees_.push_back(std::move(free));
  }
  const chorusMemoryPlugin_v4_t* t_;
  int ordinal_;
  std::string name_;
  std::mutex quietMu_;
  int fencesHeld_ = 0;  // by every stream of this device, under quietMu_
  std::vector<std::function<void()>> waitingFrees_;  // under quietMu_
};

class PluginStream final : public mem::DeviceStream {
 public:
  PluginStream(const chorusMemoryPlugin_v4_t* t, PluginDevice* device, void* stream)
      : t_(t), device_(device), stream_(stream) {}
  ~PluginStream() override {
    t_->streamClose(stream_);  // releases every fence
    device_->unfenced(held_.exchange(0));
  }
  mem::Device* device() const override { return device_; }
  uint64_t fence() override {
    return device_->fenced([&] {
      uint64_t f = 0;
      check(t_->streamFence(stream_, &f), "queueing a fence on its stream");
      ++held_;
      return f;
    });
  }
  bool reached(uint64_t fence) override {
    int yes = 0;
    check(t_->streamReached(stream_, fence, &yes), "waiting for the work queued on its stream");
    return yes != 0;
  }
  // A fence whose release failed stays counted as held until the stream is closed: a free may not pass it.
  void release(uint64_t fence) override {
    check(t_->streamRelease(stream_, fence), "releasing its stream");
    --held_;
    device_->unfenced(1);
  }
  void synchronize() override { check(t_->streamSynchronize(stream_), "synchronizing its stream"); }

 private:
  void check(int rc, std::string_view what) const { throwOnFailure(t_, rc, device_->name(), what); }
  const chorusMemoryPlugin_v4_t* t_;
  PluginDevice* device_;
  void* stream_;
  std::atomic<int> held_{0};  // fences queued and not released
};

class PluginRuntime final : public mem::Runtime {
 public:
  PluginRuntime(const chorusMemoryPlugin_v4_t* t, std::string origin) : t_(t), origin_(std::move(origin)) {}
  mem::Device* deviceOf(const void* p) override {
    int d = -1;
    check(t_->classify(p, &d), fmt::format("asking which memory {} is", p));
    return device(d);
  }
  mem::Device* current() override {
    int d = -1;
    check(t_->currentDevice(&d), "asking for the current device");
    return device(d);
  }
  const char* name() const override { return t_->name; }
  bool hasStreams() const override {
    return t_->streamOpen != nullptr && t_->streamFence != nullptr && t_->streamReached != nullptr &&
           t_->streamRelease != nullptr && t_->streamSynchronize != nullptr && t_->streamClose != nullptr;
  }
  std::unique_ptr<mem::DeviceStream> openStream(void* native) override {
    if (!hasStreams())
      throw Error(chorusInvalidUsage, fmt::format("the device runtime {} has no streams", describe()));
    int d = -1;
    void* s = nullptr;
    check(t_->streamOpen(native, &d, &s), fmt::format("opening its stream {}", native));
    PluginDevice* dev = device(d);
    if (dev == nullptr) {
      t_->streamClose(s);
      throw Error(chorusInternalError, fmt::format("{}: stream {} belongs to no device", t_->name, native));
    }
    return std::make_unique<PluginStream>(t_, dev, s);
  }
  std::string describe() const { return fmt::format("{} from {}", t_->name, origin_); }

 private:
  // One PluginDevice per ordinal, made on first sight; a deque keeps their addresses.
  PluginDevice* device(int ordinal) {
    if (ordinal < 0) return nullptr;
    std::lock_guard<std::mutex> g(mu_);
    for (PluginDevice& d : devices_)
      if (d.ordinal() == ordinal) return &d;
    return &devices_.emplace_back(t_, ordinal);
  }
  void check(int rc, std::string_view what) const { throwOnFailure(t_, rc, t_->name, what); }
  const chorusMemoryPlugin_v4_t* t_;
  std::string origin_;
  std::mutex mu_;
  std::deque<PluginDevice> devices_;
};

std::mutex gMu;
PluginRuntime* gRuntime = nullptr;  // lives as long as the process: plugins are never unloaded
Immortal<std::vector<std::string>> gSeen;  // Note [Immortal statics]
Immortal<std::string> gUnavailable;       // the last memory plugin that could not run here, and why

// Note [A driver without its plugin]: a process with the CUDA driver loaded may hand Chorus device memory even
// when no CUDA plugin registered (none was built or found, or it cannot run here). Read as host memory it would
// crash the process or give wrong results, so pointers are asked of the driver itself (cuPointerGetAttribute,
// found with dlsym: libchorus.so links no CUDA) and the API refuses device memory naming the argument and why the
// plugin is missing. Managed memory the CPU may touch stays host memory.
class UnusableDevice final : public mem::Device {
 public:
  UnusableDevice(int ordinal, chorusResult_t code, std::string why)
      : ordinal_(ordinal), name_(fmt::format("cuda:{}", ordinal)), code_(code), why_(std::move(why)) {}
  const char* name() const override { return name_.c_str(); }
  const char* unusable(chorusResult_t* code) const override {
    *code = code_;
    return why_.c_str();
  }
  void copy(void*, const void*, size_t) override { refuse(); }
  void reduce(void*, const void*, const void*, size_t, chorusDataType_t, chorusRedOp_t) override { refuse(); }
  void reduceN(void*, const void* const*, int, size_t, chorusDataType_t, chorusRedOp_t) override { refuse(); }
  void scaleDivide(void*, size_t, chorusDataType_t, int) override { refuse(); }
  void* allocate(size_t) override { refuse(); }
  void release(void*) override {}
  bool hostAccessible() const override { return false; }
  void* allocateHost(size_t) override { refuse(); }
  void releaseHost(void*) override {}
  uint64_t copyStart(void*, const void*, size_t) override { refuse(); }
  bool copyDone(uint64_t) override { refuse(); }
  bool hasIpc() const override { return false; }
  size_t ipcExport(const void*, uint8_t*) override { refuse(); }
  void* ipcOpen(const uint8_t*) override { refuse(); }
  void ipcClose(const uint8_t*, void*) override {}
  bool hasReduceStart() const override { return false; }
  uint64_t reduceStart(void*, const void*, const void*, size_t, chorusDataType_t, chorusRedOp_t) override { refuse(); }
  int ordinal() const { return ordinal_; }

 private:
  [[noreturn]] void refuse() const { throw Error(code_, fmt::format("{}: {}", name_, why_)); }
  int ordinal_;
  std::string name_;
  chorusResult_t code_;
  std::string why_;
};

class DriverProbe final : public mem::Runtime {
 public:
  using GetAttribute = int (*)(void* data, int attribute, uintptr_t pointer);
  DriverProbe(GetAttribute get, chorusResult_t code, std::string why) : get_(get), code_(code), why_(std::move(why)) {}
  mem::Device* deviceOf(const void* p) override {
    constexpr int kMemoryType = 2, kIsManaged = 8, kOrdinal = 9, kDeviceMemory = 2;  // CUpointer_attribute
    unsigned type = 0;
    int managed = 0, ordinal = 0;
    const auto at = reinterpret_cast<uintptr_t>(p);
    if (get_(&type, kMemoryType, at) != 0 || type != kDeviceMemory) return nullptr;  // not the driver's: host
    if (get_(&managed, kIsManaged, at) == 0 && managed != 0) return nullptr;
    if (get_(&ordinal, kOrdinal, at) != 0) ordinal = 0;
    std::lock_guard<std::mutex> g(mu_);
    for (UnusableDevice& d : devices_)
      if (d.ordinal() == ordinal) return &d;
    return &devices_.emplace_back(ordinal, code_, why_);
  }
  mem::Device* current() override { return nullptr; }
  const char* name() const override { return "cuda"; }
  const char* unusable(chorusResult_t* code) const override {
    *code = code_;
    return why_.c_str();
  }
  std::unique_ptr<mem::DeviceStream> openStream(void* native) override {
    throw Error(code_, fmt::format("cudaStream {} cannot be used: {}", native, why_));
  }

 private:
  GetAttribute get_;
  chorusResult_t code_;
  std::string why_;
  std::mutex mu_;
  std::deque<UnusableDevice> devices_;
};

}  // namespace

std::string registerMemoryPlugin(const chorusMemoryPlugin_v4_t* table, const std::string& file) {
  const char* unavailable = table->unavailable != nullptr ? table->unavailable() : nullptr;
  std::lock_guard<std::mutex> g(gMu);
  std::string why;
  if (unavailable != nullptr && *unavailable != '\0') why = fmt::format("not available: {}", unavailable);
  else if (gRuntime != nullptr)
    why = fmt::format("refused: the device runtime {} is registered already", gRuntime->describe());
  gSeen->push_back(fmt::format("{} from {}: {}", table->name, file, why.empty() ? "registered" : why));
  if (unavailable != nullptr && *unavailable != '\0') *gUnavailable = gSeen->back();
  if (!why.empty()) return why;
  gRuntime = new PluginRuntime(table, file);
  mem::setRuntime(gRuntime);
  return "";
}

std::vector<std::string> memoryPlugins() {
  std::lock_guard<std::mutex> g(gMu);
  return *gSeen;
}

void probeDeviceDriver() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);  // kept: the probe calls into it for good
  if (h == nullptr) return;
  auto get = reinterpret_cast<DriverProbe::GetAttribute>(dlsym(h, "cuPointerGetAttribute"));
  std::lock_guard<std::mutex> g(gMu);
  static DriverProbe* probe = nullptr;
  if (gRuntime != nullptr || probe != nullptr || get == nullptr) return;
  probe = gUnavailable->empty()
              ? new DriverProbe(get, chorusInvalidArgument,
                                "this Chorus has no CUDA plugin (built without CUDA, or libchorus-cuda_ipc.so is not "
                                "on the plugin path: see chorus_info)")
              : new DriverProbe(get, chorusUnhandledCudaError,
                                fmt::format("Chorus's CUDA plugin cannot run here: {}", *gUnavailable));
  mem::setRuntime(probe);
}

bool deviceDriverInProcess() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr) return false;
  dlclose(h);  // drops only the reference RTLD_NOLOAD took
  return true;
}

}  // namespace chorus::transport
