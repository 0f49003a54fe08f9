// The Python module chorus_torch: importing it registers the "chorus" backend with torch.distributed.
#include <pybind11/chrono.h>
#include <torch/python.h>

#include "ddp/torch/process_group.h"

PYBIND11_MODULE(chorus_torch, m) {
  m.doc() = "Chorus as a torch.distributed backend: import chorus_torch, then init_process_group(\"chorus\", ...)";
  m.def("_create", &chorus::torchpg::ProcessGroupChorus::create, pybind11::call_guard<pybind11::gil_scoped_release>());
  pybind11::module::import("torch.distributed")
      .attr("Backend")
      .attr("register_backend")("chorus", m.attr("_create"));
}
