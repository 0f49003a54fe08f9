#include "transports/plugin_memory.h"

#include <dlfcn.h>

#include <deque>
#include <mutex>
#include <string_view>

#include "lib/base/error.h"
#include "lib/mem/space.h"

namespace chorus::transport {

namespace {

// Throws the plugin's failure rc as chorus::Error: "WHO: WHAT failed: the plugin's lastError()".
void throwOnFailure(const chorusMemoryPlugin_v1_t* t, int rc, std::string_view who, std::string_view what) {
  if (rc == 0) return;
  const char* why = t->lastError != nullptr ? t->lastError() : nullptr;
  throw Error(static_cast<chorusResult_t>(rc), fmt::format("{}: {} failed: {}", who, what, why ? why : "?"));
}

class PluginDevice final : public mem::Device {
 public:
  PluginDevice(const chorusMemoryPlugin_v1_t* t, int ordinal)
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
  void release(void* p) override { t_->release(ordinal_, p); }  // from destructors: a failure is not thrown
  bool hostAccessible() const override { return t_->hostAccessible != nullptr && t_->hostAccessible(ordinal_) != 0; }

 private:
  void check(int rc, std::string_view what) const { throwOnFailure(t_, rc, name_, what); }
  const chorusMemoryPlugin_v1_t* t_;
  int ordinal_;
  std::string name_;
};

class PluginRuntime final : public mem::Classifier {
 public:
  PluginRuntime(const chorusMemoryPlugin_v1_t* t, std::string origin) : t_(t), origin_(std::move(origin)) {}
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
  std::string describe() const { return fmt::format("{} from {}", t_->name, origin_); }

 private:
  // One PluginDevice per ordinal, made on first sight; a deque keeps their addresses.
  mem::Device* device(int ordinal) {
    if (ordinal < 0) return nullptr;
    std::lock_guard<std::mutex> g(mu_);
    for (PluginDevice& d : devices_)
      if (d.ordinal() == ordinal) return &d;
    return &devices_.emplace_back(t_, ordinal);
  }
  void check(int rc, std::string_view what) const { throwOnFailure(t_, rc, t_->name, what); }
  const chorusMemoryPlugin_v1_t* t_;
  std::string origin_;
  std::mutex mu_;
  std::deque<PluginDevice> devices_;
};

std::mutex gMu;
PluginRuntime* gRuntime = nullptr;  // lives as long as the process: plugins are never unloaded
std::vector<std::string> gSeen;

}  // namespace

std::string registerMemoryPlugin(const chorusMemoryPlugin_v1_t* table, const std::string& file) {
  const char* unavailable = table->unavailable != nullptr ? table->unavailable() : nullptr;
  std::lock_guard<std::mutex> g(gMu);
  std::string why;
  if (unavailable != nullptr && *unavailable != '\0') why = fmt::format("not available: {}", unavailable);
  else if (gRuntime != nullptr)
    why = fmt::format("refused: the device runtime {} is registered already", gRuntime->describe());
  gSeen.push_back(fmt::format("{} from {}: {}", table->name, file, why.empty() ? "registered" : why));
  if (!why.empty()) return why;
  gRuntime = new PluginRuntime(table, file);
  mem::setClassifier(gRuntime);
  return "";
}

std::vector<std::string> memoryPlugins() {
  std::lock_guard<std::mutex> g(gMu);
  return gSeen;
}

bool deviceDriverInProcess() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr) return false;
  dlclose(h);  // drops only the reference RTLD_NOLOAD took
  return true;
}

}  // namespace chorus::transport
