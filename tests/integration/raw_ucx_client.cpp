#include "tests/integration/raw_ucx_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdlib>

namespace apiary::testing {
namespace {

using Clock = std::chrono::steady_clock;

/// Every 16-bit active-message id (UCX 1.13 wraps larger ids to 16 bits).
constexpr unsigned k_am_ids = 65536;

}  // namespace

RawUcxClient::RawUcxClient(const std::string& server) {
  const auto colon = server.rfind(':');
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  if (colon == std::string::npos || inet_pton(AF_INET, server.substr(0, colon).c_str(), &sin.sin_addr) != 1) {
    fail("expected an IPv4 host:port, got '" + server + "'");
    return;
  }
  sin.sin_port = htons(static_cast<std::uint16_t>(std::stoi(server.substr(colon + 1))));

  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) {
    fail("ucp_config_read failed");
    return;
  }
  // A sockaddr connection needs tcp; PEER error mode restricts lanes to tcp anyway.
  ucs_status_t st = ucp_config_modify(config, "TLS", "tcp");
  if (st == UCS_OK && std::getenv("UCX_NET_DEVICES") == nullptr) st = ucp_config_modify(config, "NET_DEVICES", "lo");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM;
  if (st == UCS_OK) st = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (st != UCS_OK) {
    fail(std::string("ucp_init failed: ") + ucs_status_string(st));
    return;
  }

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  st = ucp_worker_create(context_, &wp, &worker_);
  if (st != UCS_OK) {
    fail(std::string("ucp_worker_create failed: ") + ucs_status_string(st));
    return;
  }

  // Every id gets a handler, in ascending order: UCX 1.13 can crash on a message to
  // an id without one (the server never sends such, but this client must not trust it).
  for (unsigned id = 0; id < k_am_ids; ++id) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                    UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = id;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.cb = id == 0 ? &on_frame : &on_stray;
    hp.arg = this;
    st = ucp_worker_set_am_recv_handler(worker_, &hp);
    if (st != UCS_OK) {
      fail(std::string("ucp_worker_set_am_recv_handler failed: ") + ucs_status_string(st));
      return;
    }
  }

  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                  UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sin);
  ep.sockaddr.addrlen = sizeof sin;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &on_error;
  ep.err_handler.arg = this;
  st = ucp_ep_create(worker_, &ep, &ep_);
  if (st != UCS_OK) {
    ep_ = nullptr;
    fail(std::string("ucp_ep_create failed: ") + ucs_status_string(st));
  }
}

RawUcxClient::~RawUcxClient() {
  if (ep_ != nullptr) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req = ucp_ep_close_nbx(ep_, &p);
    const auto give_up = Clock::now() + std::chrono::seconds(2);
    if (req != nullptr && !UCS_PTR_IS_ERR(req)) {
      while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < give_up) ucp_worker_progress(worker_);
      if (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_request_cancel(worker_, req);
      ucp_request_free(req);
    }
  }
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

void RawUcxClient::fail(std::string why) {
  if (error_.empty()) error_ = std::move(why);
}

bool RawUcxClient::send(unsigned am_id, const std::string& header, const std::string& data,
                        std::chrono::milliseconds timeout) {
  if (!ok()) return false;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_REPLY;  // lets the server answer on this connection
  // `header` and `data` outlive the request: this call progresses until it completes.
  void* req = ucp_am_send_nbx(ep_, am_id, header.data(), header.size(), data.data(), data.size(), &p);
  if (req == nullptr) return true;
  if (UCS_PTR_IS_ERR(req)) {
    fail(std::string("ucp_am_send_nbx failed: ") + ucs_status_string(UCS_PTR_STATUS(req)));
    return false;
  }
  const auto give_up = Clock::now() + timeout;
  while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < give_up) ucp_worker_progress(worker_);
  ucs_status_t st = ucp_request_check_status(req);
  if (st == UCS_INPROGRESS) {
    ucp_request_cancel(worker_, req);
    while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(worker_);
    fail("a send to active-message id " + std::to_string(am_id) + " did not complete in time");
  } else if (st != UCS_OK) {
    fail(std::string("a send failed: ") + ucs_status_string(st));
  }
  ucp_request_free(req);
  return st == UCS_OK;
}

std::optional<pb::Envelope> RawUcxClient::next_frame(pb::FrameKind kind, std::chrono::milliseconds timeout) {
  const auto give_up = Clock::now() + timeout;
  // What arrived before the connection failed is still read (a refusal, then the close).
  while ((ok() || !messages_.empty()) && Clock::now() < give_up) {
    if (messages_.empty()) {
      ucp_worker_progress(worker_);
      continue;
    }
    pb::Envelope env;
    const bool parsed = env.ParseFromString(messages_.front().first);
    messages_.pop_front();
    if (!parsed) {
      fail("the server sent a header that is not an apiary.pb.Envelope");
      return std::nullopt;
    }
    if (env.kind() == kind) return env;
    if (env.kind() == pb::KEEPALIVE) {
      pb::Envelope ack;
      ack.set_kind(pb::KEEPALIVE_ACK);
      send(0, ack.SerializeAsString(), {}, timeout);  // sends outside UCX callbacks only
    }
  }
  return std::nullopt;
}

std::optional<std::pair<std::string, std::string>> RawUcxClient::next_message(std::chrono::milliseconds timeout) {
  const auto give_up = Clock::now() + timeout;
  while (ok() && messages_.empty() && Clock::now() < give_up) ucp_worker_progress(worker_);  // then what arrived
  if (messages_.empty()) return std::nullopt;
  auto m = std::move(messages_.front());
  messages_.pop_front();
  return m;
}

bool RawUcxClient::linger(std::chrono::milliseconds timeout) {
  const auto give_up = Clock::now() + timeout;
  while (ok() && Clock::now() < give_up) ucp_worker_progress(worker_);
  return ok();
}

ucs_status_t RawUcxClient::on_frame(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                    const ucp_am_recv_param_t* param) {
  // Eager data is kept; returning UCS_OK releases rendezvous data unread.
  const bool eager = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0;
  static_cast<RawUcxClient*>(arg)->messages_.emplace_back(
      std::string(static_cast<const char*>(header), header_length),
      eager && length > 0 ? std::string(static_cast<const char*>(data), length) : std::string{});
  return UCS_OK;
}

ucs_status_t RawUcxClient::on_stray(void* arg, const void*, size_t, void*, size_t, const ucp_am_recv_param_t*) {
  ++static_cast<RawUcxClient*>(arg)->stray_;
  return UCS_OK;
}

void RawUcxClient::on_error(void* arg, ucp_ep_h, ucs_status_t status) {
  static_cast<RawUcxClient*>(arg)->fail(std::string("the connection failed: ") + ucs_status_string(status));
}

}  // namespace apiary::testing
