// An expert server in a child process over UCX on loopback: a RemoteExpert's forward
// equals the ffn expert called here, and once the process is killed a call fails with
// an error in time instead of waiting.
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <string>

#include "api/remote_expert.hpp"
#include "api/runtime.hpp"
#include "core/moe/expert_backend.hpp"
#include "tests/support/process.hpp"

using namespace apiary;
using namespace std::chrono_literals;

TEST_CASE("a remote expert calls an expert server process and fails in time once it is killed",
          "[integration][moe]") {
  testing::Process child({testing::sibling_executable("expert_server_process"), "ffn.0", "ffn.1"});
  auto line = child.read_line(20s);
  REQUIRE(line.has_value());
  REQUIRE(line->rfind("serving ", 0) == 0);
  auto server = core::PeerAddr::parse(line->substr(8));
  REQUIRE(server.ok());
  CHECK(server->host() == "127.0.0.1");

  auto runtime = Runtime::start(RuntimeOptions{});
  REQUIRE(runtime.ok());
  RemoteExpert remote(**runtime, "ffn.1", *server, 5s);
  ExpertTensor x;
  x.shape = {2, 16};
  for (int i = 0; i < 32; ++i) x.values.push_back(static_cast<float>(i % 7) / 7.0f - 0.4f);
  auto got = remote.forward({x});
  REQUIRE(got.ok());

  core::moe::FfnConfig config;
  config.hidden_dim = 16;
  config.seed = 8;  // the process's second expert
  core::moe::FfnExpert local(config);
  auto input = messages::Tensor::copy_of(messages::dtype::float32, x.shape, x.values.data(), x.values.size() * 4);
  REQUIRE(input.ok());
  auto want = local.forward({*input});
  REQUIRE(want.ok());
  REQUIRE(got->front().values.size() == want->front().numel());
  const float* w = want->front().data<float>();
  for (std::size_t i = 0; i < got->front().values.size(); ++i) CHECK(std::abs(got->front().values[i] - w[i]) <= 1e-5f);

  child.kill(SIGKILL);
  child.wait(10s);
  const auto t0 = std::chrono::steady_clock::now();
  auto dead = remote.forward({x});
  REQUIRE(!dead.ok());
  INFO(dead.error().what());
  CHECK(dead.error().message.find("ffn.1") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 8s);
  (*runtime)->stop();
}

TEST_CASE("apiary experts serves its experts until SIGTERM and refuses a bad flag", "[integration][moe]") {
  testing::Process child({testing::sibling_executable("apiary"), "experts", "--expert-uids", "ffn.0", "--hidden-dim",
                          "16", "--seed", "7", "--stats-every", "0", "--listen", "/ip4/127.0.0.1/tcp/0"});
  auto line = child.read_line(20s);
  REQUIRE(line.has_value());
  REQUIRE(line->rfind("serving ", 0) == 0);
  auto server = core::PeerAddr::parse(line->substr(8));
  REQUIRE(server.ok());
  CHECK(child.read_line(5s) == std::optional<std::string>("experts ffn.0"));
  auto runtime = Runtime::start(RuntimeOptions{});
  REQUIRE(runtime.ok());
  RemoteExpert remote(**runtime, "ffn.0", *server, 5s);
  auto info = remote.info();
  REQUIRE(info.ok());
  CHECK(info->forward_inputs().front().instance_shape == messages::Shape{16});
  child.kill(SIGTERM);
  CHECK(child.read_line(10s) == std::optional<std::string>("stopping on SIGTERM"));
  CHECK(child.wait(10s) == 0);
  (*runtime)->stop();

  testing::Process bad({testing::sibling_executable("apiary"), "experts", "--hidden-dim", "wide"});
  CHECK(bad.wait(10s) == 2);
}
