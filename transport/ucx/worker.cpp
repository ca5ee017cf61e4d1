#include "transport/ucx/worker.hpp"

#include "messages/identity/multiaddr.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "transport/ucx/context.hpp"

namespace apiary::transport::ucx {

Result<Worker> Worker::create(ucp_context_h ctx) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h w = nullptr;
  ucs_status_t st = ucp_worker_create(ctx, &params, &w);
  if (st != UCS_OK) return ucx_error(errc::unavailable, "ucp_worker_create", st);
  int efd = -1;
  st = ucp_worker_get_efd(w, &efd);
  if (st != UCS_OK) {
    ucp_worker_destroy(w);
    return ucx_error(errc::internal, "ucp_worker_get_efd", st);
  }
  int epfd = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = efd;
  if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, efd, &ev) != 0) {
    const int err = errno;
    if (epfd >= 0) close(epfd);
    ucp_worker_destroy(w);
    return make_error(errc::io, "epoll setup for the UCX event fd failed: {}", std::strerror(err));
  }
  return Worker(w, epfd);
}

Worker::Worker(Worker&& o) noexcept : worker_(o.worker_), epfd_(o.epfd_) {
  o.worker_ = nullptr;
  o.epfd_ = -1;
}

Worker::~Worker() {
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (epfd_ >= 0) close(epfd_);
}

Status Worker::register_handlers(ucp_am_recv_callback_t frame_cb, ucp_am_recv_callback_t stray_cb,
                                 void* arg) {
  for (unsigned id = 0; id < k_am_id_count; ++id) {
    ucp_am_handler_param_t p{};
    p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                   UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    p.id = id;
    p.flags = UCP_AM_FLAG_WHOLE_MSG;
    p.cb = id == k_frame_am_id ? frame_cb : stray_cb;
    p.arg = arg;
    ucs_status_t st = ucp_worker_set_am_recv_handler(worker_, &p);
    if (st != UCS_OK) return ucx_error(errc::internal, "ucp_worker_set_am_recv_handler", st);
  }
  return ok_status();
}

std::size_t Worker::max_am_header() const {
  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
  if (ucp_worker_query(worker_, &attr) != UCS_OK) return 0;
  return attr.max_am_header;
}

void Worker::wait(int timeout_ms) {
  if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) return;  // events pending: do not sleep
  epoll_event ev{};
  (void)epoll_wait(epfd_, &ev, 1, timeout_ms);
}

void Worker::signal() { (void)ucp_worker_signal(worker_); }

Result<std::size_t> make_sockaddr(const std::string& host, std::uint16_t port, void* storage) {
  auto* s4 = static_cast<sockaddr_in*>(storage);
  auto* s6 = static_cast<sockaddr_in6*>(storage);
  std::memset(storage, 0, sizeof(sockaddr_storage));
  if (inet_pton(AF_INET, host.c_str(), &s4->sin_addr) == 1) {
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
    return sizeof(sockaddr_in);
  }
  if (inet_pton(AF_INET6, host.c_str(), &s6->sin6_addr) == 1) {
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(port);
    return sizeof(sockaddr_in6);
  }
  return make_error(errc::invalid_argument, "'{}' is not an IPv4 or IPv6 address", host);
}

Result<std::pair<std::string, std::uint16_t>> split_host_port(const std::string& key) {
  auto m = messages::Multiaddr::from_host_port(key, "peer");
  if (!m) return m.error();
  if (m->port == 0) return make_error(errc::invalid_argument, "peer '{}' has a bad port", key);
  return std::make_pair(m->host, m->port);
}

Result<Listener> Listener::create(ucp_worker_h worker, const std::string& host, std::uint16_t port,
                                  ucp_listener_conn_callback_t on_conn, void* arg) {
  sockaddr_storage ss{};
  auto len = make_sockaddr(host, port, &ss);
  if (!len) return len.error();
  ucp_listener_params_t p{};
  p.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&ss);
  p.sockaddr.addrlen = static_cast<socklen_t>(*len);
  p.conn_handler.cb = on_conn;
  p.conn_handler.arg = arg;
  ucp_listener_h l = nullptr;
  ucs_status_t st = ucp_listener_create(worker, &p, &l);
  if (st != UCS_OK) {
    return make_error(errc::unavailable, "cannot listen on {}:{}: {} (is the port in use?)", host,
                      port, ucs_status_string(st));
  }
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  st = ucp_listener_query(l, &attr);
  if (st != UCS_OK) {
    ucp_listener_destroy(l);
    return ucx_error(errc::internal, "ucp_listener_query", st);
  }
  std::uint16_t bound_port = 0;
  if (attr.sockaddr.ss_family == AF_INET) {
    bound_port = ntohs(reinterpret_cast<sockaddr_in*>(&attr.sockaddr)->sin_port);
  } else {
    bound_port = ntohs(reinterpret_cast<sockaddr_in6*>(&attr.sockaddr)->sin6_port);
  }
  const bool v6 = host.find(':') != std::string::npos;
  return Listener(l, v6 ? fmt::format("[{}]:{}", host, bound_port) : fmt::format("{}:{}", host, bound_port));
}

Listener::~Listener() {
  if (listener_ != nullptr) ucp_listener_destroy(listener_);
}

}  // namespace apiary::transport::ucx
