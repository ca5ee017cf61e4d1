#include "transport/ucx/context.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <cstring>
#include <memory>
#include <mutex>

namespace apiary::transport::ucx {

Error ucx_error(errc code, const char* what, ucs_status_t status) {
  return make_error(code, "ucx: {} failed: {}", what, ucs_status_string(status));
}

Result<std::string> interface_of(const std::string& host) {
  in6_addr want6{};
  in_addr want4{};
  const bool is4 = inet_pton(AF_INET, host.c_str(), &want4) == 1;
  const bool is6 = !is4 && inet_pton(AF_INET6, host.c_str(), &want6) == 1;
  if (!is4 && !is6) {
    return make_error(errc::invalid_argument,
                      "listen host '{}' is not an IPv4 or IPv6 address; use e.g. 127.0.0.1", host);
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return make_error(errc::io, "getifaddrs failed: {}", std::strerror(errno));
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> guard(list, freeifaddrs);
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    if (is4 && it->ifa_addr->sa_family == AF_INET) {
      auto* sin = reinterpret_cast<sockaddr_in*>(it->ifa_addr);
      if (sin->sin_addr.s_addr == want4.s_addr) return std::string(it->ifa_name);
    }
    if (is6 && it->ifa_addr->sa_family == AF_INET6) {
      auto* sin6 = reinterpret_cast<sockaddr_in6*>(it->ifa_addr);
      if (std::memcmp(&sin6->sin6_addr, &want6, sizeof want6) == 0) return std::string(it->ifa_name);
    }
  }
  // 127.0.0.0/8 addresses other than 127.0.0.1 belong to lo without being listed.
  if (is4 && (ntohl(want4.s_addr) >> 24) == 127) return std::string("lo");
  return make_error(errc::invalid_argument,
                    "no network interface owns {}; listen on an address of this host", host);
}

namespace {

/// The first line of a small file; empty when unreadable.
std::string first_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

std::vector<std::string> rdma_ports_of(const std::string& iface, const std::string& sysfs) {
  namespace fs = std::filesystem;
  std::set<std::string> out;
  std::error_code ec;
  // RoCE: a port's GID table names the network interface of each GID.
  const fs::path ib = fs::path(sysfs) / "class" / "infiniband";
  for (const auto& dev : fs::directory_iterator(ib, ec)) {
    for (const auto& port : fs::directory_iterator(dev.path() / "ports", ec)) {
      for (const auto& ndev : fs::directory_iterator(port.path() / "gid_attrs" / "ndevs", ec)) {
        if (first_line(ndev.path()) == iface) {
          out.insert(dev.path().filename().string() + ":" + port.path().filename().string());
          break;
        }
      }
    }
  }
  // IPoIB: the interface's own device is an RDMA device.
  const fs::path net = fs::path(sysfs) / "class" / "net" / iface / "device";
  for (const auto& dev : fs::directory_iterator(net / "infiniband", ec)) {
    const std::string dev_port = first_line(fs::path(sysfs) / "class" / "net" / iface / "dev_port");
    int port = 1;
    if (!dev_port.empty() && dev_port.find_first_not_of("0123456789") == std::string::npos) {
      port = std::stoi(dev_port) + 1;
    }
    out.insert(dev.path().filename().string() + ":" + std::to_string(port));
  }
  return {out.begin(), out.end()};
}

Lanes lanes_of(Mode mode, const std::string& net_device, const std::vector<std::string>& rdma_ports) {
  Lanes l;
  l.net_devices = net_device;
  for (const auto& p : rdma_ports) l.net_devices += "," + p;
  // tcp: network lanes only (PEER error mode). shm: shared memory for same-host peers;
  // the sockaddr connection manager still needs tcp in the list.
  l.tls = mode == Mode::tcp ? "tcp" : "tcp,sm,self";
  if (!rdma_ports.empty()) l.tls += ",rc,ud,dc";
  return l;
}

Result<Context> Context::create(Mode mode, const std::string& net_device) {
  // A listener may take its port again while the connections it accepted linger in
  // TIME-WAIT (a job restarted on its fixed ports), unless the environment says
  // otherwise. UCX 1.13 reads its connection manager's settings from the environment
  // only (ucp_config_modify does not reach them); set once, before the first context.
  static std::once_flag reuse_addr;
  std::call_once(reuse_addr, [] { (void)setenv("UCX_TCP_CM_REUSEADDR", "y", 0); });
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return ucx_error(errc::internal, "ucp_config_read", st);
  std::unique_ptr<ucp_config_t, void (*)(ucp_config_t*)> guard(config, ucp_config_release);

  // Keep every lane on the listen address's interface (e.g. lo) and the RDMA ports
  // behind it, unless overridden.
  const Lanes lanes = lanes_of(mode, net_device, rdma_ports_of(net_device));
  if (std::getenv("UCX_NET_DEVICES") == nullptr) {
    st = ucp_config_modify(config, "NET_DEVICES", lanes.net_devices.c_str());
    if (st != UCS_OK) return ucx_error(errc::internal, "setting NET_DEVICES", st);
  }
  // Endpoints are named on the wire by indirect ids, whatever the error mode. With direct
  // ids (UCX's choice for error mode NONE, i.e. shared-memory lanes) an active message
  // that arrives for an endpoint this process already closed (a peer's keepalive while the
  // transport shuts down) names freed memory, and UCX 1.13 asserts when that memory is
  // now another worker's endpoint (`(*ep_p)->worker == worker`, in a process that runs
  // several transports, such as a replica that serves PS devices). An indirect id that is
  // gone only drops the message.
  if (std::getenv("UCX_PROTO_INDIRECT_ID") == nullptr) {
    st = ucp_config_modify(config, "PROTO_INDIRECT_ID", "on");
    if (st != UCS_OK) return ucx_error(errc::internal, "setting PROTO_INDIRECT_ID", st);
  }
  st = ucp_config_modify(config, "TLS", lanes.tls.c_str());
  if (st != UCS_OK) return ucx_error(errc::internal, "setting TLS", st);

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  ucp_context_h ctx = nullptr;
  st = ucp_init(&params, config, &ctx);
  if (st != UCS_OK) return ucx_error(errc::unavailable, "ucp_init", st);
  return Context(ctx);
}

Context::~Context() {
  if (ctx_ != nullptr) ucp_cleanup(ctx_);
}

}  // namespace apiary::transport::ucx
