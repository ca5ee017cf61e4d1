// apiary::ExpertServer and apiary::RemoteExpert over UCX in one process: forward and
// backward through the server equal the ffn expert called directly, info round trips,
// unknown uids, stopped and dead servers give clear errors in time, experts declared in
// a DHT are found by get_experts, and bad options are refused naming the option.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>

#include "api/dht.hpp"
#include "api/expert_server.hpp"
#include "api/expert_server_args.hpp"
#include "api/remote_expert.hpp"
#include "api/runtime.hpp"
#include "core/moe/expert_backend.hpp"
#include "core/rng.hpp"
#include "tests/actors/dht_peers.hpp"
#include "tests/actors/expert_pair.hpp"
#include "tests/support/test_system.hpp"

using namespace apiary;
using namespace std::chrono_literals;
namespace moe = apiary::core::moe;

namespace {

constexpr std::uint32_t k_hidden = 16;


ExpertServerOptions ffn_options(std::vector<std::string> uids, std::uint64_t seed = 7) {
  return testing::ffn_options(std::move(uids), seed, k_hidden);
}

ExpertTensor random_rows(std::uint32_t rows, std::uint64_t seed) {
  core::Rng rng(seed);
  ExpertTensor t;
  t.shape = {rows, k_hidden};
  for (std::uint32_t i = 0; i < rows * k_hidden; ++i) {
    t.values.push_back(static_cast<float>(rng.next_u64() % 2001) / 1000.0f - 1.0f);
  }
  return t;
}

moe::Tensor tensor_of(const ExpertTensor& t) {
  auto made = moe::Tensor::copy_of(messages::dtype::float32, t.shape, t.values.data(), t.values.size() * 4);
  REQUIRE(made.ok());
  return *made;
}

/// Every value of `got` is within 1e-5 of `want`'s, shapes equal.
void check_close(const ExpertTensor& got, const moe::Tensor& want) {
  REQUIRE(got.shape == want.shape());
  REQUIRE(got.values.size() == want.numel());
  const float* w = want.data<float>();
  for (std::size_t i = 0; i < got.values.size(); ++i) CHECK(std::abs(got.values[i] - w[i]) <= 1e-5f);
}

moe::FfnExpert reference(std::uint64_t seed) {
  moe::FfnConfig c;
  c.hidden_dim = k_hidden;
  c.seed = seed;
  return moe::FfnExpert(c);
}

}  // namespace

TEST_CASE("a remote expert's forward equals the ffn expert called directly", "[actor][moe]") {
  testing::ExpertPair p;
  auto server = ExpertServer::start(*p.server_rt, ffn_options({"ffn.0.0", "ffn.0.1"}));
  REQUIRE(server.ok());
  CHECK((*server)->uids() == std::vector<std::string>{"ffn.0.0", "ffn.0.1"});
  RemoteExpert remote(*p.client_rt, "ffn.0.1", p.server_addr(), 10s);
  auto local = reference(8);  // the second expert: seed + 1
  for (std::uint32_t rows : {1u, 3u}) {
    const auto x = random_rows(rows, rows);
    auto got = remote.forward({x});
    REQUIRE(got.ok());
    REQUIRE(got->size() == 1);
    auto want = local.forward({tensor_of(x)});
    REQUIRE(want.ok());
    check_close(got->front(), want->front());
  }
  CHECK((*server)->counters().server.batches >= 2);
}

TEST_CASE("a remote backward steps the expert on the server", "[actor][moe]") {
  testing::ExpertPair p;
  auto server = ExpertServer::start(*p.server_rt, ffn_options({"ffn.3"}));
  REQUIRE(server.ok());
  RemoteExpert remote(*p.client_rt, "ffn.3", p.server_addr(), 10s);
  auto local = reference(7);
  const auto x = random_rows(4, 11);
  const auto g = random_rows(4, 12);
  auto before = remote.forward({x});
  REQUIRE(before.ok());

  auto grads = remote.backward({x}, {g});
  REQUIRE(grads.ok());
  REQUIRE(grads->size() == 1);
  auto want = local.backward({tensor_of(x)}, {tensor_of(g)});
  REQUIRE(want.ok());
  check_close(grads->front(), want->front());

  // Both took the same SGD step: the server's outputs moved as the reference's did.
  auto after = remote.forward({x});
  REQUIRE(after.ok());
  auto want_after = local.forward({tensor_of(x)});
  REQUIRE(want_after.ok());
  check_close(after->front(), want_after->front());
  CHECK(after->front().values != before->front().values);
}

TEST_CASE("a remote expert's info is the expert's schema", "[actor][moe]") {
  testing::ExpertPair p;
  auto server = ExpertServer::start(*p.server_rt, ffn_options({"ffn.0"}));
  REQUIRE(server.ok());
  RemoteExpert remote(*p.client_rt, "ffn.0", p.server_addr(), 10s);
  auto info = remote.info();
  REQUIRE(info.ok());
  CHECK(*info == reference(0).info());
  CHECK(info->forward_inputs().front().instance_shape == messages::Shape{k_hidden});
}

TEST_CASE("an unknown uid or a wrong shape is a clear error and the server carries on", "[actor][moe]") {
  testing::ExpertPair p;
  auto server = ExpertServer::start(*p.server_rt, ffn_options({"ffn.0"}));
  REQUIRE(server.ok());
  RemoteExpert unknown(*p.client_rt, "ffn.9", p.server_addr(), 10s);
  auto got = unknown.forward({random_rows(2, 1)});
  REQUIRE(!got.ok());
  CHECK(got.error().code == errc::not_found);
  CHECK(got.error().message.find("ffn.9") != std::string::npos);

  RemoteExpert known(*p.client_rt, "ffn.0", p.server_addr(), 10s);
  ExpertTensor wide;
  wide.shape = {2, k_hidden + 1};
  wide.values.assign(2 * (k_hidden + 1), 0.5f);
  auto refused = known.forward({wide});
  REQUIRE(!refused.ok());
  CHECK(refused.error().message.find(std::to_string(k_hidden + 1)) != std::string::npos);
  ExpertTensor short_values;
  short_values.shape = {2, k_hidden};
  short_values.values.assign(3, 0.5f);
  auto bad = known.forward({short_values});
  REQUIRE(!bad.ok());
  CHECK(bad.error().code == errc::invalid_argument);

  auto fine = known.forward({random_rows(2, 1)});
  CHECK(fine.ok());
}

TEST_CASE("calls to a stopped server or a server gone fail in time", "[actor][moe]") {
  testing::ExpertPair p;
  auto server = ExpertServer::start(*p.server_rt, ffn_options({"ffn.0"}));
  REQUIRE(server.ok());
  RemoteExpert remote(*p.client_rt, "ffn.0", p.server_addr(), 3s);
  REQUIRE(remote.forward({random_rows(1, 1)}).ok());
  (*server)->stop();
  (*server)->stop();  // idempotent
  const auto t0 = std::chrono::steady_clock::now();
  auto stopped = remote.forward({random_rows(1, 1)});
  REQUIRE(!stopped.ok());
  CHECK(stopped.error().message.find("ffn.0") != std::string::npos);
  INFO(stopped.error().what());
  CHECK(std::chrono::steady_clock::now() - t0 < 6s);

  // The whole server process gone: its runtime stopped.
  auto again = ExpertServer::start(*p.server_rt, ffn_options({"ffn.1"}));
  REQUIRE(again.ok());
  p.server_rt->stop();
  RemoteExpert gone(*p.client_rt, "ffn.1", p.server_addr(), 3s);
  const auto t1 = std::chrono::steady_clock::now();
  auto dead = gone.forward({random_rows(1, 1)});
  REQUIRE(!dead.ok());
  INFO(dead.error().what());
  CHECK(std::chrono::steady_clock::now() - t1 < 6s);
}

TEST_CASE("experts declared in a DHT are found by get_experts and answer", "[actor][moe]") {
  testing::DhtPeers peers;
  Dht& server_dht = peers.add();
  Dht& client_dht = peers.add();
  ExpertServerOptions o;
  o.expert_cls = "nop";
  o.hidden_dim = k_hidden;
  o.expert_pattern = "expert.[0:4].[0:4]";
  o.num_experts = 5;
  o.update_period = 0.3;
  auto server = ExpertServer::start(server_dht.runtime(), o, &server_dht);
  REQUIRE(server.ok());
  const auto uids = (*server)->uids();
  REQUIRE(uids.size() == 5);

  std::map<std::string, core::PeerAddr> found;
  for (int i = 0; i < 50 && found.size() < uids.size(); ++i) {
    auto got = get_experts(client_dht, uids, 5s);
    REQUIRE(got.ok());
    found = *got;
    if (found.size() < uids.size()) std::this_thread::sleep_for(100ms);
  }
  REQUIRE(found.size() == uids.size());
  for (const auto& [uid, addr] : found) CHECK(addr.multiaddr() == (*server)->address());
  auto missing = get_experts(client_dht, {"expert.9.9"}, 5s);
  REQUIRE(missing.ok());
  CHECK(missing->empty());

  RemoteExpert remote(client_dht.runtime(), uids.front(), found.at(uids.front()), 10s);
  const auto x = random_rows(2, 5);
  auto y = remote.forward({x});
  REQUIRE(y.ok());
  CHECK(y->front().values == x.values);  // nop

  // Re-declared every update_period.
  for (int i = 0; i < 50 && (*server)->counters().declarations < 2; ++i) std::this_thread::sleep_for(100ms);
  CHECK((*server)->counters().declarations >= 2);

  // A second server on the same pattern draws none of the uids taken already.
  auto second = ExpertServer::start(client_dht.runtime(), o, &client_dht);
  REQUIRE(second.ok());
  for (const auto& uid : (*second)->uids()) CHECK(std::find(uids.begin(), uids.end(), uid) == uids.end());
}

TEST_CASE("bad expert server options are refused naming the option", "[actor][moe]") {
  testing::ExpertPair p;
  auto refused = [&](ExpertServerOptions o, const std::string& needle) {
    auto s = ExpertServer::start(*p.server_rt, o);
    REQUIRE(!s.ok());
    CHECK(s.error().code == errc::invalid_argument);
    INFO(s.error().message);
    CHECK(s.error().message.find(needle) != std::string::npos);
  };
  auto o = ffn_options({"ffn.0"});
  o.expert_cls = "transformerx";
  refused(o, "--expert-cls");
  o = ffn_options({"ffn.0"});
  o.hidden_dim = 0;
  refused(o, "--hidden-dim");
  refused(ffn_options({"ffn"}), "'ffn'");
  refused(ffn_options({"ffn.1", "ffn.1"}), "twice");
  o = ffn_options({"ffn.0"});
  o.expert_pattern = "ffn.[0:4]";
  refused(o, "not both");
  o = ffn_options({});
  refused(o, "--num-experts");
  o.num_experts = 3;
  o.expert_pattern = "ffn.[4:2]";
  refused(o, "--expert-pattern");
  o.expert_pattern = "ffn.[0:2]";
  refused(o, "--expert-pattern");  // 2 uids, 3 wanted
  o = ffn_options({"ffn.0"});
  o.min_batch_size = 10;
  o.max_batch_size = 5;
  refused(o, "--max-batch-size");
  o = ffn_options({"ffn.0"});
  o.update_period = 0;
  refused(o, "--update-period");
}

TEST_CASE("an expert server process prints its address and throughput until told to stop", "[actor][moe]") {
  auto command = parse_expert_server_args({"--expert-cls", "nop", "--hidden-dim", "16", "--num-experts", "2",
                                           "--expert-pattern", "e.[0:3]", "--stats-every", "0.05"});
  REQUIRE(command.ok());
  std::mutex mutex;
  std::vector<std::string> lines;
  auto print = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex);
    lines.push_back(line);
  };
  auto ran = run_expert_server(*command, print, [] {
    std::this_thread::sleep_for(300ms);
    return std::string("the test");
  });
  REQUIRE(ran.ok());
  REQUIRE(lines.size() >= 4);
  CHECK(lines[0].rfind("serving /ip4/127.0.0.1/tcp/", 0) == 0);
  CHECK(lines[1].rfind("experts e.", 0) == 0);
  CHECK(lines[2].rfind("stats rows/s", 0) == 0);
  CHECK(lines.back() == "stopping on the test");
}
