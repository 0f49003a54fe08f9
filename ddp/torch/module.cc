// The Python module chorus_torch: importing it registers the "chorus" backend with torch.distributed, for the CPU
// (torch 2.x routes a group's CPU tensors to it: init_process_group("chorus") or "cpu:chorus,cuda:nccl"), with the
// extended creator API, through which the group's name and global ranks reach the backend.
#include <pybind11/chrono.h>
#include <torch/python.h>

#include "ddp/torch/backend.h"

namespace {

c10::intrusive_ptr<chorus::torchpg::BackendBase> create(const c10d::DistributedBackendOptions& o,
                                                        const pybind11::object& /*pg_options: none of ours*/) {
  auto backend = c10::make_intrusive<chorus::torchpg::ChorusBackend>(
      o.store, o.group_rank, o.group_size, std::chrono::duration_cast<std::chrono::milliseconds>(o.timeout),
      chorus::torchpg::ChorusBackend::Identity{.name = o.group_id, .globalRanks = o.global_ranks_in_group});
  chorus::torchpg::ChorusBackend::live(backend);
  return backend;
}

}  // namespace

PYBIND11_MODULE(chorus_torch, m) {
  namespace py = pybind11;
  m.doc() = "Chorus as a torch.distributed backend: import chorus_torch, then init_process_group(\"chorus\", ...)";
  m.def("_create", &create, py::call_guard<py::gil_scoped_release>());
  // Note [Threads at exit] in backend.cc.
  m.def("_close_all", &chorus::torchpg::ChorusBackend::closeAll, py::call_guard<py::gil_scoped_release>());
  py::module::import("atexit").attr("register")(m.attr("_close_all"));
  py::object registerBackend = py::module::import("torch.distributed").attr("Backend").attr("register_backend");
#if CHORUS_TORCH_BACKEND
  registerBackend("chorus", m.attr("_create"), py::arg("extended_api") = true,
                  py::arg("devices") = std::vector<std::string>{"cpu"});
#else
  registerBackend("chorus", m.attr("_create"), py::arg("extended_api") = true);
#endif
}
