#include "core/strategy/resource_spec.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace apiary::core::strategy {

std::string DeviceName::to_string() const {
  return fmt::format("{}:{}:{}", host, type == DeviceType::gpu ? "GPU" : "CPU", index);
}

Result<DeviceName> parse_device_name(std::string_view name) {
  auto bad = [&](std::string_view why) {
    return make_error(errc::invalid_argument,
                      "device name \"{}\": {}; expected \"<host>:CPU:<index>\" or \"<host>:GPU:<index>\", e.g. "
                      "\"10.0.0.1:GPU:0\"", std::string(name), why);
  };
  const std::size_t last = name.rfind(':');
  if (last == std::string_view::npos || last == 0) return bad("no ':' separators");
  const std::size_t middle = name.rfind(':', last - 1);
  if (middle == std::string_view::npos || middle == 0) return bad("missing the host or the device type");
  DeviceName out;
  out.host = std::string(name.substr(0, middle));
  const std::string_view type = name.substr(middle + 1, last - middle - 1);
  const std::string_view index = name.substr(last + 1);
  if (out.host.find_first_of(" \t\n") != std::string::npos) return bad("the host holds blanks");
  if (type == "CPU") {
    out.type = DeviceType::cpu;
  } else if (type == "GPU") {
    out.type = DeviceType::gpu;
  } else {
    return bad(fmt::format("unknown device type \"{}\"", type));
  }
  if (index.empty() || index.size() > 9 || index.find_first_not_of("0123456789") != std::string_view::npos) {
    return bad("the index is not a number");
  }
  out.index = std::stoll(std::string(index));
  return out;
}

bool is_loopback_address(std::string_view address) {
  if (address == "localhost" || address == "::1" || address == "[::1]") return true;
  if (address.substr(0, 4) != "127.") return false;
  int dots = 0;
  for (char c : address) {
    if (c == '.') ++dots;
    else if (c < '0' || c > '9') return false;
  }
  return dots == 3;
}

Result<ResourceSpec> ResourceSpec::make(std::vector<NodeSpec> nodes, std::vector<SshConfig> ssh) {
  if (nodes.empty()) {
    return make_error(errc::invalid_argument, "resource spec: expected at least one node under \"nodes\", got none");
  }
  std::set<std::string> ssh_names;
  for (const auto& s : ssh) {
    if (!ssh_names.insert(s.name).second) {
      return make_error(errc::invalid_argument, "resource spec: ssh entry \"{}\" is defined twice; keep one", s.name);
    }
    if (s.port < 1 || s.port > 65535) {
      return make_error(errc::invalid_argument, "resource spec: ssh.{}.port is {}; expected 1..65535", s.name, s.port);
    }
  }
  ResourceSpec spec;
  std::set<std::string> addresses;
  std::size_t chiefs = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    NodeSpec& n = nodes[i];
    if (n.address.empty() || n.address.find_first_of(" \t\n") != std::string::npos) {
      return make_error(errc::invalid_argument, "resource spec: nodes[{}].address \"{}\" is not an address; expected an "
                        "IPv4/IPv6 address or a host name", i, n.address);
    }
    if (!addresses.insert(n.address).second) {
      return make_error(errc::invalid_argument, "resource spec: nodes[{}]: the address {} appears twice; list each node "
                        "once with all its devices", i, n.address);
    }
    if (nodes.size() > 1 && is_loopback_address(n.address)) {
      return make_error(errc::invalid_argument, "resource spec: nodes[{}]: the loopback address {} cannot be used with "
                        "{} nodes; give every node an address the others can reach", i, n.address, nodes.size());
    }
    for (auto* ids : {&n.gpus, &n.cpus}) {
      const char* what = ids == &n.gpus ? "gpus" : "cpus";
      std::sort(ids->begin(), ids->end());
      if (!ids->empty() && ids->front() < 0) {
        return make_error(errc::invalid_argument, "resource spec: nodes[{}].{} holds {}; expected device ids >= 0", i, what,
                          ids->front());
      }
      if (std::adjacent_find(ids->begin(), ids->end()) != ids->end()) {
        return make_error(errc::invalid_argument, "resource spec: nodes[{}].{} lists the id {} twice; list each device "
                          "once", i, what, *std::adjacent_find(ids->begin(), ids->end()));
      }
    }
    if (!std::isfinite(n.network_bandwidth_gbps) || n.network_bandwidth_gbps <= 0) {
      return make_error(errc::invalid_argument, "resource spec: nodes[{}].network_bandwidth is {}; expected a positive "
                        "number of Gbit/s (default 1)", i, n.network_bandwidth_gbps);
    }
    if (nodes.size() == 1) n.chief = true;
    if (n.chief) {
      ++chiefs;
      spec.chief_ = i;
    }
  }
  if (chiefs != 1) {
    return make_error(errc::invalid_argument,
                      "resource spec: expected exactly one node with \"chief: true\", got {}; mark the node that "
                      "builds the strategy and coordinates the others", chiefs);
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const NodeSpec& n = nodes[i];
    if (!n.chief && n.ssh_config.empty()) {
      return make_error(errc::invalid_argument, "resource spec: nodes[{}] ({}) is not the chief and has no "
                        "\"ssh_config\"; name an entry of the \"ssh\" section for it", i, n.address);
    }
    if (!n.ssh_config.empty() && ssh_names.count(n.ssh_config) == 0) {
      return make_error(errc::invalid_argument, "resource spec: nodes[{}].ssh_config is \"{}\", which the \"ssh\" section "
                        "does not define; add it there or fix the name", i, n.ssh_config);
    }
  }
  spec.nodes_ = std::move(nodes);
  spec.ssh_ = std::move(ssh);
  return spec;
}

const std::string& ResourceSpec::chief() const { return nodes_[chief_].address; }

std::vector<std::string> ResourceSpec::cpu_devices() const {
  std::vector<std::string> out;
  for (const auto& n : nodes_) {
    out.push_back(DeviceName{n.address, DeviceType::cpu, 0}.to_string());
    if (!n.gpus.empty()) continue;  // extra CPUs count only on GPU-less nodes
    for (auto id : n.cpus) {
      if (id != 0) out.push_back(DeviceName{n.address, DeviceType::cpu, id}.to_string());
    }
  }
  return out;
}

std::vector<std::string> ResourceSpec::gpu_devices() const {
  std::vector<std::string> out;
  for (const auto& n : nodes_) {
    for (auto id : n.gpus) out.push_back(DeviceName{n.address, DeviceType::gpu, id}.to_string());
  }
  return out;
}

std::vector<std::string> ResourceSpec::replicas() const {
  std::vector<std::string> out = gpu_devices();
  for (const auto& cpu : cpu_devices()) {
    auto parsed = parse_device_name(cpu);
    for (const auto& n : nodes_) {
      if (n.address == parsed->host && n.gpus.empty()) out.push_back(cpu);
    }
  }
  return out;
}

bool ResourceSpec::has_device(std::string_view device) const {
  for (const auto& d : cpu_devices()) {
    if (d == device) return true;
  }
  for (const auto& d : gpu_devices()) {
    if (d == device) return true;
  }
  return false;
}

}  // namespace apiary::core::strategy
