// The expert server role (hivemind's ConnectionHandler and Runtime, reference §6.1 and the
// checklists of test_moe.py and test_connection_handler.py): requests driven by hand,
// replies compared with the backend called directly.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/moe/expert_backend.hpp"
#include "core/moe/expert_server_role.hpp"
#include "messages/identity/ed25519.hpp"
#include "messages/identity/peer_id.hpp"
#include "tests/core/moe/expert_tensors.hpp"

namespace {

namespace core = apiary::core;
namespace moe = apiary::core::moe;
using expert_test::floats;
using expert_test::max_abs_diff;
using expert_test::random_floats;
using expert_test::replies;
using expert_test::request;
using expert_test::response_tensors;
using expert_test::rows_of;
using moe::ExpertServerRole;
using moe::Tensor;
using namespace std::chrono_literals;

constexpr std::uint32_t h = 16;

moe::FfnConfig ffn(std::uint64_t seed) {
  moe::FfnConfig c;
  c.hidden_dim = h;
  c.seed = seed;
  c.learning_rate = 0.05f;
  return c;
}

moe::PoolConfig pool(std::size_t max, std::size_t min = 1, std::optional<core::Duration> timeout = std::nullopt) {
  moe::PoolConfig c;
  c.max_batch_size = max;
  c.min_batch_size = min;
  c.timeout = timeout;
  return c;
}

core::TimePoint at(int ms) { return std::chrono::milliseconds(ms); }

/// A backend that records the rows of every call and fails the calls it is told to.
class Recording final : public moe::ExpertBackend {
 public:
  explicit Recording(std::vector<std::size_t>& calls, int fail_calls = 0)
      : inner_(ffn(3)), calls_(calls), fail_calls_(fail_calls) {}
  const moe::ExpertSchema& info() const override { return inner_.info(); }
  apiary::Result<std::vector<Tensor>> forward(const std::vector<Tensor>& inputs) override {
    calls_.push_back(inputs.front().shape()[0]);
    if (fail_calls_-- > 0) return apiary::make_error(apiary::errc::internal, "out of device memory");
    return inner_.forward(inputs);
  }
  apiary::Result<std::vector<Tensor>> backward(const std::vector<Tensor>& inputs,
                                               const std::vector<Tensor>& grads) override {
    calls_.push_back(inputs.front().shape()[0]);
    return inner_.backward(inputs, grads);
  }

 private:
  moe::FfnExpert inner_;
  std::vector<std::size_t>& calls_;
  int fail_calls_;
};

core::Effects send(ExpertServerRole& role, core::TimePoint now, core::RequestId id, const char* handle,
                   const apiary::Buffer& body) {
  return expert_test::settled(role, now, role.on(now, core::Request{id, handle, core::PeerAddr{}, body}));
}

/// The forward of a fresh ffn expert of seed 3 on `x` alone.
std::vector<float> reference_forward(const Tensor& x) {
  moe::FfnExpert reference(ffn(3));
  auto y = reference.forward({x});
  REQUIRE(y.ok());
  return floats(y->front());
}

}  // namespace

TEST_CASE("forward through the server role equals the backend called on the same batch", "[moe]") {
  ExpertServerRole role;
  REQUIRE(role.add_expert("ffn.0", std::make_unique<moe::FfnExpert>(ffn(3)), pool(64)));
  CHECK(role.handles() == std::vector<std::string>{"ConnectionHandler.rpc_info", "ConnectionHandler.rpc_forward",
                                                   "ConnectionHandler.rpc_backward",
                                                   "ConnectionHandler.rpc_forward_stream",
                                                   "ConnectionHandler.rpc_backward_stream"});
  const Tensor x = rows_of(random_floats(5 * h, 1), h);
  auto out = replies(send(role, at(0), 7, moe::k_forward_handle, request("ffn.0", {x})));
  REQUIRE(out.size() == 1);
  CHECK(out[0].request == 7);
  const auto y = response_tensors(out[0]);
  REQUIRE(y.size() == 1);
  CHECK(y[0].shape() == apiary::messages::Shape{5, h});
  CHECK(max_abs_diff(floats(y[0]), reference_forward(x)) <= 1e-5f);
  CHECK(role.stats().batches == 1);
}

TEST_CASE("requests queued until min_batch_size run as one backend call and split back per task", "[moe]") {
  std::vector<std::size_t> calls;
  ExpertServerRole role;
  REQUIRE(role.add_expert("ffn.1", std::make_unique<Recording>(calls), pool(64, 6)));
  const Tensor a = rows_of(random_floats(1 * h, 1), h);
  const Tensor b = rows_of(random_floats(2 * h, 2), h);
  const Tensor c = rows_of(random_floats(3 * h, 3), h);
  CHECK(replies(send(role, at(0), 1, moe::k_forward_handle, request("ffn.1", {a}))).empty());
  CHECK(replies(send(role, at(1), 2, moe::k_forward_handle, request("ffn.1", {b}))).empty());
  CHECK(role.queued_tasks() == 2);
  auto out = replies(send(role, at(2), 3, moe::k_forward_handle, request("ffn.1", {c})));
  CHECK(calls == std::vector<std::size_t>{6});  // one call of 1 + 2 + 3 rows
  REQUIRE(out.size() == 3);
  const Tensor* inputs[] = {&a, &b, &c};
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(out[i].request == i + 1);
    const auto y = response_tensors(out[i]);
    REQUIRE(y.size() == 1);
    CHECK(y[0].shape()[0] == inputs[i]->shape()[0]);
    CHECK(max_abs_diff(floats(y[0]), reference_forward(*inputs[i])) <= 1e-5f);
  }
  CHECK(role.queued_tasks() == 0);
}

TEST_CASE("requests that come in before the pool timer fires run as one batch", "[moe]") {
  // What a host sees when requests arrived while a batch computed: each is queued, and
  // the pool timer due now (armed by the first) fires behind them all.
  std::vector<std::size_t> calls;
  ExpertServerRole role;
  REQUIRE(role.add_expert("ffn.3", std::make_unique<Recording>(calls), pool(64)));
  const Tensor a = rows_of(random_floats(1 * h, 5), h);
  const Tensor b = rows_of(random_floats(2 * h, 6), h);
  const Tensor c = rows_of(random_floats(3 * h, 7), h);
  auto first = role.on(at(4), core::Request{1, moe::k_forward_handle, core::PeerAddr{}, request("ffn.3", {a})});
  REQUIRE(first.size() == 1);
  const auto* timer = std::get_if<core::SetTimer>(&first[0]);
  REQUIRE(timer != nullptr);
  CHECK(timer->id == moe::k_pool_timer);
  CHECK(timer->at == at(4));
  CHECK(role.on(at(4), core::Request{2, moe::k_forward_handle, core::PeerAddr{}, request("ffn.3", {b})}).empty());
  CHECK(role.on(at(4), core::Request{3, moe::k_forward_handle, core::PeerAddr{}, request("ffn.3", {c})}).empty());
  CHECK(calls.empty());
  auto out = replies(role.on(at(4), core::TimerFired{moe::k_pool_timer}));
  CHECK(calls == std::vector<std::size_t>{6});
  REQUIRE(out.size() == 3);
  const Tensor* inputs[] = {&a, &b, &c};
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(out[i].request == i + 1);
    CHECK(max_abs_diff(floats(response_tensors(out[i])[0]), reference_forward(*inputs[i])) <= 1e-5f);
  }
  // The next request arms the timer again.
  auto next = role.on(at(5), core::Request{4, moe::k_forward_handle, core::PeerAddr{}, request("ffn.3", {a})});
  REQUIRE(next.size() == 1);
  CHECK(std::get_if<core::SetTimer>(&next[0]) != nullptr);
}

TEST_CASE("a pool timeout arms the timer and its firing runs the smaller batch", "[moe]") {
  std::vector<std::size_t> calls;
  ExpertServerRole role;
  REQUIRE(role.add_expert("ffn.2", std::make_unique<Recording>(calls), pool(200, 100, 10ms)));
  const Tensor x = rows_of(random_floats(2 * h, 4), h);
  auto fx = send(role, at(5), 1, moe::k_forward_handle, request("ffn.2", {x}));
  CHECK(replies(fx).empty());
  REQUIRE(fx.size() == 1);
  const auto* timer = std::get_if<core::SetTimer>(&fx[0]);
  REQUIRE(timer != nullptr);
  CHECK(timer->id == moe::k_pool_timer);
  CHECK(timer->at == at(15));
  CHECK(replies(role.on(at(9), core::TimerFired{99})).empty());  // not its timer
  auto out = replies(role.on(at(15), core::TimerFired{moe::k_pool_timer}));
  REQUIRE(out.size() == 1);
  CHECK(calls == std::vector<std::size_t>{2});
  CHECK(max_abs_diff(floats(response_tensors(out[0])[0]), reference_forward(x)) <= 1e-5f);
}

TEST_CASE("backward through the server role gives the input gradient and steps the expert as SGD does", "[moe]") {
  ExpertServerRole role;
  REQUIRE(role.add_expert("ffn.3", std::make_unique<moe::FfnExpert>(ffn(3)), pool(64)));
  moe::FfnExpert reference(ffn(3));
  const Tensor x = rows_of(random_floats(4 * h, 5), h);
  const Tensor g = rows_of(random_floats(4 * h, 6), h);
  auto out = replies(send(role, at(0), 1, moe::k_backward_handle, request("ffn.3", {x, g})));
  REQUIRE(out.size() == 1);
  auto expected = reference.backward({x}, {g});
  REQUIRE(expected.ok());
  const auto gx = response_tensors(out[0]);
  REQUIRE(gx.size() == 1);
  CHECK(max_abs_diff(floats(gx[0]), floats(expected->front())) <= 1e-5f);
  // The served expert took the same SGD step as the reference, away from where it started.
  const auto& served = dynamic_cast<moe::FfnExpert&>(*role.expert("ffn.3")).params();
  CHECK(max_abs_diff(served.w1, reference.params().w1) <= 1e-6f);
  CHECK(max_abs_diff(served.b2, reference.params().b2) <= 1e-6f);
  CHECK(max_abs_diff(served.w1, moe::FfnExpert(ffn(3)).params().w1) > 1e-4f);
  // A backward request without the gradient is refused.
  auto missing = replies(send(role, at(1), 2, moe::k_backward_handle, request("ffn.3", {x})));
  REQUIRE(missing.size() == 1);
  REQUIRE_FALSE(missing[0].response.ok());
  CHECK_THAT(missing[0].response.error().message, Catch::Contains("takes 2 tensor(s), got 1"));
}

TEST_CASE("an unknown uid and a wrong input dimension get clear errors and the next good request succeeds", "[moe]") {
  ExpertServerRole role;
  REQUIRE(role.add_expert("ffn.4", std::make_unique<moe::FfnExpert>(ffn(3)), pool(64)));
  const Tensor x = rows_of(random_floats(3 * h, 7), h);
  auto unknown = replies(send(role, at(0), 1, moe::k_forward_handle, request("ffn.99", {x})));
  REQUIRE(unknown.size() == 1);
  REQUIRE_FALSE(unknown[0].response.ok());
  CHECK(unknown[0].response.error().code == apiary::errc::not_found);
  CHECK_THAT(unknown[0].response.error().message, Catch::Contains("no expert 'ffn.99'") && Catch::Contains("ffn.4"));

  const Tensor narrow = rows_of(random_floats(33, 8), 11);  // 3 rows of 11
  auto wrong = replies(send(role, at(1), 2, moe::k_forward_handle, request("ffn.4", {narrow})));
  REQUIRE(wrong.size() == 1);
  REQUIRE_FALSE(wrong[0].response.ok());
  CHECK(wrong[0].response.error().code == apiary::errc::invalid_argument);
  CHECK_THAT(wrong[0].response.error().message, Catch::Contains("[3, 11]") && Catch::Contains("[*, 16]"));

  auto junk = replies(send(role, at(2), 3, moe::k_forward_handle, apiary::Buffer::copy_of(std::string("\xff\xff", 2))));
  REQUIRE(junk.size() == 1);
  CHECK(junk[0].response.error().code == apiary::errc::malformed);
  CHECK(role.stats().refused == 3);

  auto good = replies(send(role, at(3), 4, moe::k_forward_handle, request("ffn.4", {x})));
  REQUIRE(good.size() == 1);
  CHECK(max_abs_diff(floats(response_tensors(good[0])[0]), reference_forward(x)) <= 1e-5f);
}

TEST_CASE("rpc_info answers the expert's schema as msgpack and refuses an unknown uid", "[moe]") {
  ExpertServerRole role;
  moe::FfnConfig config = ffn(3);
  config.output_compression = apiary::pb::FLOAT16;
  REQUIRE(role.add_expert("ffn.5", std::make_unique<moe::FfnExpert>(config), pool(64)));
  REQUIRE(role.add_expert("nop.0", std::make_unique<moe::NopExpert>(4), pool(64)));
  CHECK_FALSE(role.add_expert("nop.0", std::make_unique<moe::NopExpert>(4), pool(64)).ok());
  apiary::pb::ExpertUID uid;
  uid.set_uid("ffn.5");
  auto out = replies(send(role, at(0), 1, moe::k_info_handle, apiary::Buffer::copy_of(uid.SerializeAsString())));
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].response.ok());
  apiary::pb::ExpertInfo info;
  REQUIRE(info.ParseFromString(*out[0].response));
  auto schema = moe::unpack_info(info.serialized_info());
  REQUIRE(schema.ok());
  CHECK(*schema == moe::FfnExpert(config).info());
  CHECK(schema->outputs.front().compression == apiary::pb::FLOAT16);
  CHECK(schema->args.front().instance_shape == apiary::messages::Shape{h});

  // Outputs travel with the compression their schema names.
  const Tensor x = rows_of(random_floats(2 * h, 9), h);
  auto fx = replies(send(role, at(1), 2, moe::k_forward_handle, request("ffn.5", {x})));
  REQUIRE(fx.size() == 1);
  apiary::pb::ExpertResponse response;
  REQUIRE(response.ParseFromString(*fx[0].response));
  CHECK(response.tensors(0).compression() == apiary::pb::FLOAT16);
  CHECK(max_abs_diff(floats(response_tensors(fx[0])[0]), reference_forward(x)) <= 1e-2f);

  uid.set_uid("ffn.6");
  auto unknown = replies(send(role, at(2), 3, moe::k_info_handle, apiary::Buffer::copy_of(uid.SerializeAsString())));
  REQUIRE(unknown.size() == 1);
  REQUIRE_FALSE(unknown[0].response.ok());
  CHECK_THAT(unknown[0].response.error().message, Catch::Contains("no expert 'ffn.6'"));
}

TEST_CASE("a task larger than max_batch_size is refused alone", "[moe]") {
  std::vector<std::size_t> calls;
  ExpertServerRole role;
  REQUIRE(role.add_expert("ffn.7", std::make_unique<Recording>(calls), pool(4, 4)));
  const Tensor two = rows_of(random_floats(2 * h, 10), h);
  CHECK(replies(send(role, at(0), 1, moe::k_forward_handle, request("ffn.7", {two}))).empty());
  const Tensor five = rows_of(random_floats(5 * h, 11), h);
  auto big = replies(send(role, at(1), 2, moe::k_forward_handle, request("ffn.7", {five})));
  REQUIRE(big.size() == 1);
  CHECK(big[0].request == 2);
  REQUIRE_FALSE(big[0].response.ok());
  CHECK(big[0].response.error().code == apiary::errc::too_large);
  CHECK_THAT(big[0].response.error().message, Catch::Contains("max_batch_size (4)"));
  CHECK(role.queued_tasks() == 1);  // the queued task is untouched
  auto out = replies(send(role, at(2), 3, moe::k_forward_handle, request("ffn.7", {two})));
  REQUIRE(out.size() == 2);
  CHECK(out[0].request == 1);
  CHECK(out[1].request == 3);
  CHECK(calls == std::vector<std::size_t>{4});
}

TEST_CASE("a failed batch is an error to each of its tasks and the server keeps serving", "[moe]") {
  std::vector<std::size_t> calls;
  ExpertServerRole role;
  REQUIRE(role.add_expert("ffn.8", std::make_unique<Recording>(calls, 1), pool(64, 3)));
  REQUIRE(role.add_expert("ffn.9", std::make_unique<moe::FfnExpert>(ffn(3)), pool(64)));
  const Tensor x = rows_of(random_floats(h, 12), h);
  CHECK(replies(send(role, at(0), 1, moe::k_forward_handle, request("ffn.8", {x}))).empty());
  auto other = replies(send(role, at(1), 2, moe::k_forward_handle, request("ffn.9", {x})));
  REQUIRE(other.size() == 1);  // another expert's task is not held up
  CHECK(other[0].response.ok());
  const Tensor pair = rows_of(random_floats(2 * h, 13), h);
  auto failed = replies(send(role, at(2), 3, moe::k_forward_handle, request("ffn.8", {pair})));
  REQUIRE(failed.size() == 2);  // both tasks of the 3-row batch
  CHECK(failed[0].request == 1);
  CHECK(failed[1].request == 3);
  for (const auto& reply : failed) {
    REQUIRE_FALSE(reply.response.ok());
    CHECK_THAT(reply.response.error().message, Catch::Contains("out of device memory"));
  }
  CHECK(role.stats().failed_batches == 1);
  CHECK(replies(send(role, at(3), 4, moe::k_forward_handle, request("ffn.8", {x}))).empty());
  auto again = replies(send(role, at(4), 5, moe::k_forward_handle, request("ffn.8", {pair})));
  REQUIRE(again.size() == 2);
  CHECK(again[0].response.ok());
  CHECK(max_abs_diff(floats(response_tensors(again[0])[0]), reference_forward(x)) <= 1e-5f);
  CHECK(max_abs_diff(floats(response_tensors(again[1])[0]), reference_forward(pair)) <= 1e-5f);
  CHECK(calls == std::vector<std::size_t>{3, 3});
}

TEST_CASE("forward and backward tasks of one expert wait in separate pools", "[moe]") {
  std::vector<std::size_t> calls;
  ExpertServerRole role;
  REQUIRE(role.add_expert("ffn.10", std::make_unique<Recording>(calls), pool(8, 2)));
  const Tensor x = rows_of(random_floats(h, 15), h);
  const Tensor g = rows_of(random_floats(h, 16), h);
  CHECK(replies(send(role, at(0), 1, moe::k_forward_handle, request("ffn.10", {x}))).empty());
  CHECK(replies(send(role, at(1), 2, moe::k_backward_handle, request("ffn.10", {x, g}))).empty());
  CHECK(calls.empty());  // one row in each pool, two needed
  auto backward = replies(send(role, at(2), 3, moe::k_backward_handle, request("ffn.10", {x, g})));
  REQUIRE(backward.size() == 2);
  CHECK(backward[0].request == 2);
  CHECK(backward[1].request == 3);
  CHECK(response_tensors(backward[0])[0] == response_tensors(backward[1])[0]);  // same rows, same step
  CHECK(role.queued_tasks() == 1);  // the forward task still waits
}

TEST_CASE("an addressed server serves its handles with its PeerID and answers them", "[moe]") {
  auto key = apiary::messages::Ed25519PrivateKey::generate();
  REQUIRE(key.ok());
  const auto self = apiary::messages::PeerId::from_public_key(key->public_key());
  ExpertServerRole alone(core::Addressing(self, /*shared_transport=*/false));
  REQUIRE(alone.add_expert("ffn.0", std::make_unique<moe::FfnExpert>(ffn(3)), pool(64)));
  const std::string suffix = "@" + self.to_string();
  CHECK(alone.handles() == std::vector<std::string>{std::string(moe::k_info_handle) + suffix, moe::k_info_handle,
                                                    std::string(moe::k_forward_handle) + suffix,
                                                    moe::k_forward_handle,
                                                    std::string(moe::k_backward_handle) + suffix,
                                                    moe::k_backward_handle,
                                                    std::string(moe::k_forward_stream_handle) + suffix,
                                                    moe::k_forward_stream_handle,
                                                    std::string(moe::k_backward_stream_handle) + suffix,
                                                    moe::k_backward_stream_handle});
  const Tensor x = rows_of(random_floats(2 * h, 4), h);
  const std::string addressed = std::string(moe::k_forward_handle) + suffix;
  auto out = replies(send(alone, at(0), 3, addressed.c_str(), request("ffn.0", {x})));
  REQUIRE(out.size() == 1);
  const auto y = response_tensors(out[0]);
  REQUIRE(y.size() == 1);
  CHECK(max_abs_diff(floats(y[0]), reference_forward(x)) <= 1e-5f);

  // Beside other servers on one transport: the addressed handles only.
  ExpertServerRole shared(core::Addressing(self, /*shared_transport=*/true));
  CHECK(shared.handles().size() == 5);
  for (const auto& handle : shared.handles()) CHECK(handle.find(suffix) != std::string::npos);
}
