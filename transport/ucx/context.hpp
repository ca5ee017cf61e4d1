#pragma once
/// RAII ownership of a UCP context, configured for apiary: active messages plus
/// event-fd wakeups, transports chosen by Mode, and network devices pinned to the
/// interface that owns the listen address.
#include <string>
#include <vector>

#include <ucp/api/ucp.h>

#include "messages/result.hpp"
#include "transport/transport.hpp"

namespace apiary::transport::ucx {

/// The network interface that owns `host` (e.g. "lo" for 127.0.0.1), or an error.
Result<std::string> interface_of(const std::string& host);

/// The RDMA ports ("mlx5_0:1") behind network interface `iface`, read from sysfs under
/// `sysfs` ("/sys"): RoCE ports whose GID table names the interface
/// (class/infiniband/DEV/ports/P/gid_attrs/ndevs/*), and the port of an IPoIB
/// interface (class/net/IFACE/device/infiniband/DEV, port dev_port + 1). Sorted, unique;
/// empty on a machine without RDMA.
std::vector<std::string> rdma_ports_of(const std::string& iface, const std::string& sysfs = "/sys");

/// What a context of `mode` on the interface `net_device` lets UCX use:
/// NET_DEVICES (the interface and its RDMA ports) and TLS (tcp, or tcp and shared memory;
/// with RDMA ports also rc, ud and dc, UCX choosing among them).
struct Lanes {
  std::string net_devices;
  std::string tls;
};
Lanes lanes_of(Mode mode, const std::string& net_device, const std::vector<std::string>& rdma_ports);

/// A UCP context. Move-only.
class Context {
 public:
  /// Creates a context for `mode`, pinning UCX to `net_device` and its RDMA ports
  /// (lanes_of; the devices unless the environment sets UCX_NET_DEVICES).
  static Result<Context> create(Mode mode, const std::string& net_device);

  Context(Context&& other) noexcept : ctx_(other.ctx_) { other.ctx_ = nullptr; }
  Context& operator=(Context&&) = delete;
  Context(const Context&) = delete;
  ~Context();

  ucp_context_h get() const { return ctx_; }

 private:
  explicit Context(ucp_context_h ctx) : ctx_(ctx) {}
  ucp_context_h ctx_ = nullptr;
};

/// "ucx: <what> failed: <UCX status text>"
Error ucx_error(errc code, const char* what, ucs_status_t status);

}  // namespace apiary::transport::ucx
