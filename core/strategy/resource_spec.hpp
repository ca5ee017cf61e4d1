#pragma once
/// ResourceSpec: the cluster a strategy is built for, read from a YAML file shaped like
/// AutoDist's `resource_spec.yml` (reference §4.1):
///
///   nodes:
///     - address: 10.0.0.1      # required
///       gpus: [0, 1]           # optional CUDA ids
///       cpus: [0, 1]           # optional; ids other than 0 count only on a node without GPUs
///       chief: true            # exactly one node (implicit for a single node)
///       network_bandwidth: 25  # optional, Gbit/s, default 1
///     - address: 10.0.0.2
///       gpus: [0, 1]
///       ssh_config: conf       # required on every non-chief node; names an entry of ssh:
///   ssh:
///     conf: {username: ubuntu, port: 22, key_file: /home/u/.ssh/id_rsa,
///            python_venv: 'source /venv/bin/activate', shared_envs: {KEY: value}}
///
/// Devices are named as AutoDist names them: "<address>:CPU:<i>", "<address>:GPU:<i>".
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "messages/result.hpp"

namespace apiary::core::strategy {

/// Kind of a device.
enum class DeviceType { cpu, gpu };

/// A device name, "<host>:<CPU|GPU>:<index>".
struct DeviceName {
  /// Host address (IPv4, IPv6 or host name; never empty, no blanks).
  std::string host;
  /// CPU or GPU.
  DeviceType type = DeviceType::cpu;
  /// Device index on the host (>= 0).
  std::int64_t index = 0;

  /// "10.0.0.1:GPU:0".
  [[nodiscard]] std::string to_string() const;
};

/// Parses "<host>:<CPU|GPU>:<index>" (the host may itself hold ':' as in IPv6).
/// Errors: invalid_argument naming what was expected.
[[nodiscard]] Result<DeviceName> parse_device_name(std::string_view name);

/// How to reach a non-chief node (used by launchers; builders ignore it).
struct SshConfig {
  std::string name;           ///< the key under ssh:
  std::string username;       ///< remote user; empty = the launcher's default
  std::int64_t port = 22;     ///< TCP port, 1..65535
  std::string key_file;       ///< private key path; empty = the agent's keys
  std::string python_venv;    ///< command prepended to remote commands
  std::vector<std::pair<std::string, std::string>> shared_envs;  ///< exported remotely, in file order
};

/// One node of the cluster as written in the file.
struct NodeSpec {
  std::string address;               ///< host address
  std::vector<std::int64_t> gpus;    ///< GPU ids, ascending, unique
  std::vector<std::int64_t> cpus;    ///< CPU ids as written, ascending, unique (CPU:0 always exists)
  bool chief = false;                ///< the node that builds the strategy and coordinates
  double network_bandwidth_gbps = 1; ///< Gbit/s (> 0); only cost models use it
  std::string ssh_config;            ///< key of the SSH entry; empty on the chief
};

/// A validated cluster description.
class ResourceSpec {
 public:
  /// Validates and builds: at least one node; addresses unique and not loopback when
  /// there are several nodes; exactly one chief (a single node is chief by default);
  /// ssh_config on every non-chief naming an entry of `ssh`; device ids >= 0 and
  /// unique; bandwidth > 0 and finite; ports in 1..65535. Errors: invalid_argument.
  [[nodiscard]] static Result<ResourceSpec> make(std::vector<NodeSpec> nodes, std::vector<SshConfig> ssh);

  /// The nodes in file order (the chief flag resolved).
  [[nodiscard]] const std::vector<NodeSpec>& nodes() const { return nodes_; }
  /// The SSH entries in file order.
  [[nodiscard]] const std::vector<SshConfig>& ssh_configs() const { return ssh_; }
  /// The chief's address.
  [[nodiscard]] const std::string& chief() const;
  /// Every CPU device: per node in file order, CPU:0 then (GPU-less nodes only) the
  /// other listed CPU ids ascending. These are the candidate parameter servers.
  [[nodiscard]] std::vector<std::string> cpu_devices() const;
  /// Every GPU device: per node in file order, ids ascending.
  [[nodiscard]] std::vector<std::string> gpu_devices() const;
  /// The data-parallel replicas: every GPU device, then the CPU devices of every node
  /// without GPUs (AutoDist's builders' rule).
  [[nodiscard]] std::vector<std::string> replicas() const;
  /// Whether `device` (a device name) is one of this cluster's devices.
  [[nodiscard]] bool has_device(std::string_view device) const;

 private:
  std::vector<NodeSpec> nodes_;
  std::vector<SshConfig> ssh_;
  std::size_t chief_ = 0;
};

/// Parses the YAML file text. Errors (malformed or invalid_argument) name `source`, the
/// line and column, and the field ("nodes[1].gpus[0]").
[[nodiscard]] Result<ResourceSpec> parse_resource_spec(std::string_view text, std::string_view source);

/// Whether `address` is a loopback address written literally: "localhost", 127.0.0.0/8,
/// "::1" (names are not resolved).
[[nodiscard]] bool is_loopback_address(std::string_view address);

}  // namespace apiary::core::strategy
