// call_many_forward / call_many_backward against expert servers on UCX in one process
// (hivemind's test_call_many): outputs and input gradients equal each expert called
// alone, the mask says who answered (unknown uids, stopped servers), fewer than k_min
// answers is a clear error, and stalled or stopped servers cost at most the timeouts.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <future>
#include <map>
#include <memory>
#include <thread>

#include "api/expert_server.hpp"
#include "api/moe_call_many.hpp"
#include "api/runtime.hpp"
#include "core/moe/expert_backend.hpp"
#include "core/rng.hpp"
#include "tests/support/test_system.hpp"

using namespace apiary;
using namespace std::chrono_literals;
namespace moe = apiary::core::moe;

namespace {

constexpr std::uint32_t k_hidden = 8;
using Mask = std::vector<std::vector<bool>>;

/// Runtimes on one actor system: two expert servers and a client.
struct Cluster {
  testing::TestSystem t;
  std::vector<std::unique_ptr<Runtime>> runtimes;
  Runtime& add() {
    RuntimeOptions o;
    o.system = &t.sys;
    auto r = Runtime::start(o);
    REQUIRE(r.ok());
    runtimes.push_back(std::move(*r));
    return *runtimes.back();
  }
  ~Cluster() {
    for (auto& r : runtimes) r->stop();
  }
};

ExpertServerOptions ffn_options(std::vector<std::string> uids, std::uint64_t seed) {
  ExpertServerOptions o;
  o.expert_cls = "ffn";
  o.hidden_dim = k_hidden;
  o.expert_uids = std::move(uids);
  o.seed = seed;
  return o;
}

std::unique_ptr<ExpertServer> serve(Runtime& rt, const ExpertServerOptions& o) {
  auto s = ExpertServer::start(rt, o);
  REQUIRE(s.ok());
  return std::move(*s);
}

ExpertTensor random_rows(std::uint32_t rows, std::uint64_t seed) {
  core::Rng rng(seed);
  ExpertTensor t;
  t.shape = {rows, k_hidden};
  for (std::uint32_t i = 0; i < rows * k_hidden; ++i) {
    t.values.push_back(static_cast<float>(rng.uniform01() * 2 - 1));
  }
  return t;
}

moe::Tensor tensor_of(const ExpertTensor& t) {
  auto made = moe::Tensor::copy_of(messages::dtype::float32, t.shape, t.values.data(), t.values.size() * 4);
  REQUIRE(made.ok());
  return *made;
}

/// Shapes equal and every value within 1e-5.
void check_close(const ExpertTensor& got, const ExpertTensor& want) {
  REQUIRE(got.shape == want.shape);
  REQUIRE(got.values.size() == want.values.size());
  for (std::size_t i = 0; i < got.values.size(); ++i) CHECK(std::abs(got.values[i] - want.values[i]) <= 1e-5f);
}

void check_close(const ExpertTensor& got, const moe::Tensor& want) {
  REQUIRE(got.shape == want.shape());
  const float* w = want.data<float>();
  for (std::size_t i = 0; i < got.values.size(); ++i) CHECK(std::abs(got.values[i] - w[i]) <= 1e-5f);
}

/// The input gradients of a fresh ffn expert of `seed` (before any SGD step).
moe::Tensor reference_grad(std::uint64_t seed, const ExpertTensor& x, const ExpertTensor& g) {
  moe::FfnConfig c;
  c.hidden_dim = k_hidden;
  c.seed = seed;
  moe::FfnExpert expert(c);
  auto grads = expert.backward({tensor_of(x)}, {tensor_of(g)});
  REQUIRE(grads.ok());
  return grads->front();
}

bool mentions(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("call_many equals each expert called alone and masks the experts that failed", "[integration][moe]") {
  Cluster c;
  Runtime& a = c.add();
  Runtime& b = c.add();
  Runtime& client = c.add();
  auto server_a = serve(a, ffn_options({"ffn.0", "ffn.1", "ffn.2"}, 7));  // seeds 7, 8, 9
  auto server_b = serve(b, ffn_options({"ffn.3"}, 20));
  server_b->stop();
  RemoteExpert e0(client, "ffn.0", core::PeerAddr(a.address()), 5s);
  RemoteExpert e1(client, "ffn.1", core::PeerAddr(a.address()), 5s);
  RemoteExpert e2(client, "ffn.2", core::PeerAddr(a.address()), 5s);
  RemoteExpert e3(client, "ffn.3", core::PeerAddr(b.address()), 5s);  // its server stopped
  RemoteExpert e9(client, "ffn.9", core::PeerAddr(a.address()), 5s);  // no such expert
  const std::map<const RemoteExpert*, std::uint64_t> seed{{&e0, 7}, {&e1, 8}, {&e2, 9}};

  // Samples of 1, 2, 1 and 3 rows; the last has no expert that answers.
  const ExpertsPerSample experts{{&e0, &e1, &e2}, {&e0, &e2, &e9}, {&e1, &e3, &e0}, {&e9, &e3}};
  const std::vector<std::vector<ExpertTensor>> inputs{
      {random_rows(1, 1)}, {random_rows(2, 2)}, {random_rows(1, 3)}, {random_rows(3, 4)}};
  MoeCallOptions options;
  options.k_min = 1;
  auto forward = call_many_forward(experts, inputs, options);
  REQUIRE(forward.ok());
  CHECK(forward->mask == Mask{{true, true, true}, {true, true, false}, {true, false, true}, {false, false}});
  REQUIRE(forward->failures.size() == 2);  // one line per expert: ffn.3 and ffn.9
  // One call per expert per batch: ffn.0 took rows 1 + 2 + 1, ffn.1 1 + 1, ffn.2 1 + 2.
  const auto served = server_a->counters().server;
  CHECK(served.batches == 3);
  CHECK(served.rows == 9);
  CHECK(served.refused == 1);
  for (std::size_t i = 0; i < experts.size(); ++i) {
    for (std::size_t j = 0; j < experts[i].size(); ++j) {
      if (!forward->mask[i][j]) {
        CHECK(forward->outputs[i][j].empty());
        continue;
      }
      auto alone = experts[i][j]->forward(inputs[i]);
      REQUIRE(alone.ok());
      REQUIRE(forward->outputs[i][j].size() == 1);
      check_close(forward->outputs[i][j][0], alone->front());
    }
  }

  // Backward to the experts that answered: input gradients as each fresh expert's.
  TensorsPerExpert grad_outputs(experts.size());
  for (std::size_t i = 0; i < experts.size(); ++i) {
    for (std::size_t j = 0; j < experts[i].size(); ++j) {
      grad_outputs[i].push_back({random_rows(inputs[i][0].shape[0], 100 + 10 * i + j)});
    }
  }
  auto backward = call_many_backward(experts, inputs, grad_outputs, forward->mask, options);
  REQUIRE(backward.ok());
  CHECK(backward->mask == forward->mask);
  CHECK(backward->failures.empty());
  for (std::size_t i = 0; i < experts.size(); ++i) {
    for (std::size_t j = 0; j < experts[i].size(); ++j) {
      if (!backward->mask[i][j]) continue;
      REQUIRE(backward->outputs[i][j].size() == 1);
      check_close(backward->outputs[i][j][0],
                  reference_grad(seed.at(experts[i][j]), inputs[i][0], grad_outputs[i][j][0]));
    }
  }
}

TEST_CASE("call_many below k_min is an error naming the failed experts", "[integration][moe]") {
  Cluster c;
  Runtime& a = c.add();
  Runtime& client = c.add();
  auto server = serve(a, ffn_options({"ffn.0"}, 7));
  RemoteExpert good(client, "ffn.0", core::PeerAddr(a.address()), 5s);
  RemoteExpert unknown(client, "ffn.9", core::PeerAddr(a.address()), 5s);
  const std::vector<std::vector<ExpertTensor>> inputs{{random_rows(1, 1)}, {random_rows(2, 2)}};

  MoeCallOptions options;
  options.k_min = 1;
  auto none = call_many_forward({{&unknown}, {&unknown}}, inputs, options);
  REQUIRE(!none.ok());
  CHECK(none.error().code == errc::unavailable);
  INFO(none.error().message);
  CHECK(mentions(none.error().message, "k_min is 1"));
  CHECK(mentions(none.error().message, "ffn.9"));
  CHECK(mentions(none.error().message, "not_found"));

  options.k_min = 3;  // 2 pairs can answer at most
  auto short_of = call_many_forward({{&good, &unknown}, {&good}}, inputs, options);
  REQUIRE(!short_of.ok());
  INFO(short_of.error().message);
  CHECK(mentions(short_of.error().message, "k_min is 3"));  // known once ffn.9 fails: no wait for ffn.0
  CHECK(mentions(short_of.error().message, "ffn.9"));

  // Backward: the same rule with backward_k_min.
  MoeCallOptions back;
  back.backward_k_min = 2;
  const TensorsPerExpert grads{{{random_rows(1, 5)}}, {{random_rows(2, 6)}}};
  auto below = call_many_backward({{&good}, {&unknown}}, inputs, grads, {{true}, {true}}, back);
  REQUIRE(!below.ok());
  CHECK(mentions(below.error().message, "call_many backward"));
  CHECK(mentions(below.error().message, "k_min is 2"));
  auto no_mask = call_many_backward({{&good}, {&unknown}}, inputs, grads, {{true}}, back);
  REQUIRE(!no_mask.ok());
  CHECK(no_mask.error().code == errc::invalid_argument);
  const TensorsPerExpert wrong_rows{{{random_rows(2, 5)}}, {{random_rows(2, 6)}}};
  auto rows = call_many_backward({{&good}, {&unknown}}, inputs, wrong_rows, {{true}, {true}}, back);
  REQUIRE(!rows.ok());
  CHECK(mentions(rows.error().message, "expected 1 rows"));

  // Bad shapes send nothing.
  auto mismatched = call_many_forward({{&good}}, inputs, options);
  REQUIRE(!mismatched.ok());
  CHECK(mismatched.error().code == errc::invalid_argument);
  auto twice = call_many_forward({{&good, &good}, {&good}}, inputs, options);
  REQUIRE(!twice.ok());
  CHECK(mentions(twice.error().message, "twice"));
  auto wide = inputs;
  wide[1][0].shape[1] += 1;
  wide[1][0].values.resize(2 * (k_hidden + 1));
  auto differ = call_many_forward({{&good}, {&good}}, wide, options);
  REQUIRE(!differ.ok());
  CHECK(mentions(differ.error().message, "differ after dimension 0"));
}

TEST_CASE("call_many carries on with k_min answers when a server stalls or stops", "[integration][moe]") {
  Cluster c;
  Runtime& a = c.add();
  Runtime& slow = c.add();
  Runtime& client = c.add();
  auto server = serve(a, ffn_options({"ffn.0"}, 7));
  // A pool that never has enough rows: its calls are never answered.
  auto stalled_options = ffn_options({"ffn.5"}, 12);
  stalled_options.min_batch_size = 1000;
  auto stalled = serve(slow, stalled_options);
  RemoteExpert good(client, "ffn.0", core::PeerAddr(a.address()), 5s);
  RemoteExpert stuck(client, "ffn.5", core::PeerAddr(slow.address()), 5s);
  REQUIRE(stuck.info().ok());
  const std::vector<std::vector<ExpertTensor>> inputs{{random_rows(1, 1)}, {random_rows(2, 2)}};

  // timeout_after_k_min cuts the wait once every sample has its k_min answers.
  MoeCallOptions options;
  options.k_min = 1;
  options.timeout_after_k_min = 300ms;
  options.forward_timeout = 20s;
  auto t0 = std::chrono::steady_clock::now();
  auto cut = call_many_forward({{&good, &stuck}, {&stuck, &good}}, inputs, options);
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  REQUIRE(cut.ok());
  CHECK(cut->mask == Mask{{true, false}, {false, true}});
  REQUIRE(cut->failures.size() == 1);
  CHECK(mentions(cut->failures[0], "ffn.5"));
  CHECK(mentions(cut->failures[0], "(timeout_after_k_min)"));

  // The server stops mid-way: the batch ends with what answered, long before its timeout.
  options.timeout_after_k_min.reset();
  std::thread stopper([&] {
    std::this_thread::sleep_for(300ms);
    slow.stop();
  });
  t0 = std::chrono::steady_clock::now();
  auto stopped = call_many_forward({{&good, &stuck}, {&stuck, &good}}, inputs, options);
  const auto took = std::chrono::steady_clock::now() - t0;
  stopper.join();
  REQUIRE(stopped.ok());
  CHECK(stopped->mask == Mask{{true, false}, {false, true}});
  REQUIRE(stopped->failures.size() == 1);
  INFO(stopped->failures[0]);
  CHECK(mentions(stopped->failures[0], "ffn.5"));
  CHECK(took < 4s);  // the expert's own timeout is 5 s
}

TEST_CASE("an asynchronous call outlives its RemoteExpert and reports errors once", "[integration][moe]") {
  Cluster c;
  Runtime& a = c.add();
  Runtime& client = c.add();
  auto server = serve(a, ffn_options({"ffn.0"}, 7));
  const auto x = random_rows(2, 1);
  std::promise<Result<std::vector<ExpertTensor>>> done;
  auto answer = done.get_future();
  {
    RemoteExpert expert(client, "ffn.0", core::PeerAddr(a.address()), 5s);
    expert.forward_async({x}, [&done](Result<std::vector<ExpertTensor>> r) { done.set_value(std::move(r)); });
  }  // gone before the answer (rpc_info, then forward) comes
  REQUIRE(answer.wait_for(10s) == std::future_status::ready);
  auto got = answer.get();
  REQUIRE(got.ok());
  RemoteExpert again(client, "ffn.0", core::PeerAddr(a.address()), 5s);
  auto want = again.forward({x});
  REQUIRE(want.ok());
  check_close(got->front(), want->front());

  // A tensor whose values do not fill its shape: the callback gets the error at once.
  std::promise<Result<std::vector<ExpertTensor>>> bad;
  auto refused = bad.get_future();
  ExpertTensor short_values{{2, k_hidden}, {1.0f}};
  again.forward_async({short_values}, [&bad](Result<std::vector<ExpertTensor>> r) { bad.set_value(std::move(r)); });
  REQUIRE(refused.wait_for(10s) == std::future_status::ready);
  auto error = refused.get();
  REQUIRE(!error.ok());
  CHECK(error.error().code == errc::invalid_argument);
  CHECK(mentions(error.error().message, "ffn.0"));
}

TEST_CASE("call_many with detect_anomalies refuses non-finite inputs and masks experts that answer them", "[integration][moe]") {
  Cluster c;
  Runtime& a = c.add();
  Runtime& client = c.add();
  auto server = serve(a, ffn_options({"ffn.0", "ffn.1"}, 7));
  RemoteExpert e0(client, "ffn.0", core::PeerAddr(a.address()), 5s);
  RemoteExpert e1(client, "ffn.1", core::PeerAddr(a.address()), 5s);
  MoeCallOptions options;
  options.detect_anomalies = true;

  auto nan = random_rows(1, 1);
  nan.values[3] = std::nanf("");
  auto refused = call_many_forward({{&e0}, {&e1}}, {{random_rows(1, 2)}, {nan}}, options);
  REQUIRE(!refused.ok());
  CHECK(refused.error().code == errc::invalid_argument);
  CHECK(mentions(refused.error().message, "sample 1"));

  // Finite inputs so large that the expert's answer overflows: that expert is masked out.
  ExpertTensor huge{{1, k_hidden}, std::vector<float>(k_hidden, 3e38f)};
  auto masked = call_many_forward({{&e0}, {&e1}}, {{random_rows(1, 2)}, {huge}}, options);
  REQUIRE(masked.ok());
  CHECK(masked->mask == Mask{{true}, {false}});
  REQUIRE(masked->failures.size() == 1);
  CHECK(mentions(masked->failures[0], "ffn.1"));
  CHECK(mentions(masked->failures[0], "not finite"));

  // Without detect_anomalies the answer comes back as it is.
  auto unchecked = call_many_forward({{&e0}, {&e1}}, {{random_rows(1, 2)}, {huge}});
  REQUIRE(unchecked.ok());
  CHECK(unchecked->mask == Mask{{true}, {true}});
}
