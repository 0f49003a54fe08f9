// Owning handles for the UCP objects the UCX transport holds, and the few UCP calls whose cleanup or logging
// needs care: endpoint creation (which may be refused in peer error mode) and endpoint closing.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace chorus::transport::ucx {

struct ContextDeleter {
  void operator()(ucp_context_h c) const { ucp_cleanup(c); }
};
struct WorkerDeleter {
  void operator()(ucp_worker_h w) const { ucp_worker_destroy(w); }
};
using Context = std::unique_ptr<std::remove_pointer_t<ucp_context_h>, ContextDeleter>;
using Worker = std::unique_ptr<std::remove_pointer_t<ucp_worker_h>, WorkerDeleter>;

// Whether UCX_TLS lets UCX use one of `names` (tlsListAllows in tls_list.h; unset: all).
bool tlsAllows(std::initializer_list<std::string_view> names);
// Whether this host has an RDMA device (/sys/class/infiniband lists one): UCX then has more than tcp and sm.
bool hasRdmaDevice();
// Features TAG | WAKEUP, configured from the UCX_* environment (plus two defaults of ours where the user set
// none: UCX_TCP_CONN_NB=y, and UCX_RNDV_THRESH=512K without RDMA; see createContext). `who` names this rank in
// errors.
Context createContext(const std::string& who);
// Thread mode SERIALIZED: one thread at a time, not always the same one.
Worker createWorker(ucp_context_h context, const std::string& who);
// The worker's address bytes (what a peer's ucp_ep_create needs), sealed: a header with magic, version, length
// and checksum in front.
std::vector<uint8_t> workerAddress(ucp_worker_h worker, const std::string& who);
// The worker address inside sealed bytes; "" on success, else why they are not a valid one.
std::string unsealAddress(const std::vector<uint8_t>& sealed, std::vector<uint8_t>* address);

// An endpoint. Closing is explicit and asynchronous (close()); an endpoint still open when destroyed is
// force-closed without waiting, and the worker's destruction finishes the job.
class Endpoint {
 public:
  Endpoint() = default;
  explicit Endpoint(ucp_ep_h ep) : ep_(ep) {}
  Endpoint(Endpoint&& o) noexcept : ep_(o.ep_) { o.ep_ = nullptr; }
  Endpoint& operator=(Endpoint&& o) noexcept;
  Endpoint(const Endpoint&) = delete;
  ~Endpoint();
  ucp_ep_h get() const { return ep_; }
  explicit operator bool() const { return ep_ != nullptr; }
  // Starts closing (flushing first unless force); returns the close request to poll with
  // ucp_request_check_status and free, or nullptr when done at once.
  void* close(bool force);

 private:
  ucp_ep_h ep_ = nullptr;
};

// While it lives, UCX's error and warning lines on this thread are appended to *sink instead of printed.
class QuietUcx {
 public:
  explicit QuietUcx(std::string* sink);
  ~QuietUcx();
  QuietUcx(const QuietUcx&) = delete;
  QuietUcx& operator=(const QuietUcx&) = delete;

 private:
  std::string* saved_;
};

// ucp_ep_create to a remote worker address. While it runs, UCX's own error and warning lines are caught and
// appended to *ucxSaid instead of printed: a refused peer error mode is expected and handled by the caller.
ucs_status_t createEndpoint(ucp_worker_h worker, const std::vector<uint8_t>& address, ucp_err_handling_mode_t mode,
                            ucp_err_handler_cb_t onError, void* arg, Endpoint* out, std::string* ucxSaid);

}  // namespace chorus::transport::ucx
