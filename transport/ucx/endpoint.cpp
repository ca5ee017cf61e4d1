#include "transport/ucx/endpoint.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "transport/ucx/context.hpp"
#include "transport/ucx/worker.hpp"

namespace apiary::transport::ucx {
namespace {

ucp_err_handling_mode_t err_mode(Mode mode) {
  // Shared-memory lanes exist only without UCX's peer-failure handling (UCX 1.13);
  // apiary's keepalives and deadlines detect dead peers in that mode.
  return mode == Mode::tcp ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
}

}  // namespace

Result<ucp_ep_h> connect_endpoint(ucp_worker_h worker, const std::string& host, std::uint16_t port,
                                  Mode mode, ucp_err_handler_cb_t err_cb, void* arg) {
  sockaddr_storage ss{};
  auto len = make_sockaddr(host, port, &ss);
  if (!len) return len.error();
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                 UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&ss);
  p.sockaddr.addrlen = static_cast<socklen_t>(*len);
  p.err_mode = err_mode(mode);
  p.err_handler.cb = err_cb;
  p.err_handler.arg = arg;
  ucp_ep_h ep = nullptr;
  ucs_status_t st = ucp_ep_create(worker, &p, &ep);
  if (st != UCS_OK) {
    return make_error(errc::unavailable, "cannot connect to {}:{}: {}", host, port, ucs_status_string(st));
  }
  return ep;
}

Result<ucp_ep_h> accept_endpoint(ucp_worker_h worker, ucp_conn_request_h request, Mode mode,
                                 ucp_err_handler_cb_t err_cb, void* arg) {
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                 UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  p.conn_request = request;
  p.err_mode = err_mode(mode);
  p.err_handler.cb = err_cb;
  p.err_handler.arg = arg;
  ucp_ep_h ep = nullptr;
  ucs_status_t st = ucp_ep_create(worker, &p, &ep);
  if (st != UCS_OK) return ucx_error(errc::unavailable, "accepting a connection", st);
  return ep;
}

void* close_endpoint(ucp_ep_h ep, bool force) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  void* req = ucp_ep_close_nbx(ep, &p);
  if (UCS_PTR_IS_ERR(req)) return nullptr;
  return req;
}

void release_completed(std::vector<void*>& requests) {
  requests.erase(std::remove_if(requests.begin(), requests.end(),
                                [](void* r) {
                                  if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
                                  ucp_request_free(r);
                                  return true;
                                }),
                 requests.end());
}

std::string describe_endpoint(ucp_ep_h ep) {
  char* text = nullptr;
  std::size_t size = 0;
  FILE* mem = open_memstream(&text, &size);
  if (mem == nullptr) return {};
  ucp_ep_print_info(ep, mem);
  std::fclose(mem);
  std::string out(text, size);
  std::free(text);
  return out;
}

}  // namespace apiary::transport::ucx
