#include "bench/ucx_pingpong_peer.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace apiary::bench::pingpong {
namespace {

Peer* as_peer(void* arg) { return static_cast<Peer*>(arg); }

ucp_ep_h reply_ep_of(const ucp_am_recv_param_t* param) {
  return (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0 ? param->reply_ep : nullptr;
}

ucs_status_t on_ping(void* arg, const void*, size_t, void*, size_t length,
                     const ucp_am_recv_param_t* param) {
  Peer* p = as_peer(arg);
  ucp_ep_h ep = reply_ep_of(param);
  if (ep == nullptr) {
    ++p->unexpected_am;  // sent without the reply flag: nobody to answer
    return UCS_OK;
  }
  const std::size_t n = std::min(length, p->reply_buf.size());
  p->send(ep, am::pong, nullptr, 0, p->reply_buf.data(), n, 0);
  return UCS_OK;
}

ucs_status_t on_pong(void* arg, const void*, size_t, void*, size_t, const ucp_am_recv_param_t*) {
  ++as_peer(arg)->pongs;
  return UCS_OK;
}

ucs_status_t on_data(void* arg, const void*, size_t, void* data, size_t length,
                     const ucp_am_recv_param_t* param) {
  Peer* p = as_peer(arg);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    p->rndv.emplace_back(data, length);  // fetched by service(), outside the callback
    return UCS_INPROGRESS;
  }
  ++p->data_done;  // eager: the bytes are already here and are not needed
  return UCS_OK;
}

ucs_status_t on_fin(void* arg, const void* header, size_t header_len, void*, size_t,
                    const ucp_am_recv_param_t* param) {
  Peer* p = as_peer(arg);
  if (header_len != sizeof(std::uint64_t) || reply_ep_of(param) == nullptr) {
    ++p->unexpected_am;
    return UCS_OK;
  }
  std::memcpy(&p->fin_total, header, sizeof(std::uint64_t));
  p->fin_ep = reply_ep_of(param);
  return UCS_OK;
}

ucs_status_t on_ack(void* arg, const void*, size_t, void*, size_t, const ucp_am_recv_param_t*) {
  ++as_peer(arg)->acks;
  return UCS_OK;
}

ucs_status_t on_quit(void* arg, const void*, size_t, void*, size_t,
                     const ucp_am_recv_param_t* param) {
  Peer* p = as_peer(arg);
  if (ucp_ep_h ep = reply_ep_of(param)) p->send(ep, am::bye, nullptr, 0, nullptr, 0, 0);
  p->quit_seen = true;
  return UCS_OK;
}

ucs_status_t on_bye(void* arg, const void*, size_t, void*, size_t, const ucp_am_recv_param_t*) {
  ++as_peer(arg)->byes;
  return UCS_OK;
}

ucs_status_t on_unused_id(void* arg, const void*, size_t, void*, size_t,
                          const ucp_am_recv_param_t*) {
  ++as_peer(arg)->unexpected_am;  // UCS_OK also releases a rendezvous message unfetched
  return UCS_OK;
}

constexpr ucp_am_recv_callback_t handlers[am::count] = {on_ping, on_pong, on_data, on_fin,
                                                        on_ack,  on_quit, on_bye};

void send_done(void* request, ucs_status_t status, void* user) {
  Peer* p = as_peer(user);
  --p->inflight;
  if (status != UCS_OK && !p->failed) {
    p->failed = true;
    p->fail_status = status;
  }
  ucp_request_free(request);
}

void recv_done(void* request, ucs_status_t status, size_t, void* user) {
  Peer* p = as_peer(user);
  --p->rx_inflight;
  if (status == UCS_OK) {
    ++p->data_done;
  } else if (!p->failed) {
    p->failed = true;
    p->fail_status = status;
  }
  ucp_request_free(request);
}

void on_conn(ucp_conn_request_h request, void* arg) {
  as_peer(arg)->conn_request = request;  // accepted by service(), outside the callback
}

void on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
  Peer* p = as_peer(arg);
  p->failed = true;
  p->fail_status = status;
}

bool check(ucs_status_t status, const char* call) {
  if (status == UCS_OK) return true;
  fmt::print(stderr, "error: {} failed: {}; check `ucx_info -d` lists tcp on lo\n", call,
             ucs_status_string(status));
  return false;
}

bool ipv4(const std::string& host, int port, sockaddr_in& out) {
  out = sockaddr_in{};
  out.sin_family = AF_INET;
  out.sin_port = htons(static_cast<std::uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &out.sin_addr) == 1) return true;
  fmt::print(stderr, "error: expected an IPv4 address such as 127.0.0.1, got '{}'\n", host);
  return false;
}

}  // namespace

void report_wait_failure(const char* what, bool failed, ucs_status_t status) {
  if (failed)
    fmt::print(stderr, "error: endpoint failed while waiting for {}: {}; the peer died or "
               "refused the connection\n", what, ucs_status_string(status));
  else
    fmt::print(stderr, "error: no {} before the deadline; the peer is stuck or gone "
               "(raise --timeout if the machine is loaded)\n", what);
}

Peer::~Peer() {
  if (listener_ != nullptr) ucp_listener_destroy(listener_);
  if (worker_ != nullptr) ucp_worker_destroy(worker_);  // also releases a leftover endpoint
  if (epfd_ >= 0) ::close(epfd_);
  if (ctx_ != nullptr) ucp_cleanup(ctx_);
}

bool Peer::open(const Options& o) {
  busy_ = o.busy;
  // shm: sockaddr needs the tcp connection manager, so tcp stays listed; with err mode
  // NONE UCX then picks sysv (AM) and cma (rendezvous) lanes between two local processes.
  const bool shm = o.tls == "shm";
  err_mode_ = shm ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
  ucp_config_t* config = nullptr;
  if (!check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read")) return false;
  bool ok = check(ucp_config_modify(config, "TLS", shm ? "tcp,sm,self" : "tcp"), "TLS");
  if (ok && std::getenv("UCX_NET_DEVICES") == nullptr)
    ok = check(ucp_config_modify(config, "NET_DEVICES", "lo"), "NET_DEVICES");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | (busy_ ? 0 : UCP_FEATURE_WAKEUP);
  if (ok) ok = check(ucp_init(&params, config, &ctx_), "ucp_init");
  ucp_config_release(config);
  if (!ok) return false;

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  if (!check(ucp_worker_create(ctx_, &wp, &worker_), "ucp_worker_create")) return false;
  if (!busy_) {
    int efd = -1;
    if (!check(ucp_worker_get_efd(worker_, &efd), "ucp_worker_get_efd")) return false;
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    if (epfd_ < 0 || epoll_ctl(epfd_, EPOLL_CTL_ADD, efd, &ev) != 0) {
      fmt::print(stderr, "error: epoll on the worker event fd: {}\n", std::strerror(errno));
      return false;
    }
  }
  return register_handlers();
}

bool Peer::register_handlers() {
  // Every id, ascending: UCX 1.13 reads its handler table before range-checking the id
  // and leaves new slots uninitialised when the table grows.
  for (unsigned id = 0; id <= 0xFFFF; ++id) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = id;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.cb = id < am::count ? handlers[id] : on_unused_id;
    hp.arg = this;
    if (!check(ucp_worker_set_am_recv_handler(worker_, &hp), "ucp_worker_set_am_recv_handler"))
      return false;
  }
  return true;
}

bool Peer::listen(int port, int& bound) {
  sockaddr_in sa{};
  if (!ipv4("127.0.0.1", port, sa)) return false;
  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
  lp.sockaddr.addrlen = sizeof sa;
  lp.conn_handler.cb = on_conn;
  lp.conn_handler.arg = this;
  if (!check(ucp_listener_create(worker_, &lp, &listener_), "ucp_listener_create")) return false;
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  if (!check(ucp_listener_query(listener_, &attr), "ucp_listener_query")) return false;
  bound = ntohs(reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port);
  return true;
}

bool Peer::connect(const std::string& host, int port) {
  sockaddr_in sa{};
  if (!ipv4(host, port, sa)) return false;
  ucp_ep_params_t ep_params{};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                         UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep_params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep_params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
  ep_params.sockaddr.addrlen = sizeof sa;
  ep_params.err_handler.cb = on_ep_error;
  ep_params.err_handler.arg = this;
  ep_params.err_mode = err_mode_;
  return check(ucp_ep_create(worker_, &ep_params, &ep), "ucp_ep_create (client)");
}

bool Peer::send(ucp_ep_h to, unsigned id, const void* header, std::size_t header_len,
                const void* payload, std::size_t len, std::uint32_t flags) {
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                    UCP_OP_ATTR_FIELD_FLAGS;
  rp.cb.send = send_done;
  rp.user_data = this;
  rp.flags = UCP_AM_SEND_FLAG_REPLY | flags;  // the receiver always learns the sender
  void* r = ucp_am_send_nbx(to, id, header, header_len, payload, len, &rp);
  if (r == nullptr) return true;  // completed at once; the callback will not run
  if (UCS_PTR_IS_ERR(r)) {
    failed = true;
    fail_status = UCS_PTR_STATUS(r);
    fmt::print(stderr, "error: ucp_am_send_nbx(id {}) failed: {}\n", id,
               ucs_status_string(fail_status));
    return false;
  }
  ++inflight;
  return true;
}

bool Peer::service() {
  if (conn_request != nullptr) {
    ucp_ep_params_t ep_params{};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                           UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep_params.conn_request = conn_request;
    ep_params.err_handler.cb = on_ep_error;
    ep_params.err_handler.arg = this;
    ep_params.err_mode = err_mode_;
    conn_request = nullptr;
    if (ep != nullptr) {
      fmt::print(stderr, "warning: a second client was refused; this server serves one\n");
      ucp_listener_reject(listener_, ep_params.conn_request);
    } else if (!check(ucp_ep_create(worker_, &ep_params, &ep), "ucp_ep_create (server)")) {
      return false;
    }
  }
  std::size_t posted = 0;
  for (; posted < rndv.size(); ++posted) {
    const auto [desc, len] = rndv[posted];
    if (rx_buf_.size() < len) {
      if (rx_inflight > 0) break;  // grow only when no fetch is writing into it
      rx_buf_.resize(len);         // zero-filled: its pages are resident before timing
    }
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rp.cb.recv_am = recv_done;
    rp.user_data = this;
    void* r = ucp_am_recv_data_nbx(worker_, desc, rx_buf_.data(), len, &rp);
    if (r == nullptr) {
      ++data_done;
    } else if (UCS_PTR_IS_ERR(r)) {
      fmt::print(stderr, "error: ucp_am_recv_data_nbx failed: {}\n",
                 ucs_status_string(UCS_PTR_STATUS(r)));
      return false;
    } else {
      ++rx_inflight;
    }
  }
  rndv.erase(rndv.begin(), rndv.begin() + static_cast<std::ptrdiff_t>(posted));
  if (fin_ep != nullptr && data_done >= fin_total) {
    ucp_ep_h to = fin_ep;
    fin_ep = nullptr;
    if (!send(to, am::ack, nullptr, 0, nullptr, 0, 0)) return false;
  }
  return true;
}

bool Peer::wait_event(Clock::time_point deadline) {
  const ucs_status_t status = ucp_worker_arm(worker_);
  if (status == UCS_ERR_BUSY) return true;  // events arrived meanwhile: progress again
  if (!check(status, "ucp_worker_arm")) return false;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() < 0) return false;
  epoll_event ev{};
  const int timeout_ms = static_cast<int>(std::min<long long>(left.count() + 1, 1000));
  if (epoll_wait(epfd_, &ev, 1, timeout_ms) < 0 && errno != EINTR) {
    fmt::print(stderr, "error: epoll_wait: {}\n", std::strerror(errno));
    return false;
  }
  return true;
}

void Peer::close_ep(Clock::time_point deadline) {
  if (ep == nullptr) return;
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  // A failed endpoint (the peer is gone) is force-closed; a live one is flushed first.
  rp.flags = failed ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  void* r = ucp_ep_close_nbx(ep, &rp);
  ep = nullptr;
  if (r == nullptr || UCS_PTR_IS_ERR(r)) return;
  while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < deadline) {
    if (ucp_worker_progress(worker_) == 0) ::usleep(20);
  }
  if (ucp_request_check_status(r) != UCS_INPROGRESS) ucp_request_free(r);
}

}  // namespace apiary::bench::pingpong
