#include "transports/ucx/ucp_handles.h"

#include <ucs/debug/log_def.h>

#include <dirent.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "lib/base/error.h"
#include "lib/base/log.h"
#include "transports/ucx/tls_list.h"

namespace chorus::transport::ucx {

bool tlsAllows(std::initializer_list<std::string_view> names) {
  const char* tls = std::getenv("UCX_TLS");
  return tlsListAllows(tls != nullptr ? tls : "", names);
}

bool hasRdmaDevice() {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir("/sys/class/infiniband"), ::closedir);
  if (!dir) return false;
  while (const dirent* e = ::readdir(dir.get()))
    if (e->d_name[0] != '.') return true;
  return false;
}

Context createContext(const std::string& who) {
  ucp_config_t* raw = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &raw);
  if (s != UCS_OK) fail(chorusSystemError, "{}: reading the UCX configuration failed: {}", who, ucs_status_string(s));
  std::unique_ptr<ucp_config_t, void (*)(ucp_config_t*)> config(raw, ucp_config_release);
  // Our default for a UCX setting, unless the user set its variable.
  auto defaultTo = [&](const char* variable, const char* key, const char* value) {
    if (std::getenv(variable) != nullptr) return;
    ucs_status_t st = ucp_config_modify(config.get(), key, value);
    if (st != UCS_OK) CHORUS_DEBUG(kNet, "{}: {}={} not applied: {}", who, variable, value, ucs_status_string(st));
  };
  // Blocking TCP connects between many workers of one process (ranks as threads) were refused by the peer
  // intermittently (8 in-process ranks: 1-5 refusals per run); non-blocking ones never were (12 runs). Set as
  // the tcp transport's own key; UCX_TCP_CONN_NB still wins when set.
  const bool tcpAllowed = tlsAllows({"tcp"});
  if (tcpAllowed) defaultTo("UCX_TCP_CONN_NB", "CONN_NB", "y");
  // Without an RDMA device UCX has only tcp and shared memory, where its automatic rendezvous threshold (8-16 KiB)
  // costs half the bandwidth from 64 to 256 KiB (2-rank allreduce busbw, auto against 512K, interleaved: sm
  // 64 KiB 3.1 against 5.2-5.9 GB/s, 256 KiB 2.8-3.6 against 6.1-7.1; tcp 64 KiB 0.8-0.9 against 1.6-1.8); from
  // 1 MiB, within noise. Where RDMA is present UCX's own choice stands. UCX_RNDV_THRESH still wins when set.
  const bool rdma = hasRdmaDevice();
  if (!rdma) defaultTo("UCX_RNDV_THRESH", "RNDV_THRESH", "512K");
  // UCX 1.13's tcp completes a zero-copy active message twice when the connection breaks while the message is
  // part-sent (uct_tcp_ep_sendv: once in the purge, once after it) and aborts on its own assertion, so a peer's
  // failure could kill this rank. tcp's eager messages are therefore copied, in 256 KiB segments instead of 8 KiB,
  // which is no slower (docs/ucx-results.md). Without RDMA nothing else UCX runs here has zero-copy active
  // messages; with it, UCX's own choice stands and the UCX bug with it. A user's variables still win.
  if (!rdma && tcpAllowed) {
    defaultTo("UCX_ZCOPY_THRESH", "ZCOPY_THRESH", "inf");
    defaultTo("UCX_TCP_TX_SEG_SIZE", "TX_SEG_SIZE", "256K");
    defaultTo("UCX_TCP_RX_SEG_SIZE", "RX_SEG_SIZE", "256K");
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  ucp_context_h context = nullptr;
  s = ucp_init(&params, config.get(), &context);
  if (s != UCS_OK) fail(chorusSystemError, "{}: ucp_init failed: {}", who, ucs_status_string(s));
  return Context(context);
}

Worker createWorker(ucp_context_h context, const std::string& who) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h worker = nullptr;
  ucs_status_t s = ucp_worker_create(context, &params, &worker);
  if (s != UCS_OK) fail(chorusSystemError, "{}: ucp_worker_create failed: {}", who, ucs_status_string(s));
  return Worker(worker);
}

namespace {

// What address() publishes: a seal in front of UCX's worker address, so that bytes that are not one (a corrupt
// or foreign blob) are refused here, naming the peer, instead of reaching ucp_ep_create, which asserts on them.
struct Seal {
  uint32_t magic, version;
  uint64_t length, checksum;
};
constexpr uint32_t kSealMagic = 0x43485541;  // "CHUA"
constexpr uint32_t kSealVersion = 1;

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace

std::string unsealAddress(const std::vector<uint8_t>& sealed, std::vector<uint8_t>* address) {
  Seal seal{};
  if (sealed.size() < sizeof seal) return fmt::format("it is {} bytes, shorter than its header", sealed.size());
  std::memcpy(&seal, sealed.data(), sizeof seal);
  if (seal.magic != kSealMagic) return "it is not a Chorus UCX address (bad magic)";
  if (seal.version != kSealVersion)
    return fmt::format("address version {} (this rank reads {})", seal.version, kSealVersion);
  if (seal.length != sealed.size() - sizeof seal)
    return fmt::format("it says {} bytes but carries {}", seal.length, sealed.size() - sizeof seal);
  if (seal.checksum != fnv1a(sealed.data() + sizeof seal, seal.length)) return "its checksum does not match";
  address->assign(sealed.begin() + sizeof seal, sealed.end());
  return "";
}

std::vector<uint8_t> workerAddress(ucp_worker_h worker, const std::string& who) {
  ucp_address_t* address = nullptr;
  size_t len = 0;
  ucs_status_t s = ucp_worker_get_address(worker, &address, &len);
  if (s != UCS_OK) fail(chorusSystemError, "{}: ucp_worker_get_address failed: {}", who, ucs_status_string(s));
  auto release = [worker](ucp_address_t* a) { ucp_worker_release_address(worker, a); };
  std::unique_ptr<ucp_address_t, decltype(release)> owned(address, release);
  const auto* bytes = reinterpret_cast<const uint8_t*>(address);
  Seal seal{kSealMagic, kSealVersion, len, fnv1a(bytes, len)};
  std::vector<uint8_t> out(sizeof seal + len);
  std::memcpy(out.data(), &seal, sizeof seal);
  std::memcpy(out.data() + sizeof seal, bytes, len);
  return out;
}

Endpoint::~Endpoint() {
  if (void* req = close(true)) ucp_request_free(req);  // UCX finishes it; the worker's destruction at the latest
}

Endpoint& Endpoint::operator=(Endpoint&& o) noexcept {
  if (this != &o) {
    if (void* req = close(true)) ucp_request_free(req);
    ep_ = o.ep_;
    o.ep_ = nullptr;
  }
  return *this;
}

void* Endpoint::close(bool force) {
  if (ep_ == nullptr) return nullptr;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t req = ucp_ep_close_nbx(ep_, &param);
  ep_ = nullptr;
  return UCS_PTR_IS_PTR(req) ? req : nullptr;  // an error here leaves nothing to wait for
}

namespace {

// UCX logs through a stack of handlers shared by the whole process, and push/pop are not thread-safe: ours is
// pushed once and stays; a thread-local sink says whether this thread's lines are being caught.
std::once_flag handlerPushed;
thread_local std::string* quietSink = nullptr;

ucs_log_func_rc_t catchLine(const char* file, unsigned line, const char*, ucs_log_level_t level,
                            const ucs_log_component_config_t*, const char* format, va_list ap) {
  if (quietSink == nullptr || level > UCS_LOG_LEVEL_WARN) return UCS_LOG_FUNC_RC_CONTINUE;
  char text[512];
  va_list copy;
  va_copy(copy, ap);
  std::vsnprintf(text, sizeof text, format, copy);
  va_end(copy);
  if (!quietSink->empty()) quietSink->append("; ");
  quietSink->append(text).append(" (").append(file).append(":").append(std::to_string(line)).append(")");
  return UCS_LOG_FUNC_RC_STOP;
}

}  // namespace

QuietUcx::QuietUcx(std::string* sink) : saved_(quietSink) {
  std::call_once(handlerPushed, [] { ucs_log_push_handler(catchLine); });
  quietSink = sink;
}

QuietUcx::~QuietUcx() { quietSink = saved_; }

ucs_status_t createEndpoint(ucp_worker_h worker, const std::vector<uint8_t>& address, ucp_err_handling_mode_t mode,
                            ucp_err_handler_cb_t onError, void* arg, Endpoint* out, std::string* ucxSaid) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = mode;
  params.err_handler.cb = onError;
  params.err_handler.arg = arg;
  ucp_ep_h ep = nullptr;
  ucs_status_t s;
  {
    QuietUcx quiet(ucxSaid);
    s = ucp_ep_create(worker, &params, &ep);
  }
  if (s == UCS_OK) *out = Endpoint(ep);
  return s;
}

}  // namespace chorus::transport::ucx
