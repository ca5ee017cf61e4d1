#pragma once
/// RAII ownership of a UCP context, configured for apiary: active messages plus
/// event-fd wakeups, transports chosen by Mode, and network devices pinned to the
/// interface that owns the listen address.
#include <string>

#include <ucp/api/ucp.h>

#include "messages/result.hpp"
#include "transport/transport.hpp"

namespace apiary::transport::ucx {

/// The network interface that owns `host` (e.g. "lo" for 127.0.0.1), or an error.
Result<std::string> interface_of(const std::string& host);

/// A UCP context. Move-only.
class Context {
 public:
  /// Creates a context for `mode`, pinning UCX to `net_device` unless the
  /// environment sets UCX_NET_DEVICES.
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
