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
    // The runtime's last handle stops it, waiting for its threads; one of them may need
    // the GIL (an in-process server freeing its modules).
    py::gil_scoped_release unlocked;
    expert.reset();
    host.reset();
  }
  PyRemoteExpert(const PyRemoteExpert&) = delete;
  PyRemoteExpert& operator=(const PyRemoteExpert&) = delete;

  std::shared_ptr<Runtime> host;
  std::unique_ptr<RemoteExpert> expert;
};

/// The many-expert calls and the beam search (moe_client.cpp).
void bind_moe_client(py::module_& m);

}  // namespace apiary::python
