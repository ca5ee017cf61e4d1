#pragma once
/// A bare UCX client for tests that must send what apiary's own transport never would
/// (garbage envelopes, messages to unused active-message ids). It speaks plain UCP:
/// tcp lanes, PEER error mode, every message sent with the reply flag. One thread
/// only: every call progresses the worker itself.
#include <chrono>
#include <cstdint>
#include <deque>
#include <utility>
#include <optional>
#include <string>

#include <ucp/api/ucp.h>

#include "envelope.pb.h"

namespace apiary::testing {

class RawUcxClient {
 public:
  /// Connects to a listener at "host:port" (IPv4). Check ok() and error().
  explicit RawUcxClient(const std::string& server);
  ~RawUcxClient();
  RawUcxClient(const RawUcxClient&) = delete;
  RawUcxClient& operator=(const RawUcxClient&) = delete;

  /// Whether setup succeeded and the connection has not failed.
  bool ok() const { return error_.empty(); }
  /// What went wrong, empty when ok().
  const std::string& error() const { return error_; }

  /// Sends one active message to `am_id` (0..65535) with `header` and `data`, and
  /// progresses until UCX completes it or `timeout` passes. Returns false on failure.
  bool send(unsigned am_id, const std::string& header, const std::string& data, std::chrono::milliseconds timeout);

  /// The next frame the server sent on active-message id 0 whose envelope kind is
  /// `kind`, skipping others (HELLO, KEEPALIVE; keepalives are answered). nullopt
  /// when none came within `timeout` or a header was not an Envelope.
  std::optional<pb::Envelope> next_frame(pb::FrameKind kind, std::chrono::milliseconds timeout);

  /// The next message the server sent on active-message id 0, as raw header and data
  /// bytes (data only when it came eagerly), whatever it holds (a sealed frame). nullopt
  /// when none came within `timeout`.
  std::optional<std::pair<std::string, std::string>> next_message(std::chrono::milliseconds timeout);

  /// Progresses for `timeout` or until the connection fails; returns ok().
  bool linger(std::chrono::milliseconds timeout);

  /// Messages received on ids other than 0 (the server never sends any).
  std::uint64_t stray_received() const { return stray_; }

 private:
  static ucs_status_t on_frame(void* arg, const void* header, size_t header_length, void* data, size_t length,
                               const ucp_am_recv_param_t* param);
  static ucs_status_t on_stray(void* arg, const void* header, size_t header_length, void* data, size_t length,
                               const ucp_am_recv_param_t* param);
  static void on_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  void fail(std::string why);

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  std::string error_;
  std::deque<std::pair<std::string, std::string>> messages_;  ///< header and eager data received on id 0, oldest first
  std::uint64_t stray_ = 0;
};

}  // namespace apiary::testing
