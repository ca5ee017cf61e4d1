// Which lanes a UCX context may use: the listen interface, the RDMA ports behind it
// (found in a sysfs tree made here), and the transports of each mode.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "transport/ucx/context.hpp"

namespace apiary::transport::ucx {
namespace {

namespace fs = std::filesystem;

/// A sysfs tree in a fresh directory, removed at the end.
struct FakeSysfs {
  fs::path root = fs::temp_directory_path() / ("apiary_sysfs_" + std::to_string(::getpid()));
  FakeSysfs() { fs::create_directories(root); }
  ~FakeSysfs() { fs::remove_all(root); }
  void write(const fs::path& relative, const std::string& text) const {
    fs::create_directories((root / relative).parent_path());
    std::ofstream(root / relative) << text << "\n";
  }
};

TEST_CASE("a machine without RDMA keeps its lanes on the interface", "[transport][lanes]") {
  FakeSysfs sys;
  sys.write("class/net/eth0/dev_port", "0");
  CHECK(rdma_ports_of("eth0", sys.root.string()).empty());
  const auto tcp = lanes_of(Mode::tcp, "eth0", {});
  CHECK(tcp.net_devices == "eth0");
  CHECK(tcp.tls == "tcp");
  CHECK(lanes_of(Mode::shm, "lo", {}).tls == "tcp,sm,self");
  // This machine: loopback has no RDMA port.
  CHECK(rdma_ports_of("lo").empty());
}

TEST_CASE("RoCE ports whose GIDs name the interface, and an IPoIB interface's port, are its RDMA lanes",
          "[transport][lanes]") {
  FakeSysfs sys;
  sys.write("class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0", "eth0");
  sys.write("class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/1", "eth0");
  sys.write("class/infiniband/mlx5_1/ports/1/gid_attrs/ndevs/0", "eth1");
  sys.write("class/infiniband/mlx5_2/ports/1/gid_attrs/ndevs/0", "");
  fs::create_directories(sys.root / "class/net/ib0/device/infiniband/mlx5_2");
  sys.write("class/net/ib0/dev_port", "0");
  fs::create_directories(sys.root / "class/net/ib1/device/infiniband/mlx5_3");
  sys.write("class/net/ib1/dev_port", "1");
  CHECK(rdma_ports_of("eth0", sys.root.string()) == std::vector<std::string>{"mlx5_0:1"});
  CHECK(rdma_ports_of("eth1", sys.root.string()) == std::vector<std::string>{"mlx5_1:1"});
  CHECK(rdma_ports_of("ib0", sys.root.string()) == std::vector<std::string>{"mlx5_2:1"});
  CHECK(rdma_ports_of("ib1", sys.root.string()) == std::vector<std::string>{"mlx5_3:2"});
  CHECK(rdma_ports_of("eth2", sys.root.string()).empty());
  const auto lanes = lanes_of(Mode::tcp, "eth0", rdma_ports_of("eth0", sys.root.string()));
  CHECK(lanes.net_devices == "eth0,mlx5_0:1");
  CHECK(lanes.tls == "tcp,rc,ud,dc");
  CHECK(lanes_of(Mode::shm, "eth0", {"mlx5_0:1"}).tls == "tcp,sm,self,rc,ud,dc");
}

}  // namespace
}  // namespace apiary::transport::ucx
