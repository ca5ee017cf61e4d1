// ResourceSpec: devices named as AutoDist names them, replicas and reduction devices,
// defaults, and every rule of reference §4.1 / checklist item 2 as a clear error.
#include <catch2/catch.hpp>

#include "core/strategy/resource_spec.hpp"
#include "support.hpp"

namespace {

using namespace apiary::core::strategy;
using strategy_test::spec_error;
using strategy_test::spec_from;
using Catch::Matchers::Contains;
using Strings = std::vector<std::string>;

}  // namespace

TEST_CASE("resource spec: the two-node example") {
  const ResourceSpec spec = strategy_test::golden_spec();
  CHECK(spec.chief() == "192.168.0.1");
  CHECK(spec.cpu_devices() == Strings{"192.168.0.1:CPU:0", "192.168.0.2:CPU:0"});
  CHECK(spec.gpu_devices() ==
        Strings{"192.168.0.1:GPU:0", "192.168.0.1:GPU:1", "192.168.0.2:GPU:0", "192.168.0.2:GPU:1"});
  CHECK(spec.replicas() == spec.gpu_devices());
  REQUIRE(spec.nodes().size() == 2);
  CHECK(spec.nodes()[0].network_bandwidth_gbps == 25);
  CHECK(spec.nodes()[1].network_bandwidth_gbps == 1);  // the default
  REQUIRE(spec.ssh_configs().size() == 1);
  const SshConfig& ssh = spec.ssh_configs()[0];
  CHECK(ssh.name == "conf");
  CHECK(ssh.username == "ubuntu");
  CHECK(ssh.port == 22);
  CHECK(ssh.python_venv == "source /venv/bin/activate");
  CHECK(ssh.shared_envs == std::vector<std::pair<std::string, std::string>>{{"LD_LIBRARY_PATH", "/usr/local/cuda/lib64"}});
  CHECK(spec.has_device("192.168.0.2:GPU:1"));
  CHECK_FALSE(spec.has_device("192.168.0.2:GPU:2"));
}

TEST_CASE("resource spec: a single node is the chief without saying so") {
  const ResourceSpec spec = spec_from(strategy_test::example("resource_spec_single.yml"));
  CHECK(spec.chief() == "localhost");
  CHECK(spec.replicas() == Strings{"localhost:GPU:0", "localhost:GPU:1"});
  CHECK(spec.cpu_devices() == Strings{"localhost:CPU:0"});
}

TEST_CASE("resource spec: extra CPUs count only on nodes without GPUs") {
  const ResourceSpec spec = spec_from(
      "nodes:\n"
      "  - address: 10.0.0.1\n"
      "    gpus: [1, 0]\n"
      "    cpus: [0, 1]\n"
      "    chief: true\n"
      "  - address: 10.0.0.2\n"
      "    cpus: [2, 0, 1]\n"
      "    ssh_config: c\n"
      "ssh:\n"
      "  c: {username: u}\n");
  CHECK(spec.cpu_devices() == Strings{"10.0.0.1:CPU:0", "10.0.0.2:CPU:0", "10.0.0.2:CPU:1", "10.0.0.2:CPU:2"});
  CHECK(spec.replicas() == Strings{"10.0.0.1:GPU:0", "10.0.0.1:GPU:1", "10.0.0.2:CPU:0", "10.0.0.2:CPU:1",
                                   "10.0.0.2:CPU:2"});
}

TEST_CASE("resource spec: invalid clusters are rejected with the rule they break") {
  const std::string two_nodes_tail = "ssh:\n  c: {}\n";
  CHECK_THAT(spec_error("nodes:\n  - address: localhost\n    chief: true\n  - address: 10.0.0.2\n    ssh_config: c\n" +
                        two_nodes_tail),
             Contains("loopback address localhost cannot be used with 2 nodes"));
  CHECK_THAT(spec_error("nodes:\n  - address: 10.0.0.1\n    chief: true\n  - address: 10.0.0.2\n" + two_nodes_tail),
             Contains("nodes[1] (10.0.0.2) is not the chief and has no \"ssh_config\""));
  CHECK_THAT(spec_error("nodes:\n  - address: 10.0.0.1\n    ssh_config: c\n  - address: 10.0.0.2\n    ssh_config: c\n" +
                        two_nodes_tail),
             Contains("exactly one node with \"chief: true\", got 0"));
  CHECK_THAT(spec_error("nodes:\n  - address: 10.0.0.1\n    chief: true\n  - address: 10.0.0.2\n    chief: true\n"),
             Contains("got 2"));
  CHECK_THAT(spec_error("nodes:\n  - address: 10.0.0.1\n    chief: true\n  - address: 10.0.0.1\n    ssh_config: c\n" +
                        two_nodes_tail),
             Contains("appears twice"));
  CHECK_THAT(spec_error("nodes:\n  - address: 10.0.0.1\n    chief: true\n  - address: 10.0.0.2\n    ssh_config: d\n" +
                        two_nodes_tail),
             Contains("\"d\", which the \"ssh\" section does not define"));
  CHECK_THAT(spec_error("nodes:\n  - address: 10.0.0.1\n    gpus: [0, 0]\n"), Contains("lists the id 0 twice"));
  CHECK_THAT(spec_error("nodes:\n  - address: 10.0.0.1\n    gpus: [-1]\n"),
             Contains("spec.yml:3:12: nodes[0].gpus[0]: expected an integer"));
  CHECK_THAT(spec_error("nodes:\n  - address: 10.0.0.1\n    gpu: [0]\n"),
             Contains("spec.yml:3:10: nodes[0]: unknown field \"gpu\""));
  CHECK_THAT(spec_error("nodes:\n  - address: 10.0.0.1\n    network_bandwidth: 0\n"),
             Contains("nodes[0].network_bandwidth: expected a positive number"));
  CHECK_THAT(spec_error("nodes:\n  - address: 10.0.0.1\n    network_bandwidth: fast\n"),
             Contains("expected a finite number"));
  CHECK_THAT(spec_error("nodes:\n  - address: 10.0.0.1\n    chief: maybe\n"), Contains("expected true or false"));
  CHECK_THAT(spec_error("nodes:\n  - gpus: [0]\n"), Contains("missing the field \"address\""));
  CHECK_THAT(spec_error("nodes: []\n"), Contains("at least one node"));
  CHECK_THAT(spec_error("hosts: []\n"), Contains("unknown field \"hosts\""));
  CHECK_THAT(spec_error("nodes:\n  - address: 10.0.0.1\nssh:\n  c: {port: 70000}\n"), Contains("ssh.c.port"));
  CHECK_THAT(spec_error(""), Contains("expected a map"));
}

TEST_CASE("device names round-trip") {
  for (const std::string name : {"0.0.0.0:CPU:0", "localhost:GPU:2", "fe80::1:GPU:3", "10.0.0.1:CPU:12"}) {
    auto d = parse_device_name(name);
    INFO(name);
    REQUIRE(d.ok());
    CHECK(d->to_string() == name);
  }
  auto ipv6 = parse_device_name("fe80::1:GPU:3");
  CHECK(ipv6->host == "fe80::1");
  CHECK(ipv6->type == DeviceType::gpu);
  CHECK(ipv6->index == 3);
  for (const std::string bad : {"", "host", "host:GPU", ":GPU:0", "host:TPU:0", "host:GPU:x", "host:GPU:", "a b:CPU:0"}) {
    INFO(bad);
    CHECK_FALSE(parse_device_name(bad).ok());
  }
  CHECK(is_loopback_address("127.0.0.1"));
  CHECK(is_loopback_address("127.1.2.3"));
  CHECK(is_loopback_address("::1"));
  CHECK_FALSE(is_loopback_address("10.0.0.1"));
  CHECK_FALSE(is_loopback_address("127.example.com"));
}
