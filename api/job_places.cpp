#include "api/job_places.hpp"

#include <netdb.h>
#include <sys/socket.h>

#include <charconv>
#include <cstring>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "core/ps/plan.hpp"
#include "core/strategy/resource_spec.hpp"
#include "messages/identity/multiaddr.hpp"

namespace apiary {

namespace cs = core::strategy;

std::string JobPlace::listen() const {
  return host.find(':') == std::string::npos ? fmt::format("{}:{}", host, port) : fmt::format("[{}]:{}", host, port);
}

std::vector<std::string> JobPlaces::peers(const std::optional<std::string>& replica_prefix) const {
  std::vector<std::string> out;
  std::map<std::string, std::string> proxies;  // node -> its first replica's address
  for (const auto& p : places) {
    if (p.role == "ps") {
      out.push_back(p.device + "=" + p.listen());
    } else {
      if (!ps_devices.empty()) proxies.emplace(p.node, p.listen());
      if (replica_prefix) out.push_back(*replica_prefix + p.device + "=" + p.listen());
    }
  }
  for (const auto& [node, address] : proxies) out.push_back("proxy:" + node + "=" + address);
  return out;
}

Result<std::string> listen_host_of(const std::string& device) {
  auto name = cs::parse_device_name(device);
  if (!name) return name.error();
  if (cs::is_loopback_address(name->host)) return std::string("127.0.0.1");
  if (messages::Multiaddr::from_ip(name->host, 0)) return name->host;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(name->host.c_str(), nullptr, &hints, &found); rc != 0) {
    return make_error(errc::invalid_argument, "device {}: its host '{}' does not resolve: {}", device, name->host,
                      ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> hold(found, ::freeaddrinfo);
  std::string v6;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[NI_MAXHOST];
    if (::getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST) != 0) continue;
    if (a->ai_family == AF_INET) return std::string(text);
    if (a->ai_family == AF_INET6 && v6.empty()) v6 = text;
  }
  if (v6.empty()) return make_error(errc::invalid_argument, "device {}: its host '{}' has no address", device, name->host);
  return v6;
}

Result<JobPlaces> job_places(const pb::autodist::Strategy& strategy, bool ps_processes, std::uint32_t first_port) {
  JobPlaces out;
  const auto& replicas = strategy.graph_config().replicas();
  if (replicas.empty()) return make_error(errc::invalid_argument, "strategy {}: it has no replicas", strategy.id());
  out.replicas = static_cast<std::size_t>(replicas.size());
  out.ps_devices = core::ps::ps_devices(strategy);
  const auto place = [&](const std::string& device, const char* role, std::int32_t replica) -> Status {
    JobPlace p;
    p.rank = static_cast<std::int32_t>(out.places.size());
    p.role = role;
    p.device = device;
    p.replica = replica;
    auto name = cs::parse_device_name(device);
    if (!name) return name.error();
    p.node = name->host;
    auto host = listen_host_of(device);
    if (!host) return host.error();
    p.host = std::move(*host);
    const std::uint32_t port = first_port + static_cast<std::uint32_t>(p.rank);
    if (first_port == 0 || port > 65535) {
      return make_error(errc::invalid_argument,
                        "rank {} ({} {}) would listen at port {}: expected the job's first port in 1..{}", p.rank,
                        role, device, first_port == 0 ? 0 : port, 65536 - out.replicas - out.ps_devices.size());
    }
    p.port = static_cast<std::uint16_t>(port);
    out.places.push_back(std::move(p));
    return ok_status();
  };
  for (int r = 0; r < replicas.size(); ++r) {
    if (auto st = place(replicas[r], r == 0 ? "chief" : "worker", r); !st) return st.error();
  }
  if (ps_processes) {
    for (const auto& device : out.ps_devices) {
      if (auto st = place(device, "ps", -1); !st) return st.error();
    }
  }
  return out;
}

namespace {

/// `name`'s value as a number in [low, high]; nullopt when unset or empty.
Result<std::optional<std::int64_t>> number(const EnvLookup& env, const char* name, std::int64_t low,
                                           std::int64_t high) {
  const char* text = env(name);
  if (text == nullptr || *text == '\0') return std::optional<std::int64_t>{};
  std::int64_t value = 0;
  const char* end = text + std::strlen(text);
  auto [ptr, ec] = std::from_chars(text, end, value);
  if (ec != std::errc{} || ptr != end || value < low || value > high) {
    return make_error(errc::invalid_argument, "{}: expected a whole number in {}..{}, got '{}'", name, low, high,
                      text);
  }
  return std::optional<std::int64_t>(value);
}

}  // namespace

Result<std::optional<LauncherRank>> launcher_rank(const EnvLookup& env) {
  static constexpr std::pair<const char*, const char*> k_variables[] = {{"RANK", "WORLD_SIZE"},
                                                                       {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                                                       {"SLURM_PROCID", "SLURM_NTASKS"},
                                                                       {"PMI_RANK", "PMI_SIZE"}};
  for (const auto& [rank_name, size_name] : k_variables) {
    auto rank = number(env, rank_name, 0, 1 << 20);
    if (!rank) return rank.error();
    if (!*rank) continue;
    auto size = number(env, size_name, 1, 1 << 20);
    if (!size) return size.error();
    LauncherRank out;
    out.rank = static_cast<std::int32_t>(**rank);
    out.source = rank_name;
    if (*size) {
      if (**size <= **rank) {
        return make_error(errc::invalid_argument, "{}={} is not below {}={}", rank_name, **rank, size_name, **size);
      }
      out.world_size = static_cast<std::int32_t>(**size);
    }
    return std::optional<LauncherRank>(out);
  }
  return std::optional<LauncherRank>{};
}

Result<std::uint32_t> job_port(const EnvLookup& env) {
  auto port = number(env, "APIARY_PORT", 1, 65535);
  if (!port) return port.error();
  if (*port) return static_cast<std::uint32_t>(**port);
  auto master = number(env, "MASTER_PORT", 1, 65534);
  if (!master) return master.error();
  if (*master) return static_cast<std::uint32_t>(**master + 1);
  return 15000U;
}

}  // namespace apiary
