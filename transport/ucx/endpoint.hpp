#pragma once
/// One connection to a peer: its UCP endpoint plus what apiary tracks about it
/// (key, liveness for keepalives).
#include <cstdint>
#include <string>

#include <ucp/api/ucp.h>

#include "messages/result.hpp"
#include "transport/transport.hpp"

namespace apiary::transport::ucx {

/// A live or failing connection. Owned by the transport; the endpoint is closed by
/// close(), never by the destructor (closing needs the worker to progress).
struct Endpoint {
  ucp_ep_h ep = nullptr;
  PeerKey key;                       ///< "host:port", or "anon:N" until HELLO names it
  bool outbound = false;             ///< we dialled it
  bool failed = false;               ///< UCX reported an error; awaiting cleanup
  Error failure;                     ///< why it failed
  Clock::time_point last_rx{};       ///< last frame received
  Clock::time_point last_probe{};    ///< last KEEPALIVE sent
};

/// Dials host:port with the error mode matching `mode`. `err_cb(arg, ep, status)` is
/// called (inside progress) when the connection fails.
Result<ucp_ep_h> connect_endpoint(ucp_worker_h worker, const std::string& host, std::uint16_t port,
                                  Mode mode, ucp_err_handler_cb_t err_cb, void* arg);

/// Accepts a connection request with the error mode matching `mode`.
Result<ucp_ep_h> accept_endpoint(ucp_worker_h worker, ucp_conn_request_h request, Mode mode,
                                 ucp_err_handler_cb_t err_cb, void* arg);

/// Starts closing `ep` (flushing unless `force`); returns the pending request, or
/// nullptr when it closed at once.
void* close_endpoint(ucp_ep_h ep, bool force);

/// The endpoint's lanes and devices as UCX prints them.
std::string describe_endpoint(ucp_ep_h ep);

}  // namespace apiary::transport::ucx
