// apiary::ExpertServer's checkpoints over UCX in one process: a trained expert saved
// when its server stops comes back bit for bit in a new server (started from other
// initial parameters), a checkpoint of another expert stops the start with the file's
// name, and the built-in det_dropout and nop_delay experts serve through RemoteExpert.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "api/expert_files.hpp"
#include "api/expert_server.hpp"
#include "api/remote_expert.hpp"
#include "api/runtime.hpp"
#include "core/rng.hpp"
#include "tests/support/test_system.hpp"

using namespace apiary;
using namespace std::chrono_literals;

namespace {

constexpr std::uint32_t k_hidden = 8;

struct Runtimes {
  testing::TestSystem t;
  std::unique_ptr<Runtime> server_rt;
  std::unique_ptr<Runtime> client_rt;
  Runtimes() {
    RuntimeOptions o;
    o.system = &t.sys;
    server_rt = std::move(Runtime::start(o).value());
    client_rt = std::move(Runtime::start(o).value());
  }
  ~Runtimes() {
    client_rt->stop();
    server_rt->stop();
  }
};

/// A fresh folder under the system's temporary directory, removed at the end.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("apiary-ckpt-" + std::to_string(core::Rng(std::random_device{}()).next_u64()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

/// The address clients call `server` at.
core::PeerAddr addr(const ExpertServer& server) { return core::PeerAddr::parse(server.address()).value(); }

ExpertTensor rows(std::uint32_t n, std::uint64_t seed) {
  core::Rng rng(seed);
  ExpertTensor t;
  t.shape = {n, k_hidden};
  for (std::uint32_t i = 0; i < n * k_hidden; ++i) t.values.push_back(static_cast<float>(rng.uniform01() - 0.5));
  return t;
}

ExpertServerOptions options(const std::string& dir, std::uint64_t seed) {
  ExpertServerOptions o;
  o.expert_cls = "ffn";
  o.hidden_dim = k_hidden;
  o.expert_uids = {"ffn.0", "ffn.1"};
  o.seed = seed;
  o.learning_rate = 0.5f;
  o.checkpoint_dir = dir;
  return o;
}

std::vector<float> forward_values(RemoteExpert& expert, const ExpertTensor& x) {
  auto y = expert.forward({x});
  if (!y) FAIL(y.error().message);
  return y->front().values;
}

}  // namespace

TEST_CASE("a checkpoint restores a trained expert bit for bit", "[actor][moe]") {
  Runtimes r;
  TempDir dir;
  const auto x = rows(3, 1);
  std::vector<float> trained;
  {
    auto server = ExpertServer::start(*r.server_rt, options(dir.path.string(), 1));
    REQUIRE(server.ok());
    RemoteExpert expert(*r.client_rt, "ffn.1", addr(**server), 10s);
    const auto before = forward_values(expert, x);
    REQUIRE(expert.backward({x}, {rows(3, 2)}).ok());
    trained = forward_values(expert, x);
    REQUIRE(trained != before);
    (*server)->stop();
    CHECK((*server)->counters().checkpoints == 1);
  }
  REQUIRE(std::filesystem::exists(checkpoint_path(dir.path.string(), "ffn.1")));
  auto restored = ExpertServer::start(*r.server_rt, options(dir.path.string(), 99));
  REQUIRE(restored.ok());
  RemoteExpert expert(*r.client_rt, "ffn.1", addr(**restored), 10s);
  CHECK(forward_values(expert, x) == trained);
  REQUIRE((*restored)->checkpoint().ok());
  (*restored)->stop();
}

TEST_CASE("a checkpoint of another expert stops the start naming the file", "[actor][moe]") {
  Runtimes r;
  TempDir dir;
  const auto path = checkpoint_path(dir.path.string(), "ffn.0");
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << "not a checkpoint";
  auto server = ExpertServer::start(*r.server_rt, options(dir.path.string(), 1));
  REQUIRE_FALSE(server.ok());
  CHECK(server.error().code == errc::malformed);
  CHECK(server.error().message.find(path) != std::string::npos);
}

TEST_CASE("det_dropout and nop_delay experts serve through RemoteExpert", "[actor][moe]") {
  Runtimes r;
  ExpertServerOptions o;
  o.expert_cls = "det_dropout";
  o.hidden_dim = k_hidden;
  o.expert_uids = {"drop.0"};
  auto dropout = ExpertServer::start(*r.server_rt, o);
  REQUIRE(dropout.ok());
  RemoteExpert expert(*r.client_rt, "drop.0", addr(**dropout), 10s);
  const auto x = rows(2, 3);
  std::vector<std::int64_t> keep(2 * k_hidden, 1);
  keep[0] = 0;
  std::vector<messages::Tensor> inputs;
  inputs.push_back(messages::Tensor::copy_of(messages::dtype::float32, x.shape, x.values.data(), x.values.size() * 4).value());
  inputs.push_back(messages::Tensor::copy_of(messages::dtype::int64, x.shape, keep.data(), keep.size() * 8).value());
  auto first = expert.forward_tensors(inputs);
  auto again = expert.forward_tensors(inputs);
  REQUIRE(first.ok());
  REQUIRE(again.ok());
  CHECK(first->front().data<float>()[0] == 0.0f);
  CHECK(std::equal(first->front().data<float>(), first->front().data<float>() + 2 * k_hidden,
                   again->front().data<float>()));
  (*dropout)->stop();

  o.expert_cls = "nop_delay";
  o.expert_uids = {"slow.0"};
  o.nop_delay = 1s;
  auto slow = ExpertServer::start(*r.server_rt, o);
  REQUIRE(slow.ok());
  RemoteExpert patient(*r.client_rt, "slow.0", addr(**slow), 10s);
  auto echoed = patient.forward({x});  // also connects the client to the server
  if (!echoed) FAIL(echoed.error().message);  // not lost on its way to the stopped det_dropout server
  CHECK(echoed->front().values == x.values);
  RemoteExpert impatient(*r.client_rt, "slow.0", addr(**slow), 300ms);
  auto late = impatient.forward({x});
  REQUIRE_FALSE(late.ok());
  CHECK(late.error().code == errc::deadline_exceeded);
  (*slow)->stop();
}
