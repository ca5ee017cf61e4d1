#pragma once
// What the expert bindings share (python/src/moe.cpp, moe_client.cpp).
#include <memory>

#include "api/remote_expert.hpp"
#include "python/src/common.hpp"

namespace apiary::python {

/// A client of one expert, on a DHT's runtime.
struct PyRemoteExpert {
  PyRemoteExpert() = default;
  ~PyRemoteExpert() {
    without_gil([this] {
      expert.reset();
      host.reset();  // the runtime's last handle stops it
    });
  }
  PyRemoteExpert(const PyRemoteExpert&) = delete;
  PyRemoteExpert& operator=(const PyRemoteExpert&) = delete;

  std::shared_ptr<Runtime> host;
  std::unique_ptr<RemoteExpert> expert;
};

/// The many-expert calls and the beam search (moe_client.cpp).
void bind_moe_client(py::module_& m);

}  // namespace apiary::python
