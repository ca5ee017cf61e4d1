// The C++ expert backends (hivemind's ffn and nop, reference §6.1), the schema checks of
// a batch, and the msgpack info rpc_info sends.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/moe/batch_rows.hpp"
#include "core/moe/expert_backend.hpp"
#include "core/moe/expert_schema.hpp"
#include "tests/core/moe/expert_tensors.hpp"

namespace {

namespace moe = apiary::core::moe;
using expert_test::floats;
using expert_test::max_abs_diff;
using expert_test::random_floats;
using expert_test::rows_of;
using moe::FfnConfig;
using moe::FfnExpert;
using moe::FfnParams;

FfnConfig ffn_config(std::uint32_t h, std::uint64_t seed, float lr = 0.1f) {
  FfnConfig c;
  c.hidden_dim = h;
  c.seed = seed;
  c.learning_rate = lr;
  return c;
}

/// sum(forward(x) * g) in double: the loss whose gradients backward(x, g) computes.
double loss(FfnExpert& expert, const moe::Tensor& x, const std::vector<float>& g) {
  auto y = expert.forward({x});
  REQUIRE(y.ok());
  const std::vector<float> out = floats(y->front());
  double sum = 0;
  for (std::size_t i = 0; i < out.size(); ++i) sum += static_cast<double>(out[i]) * g[i];
  return sum;
}

/// Central differences of loss() in every element of `which` parameter vector.
std::vector<float> numeric_grad(const FfnParams& at, std::vector<float> FfnParams::*which, const moe::Tensor& x,
                                const std::vector<float>& g, std::uint32_t h) {
  constexpr float eps = 1e-3f;
  FfnExpert probe(ffn_config(h, 0));
  std::vector<float> out((at.*which).size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    FfnParams plus = at;
    FfnParams minus = at;
    (plus.*which)[i] += eps;
    (minus.*which)[i] -= eps;
    REQUIRE(probe.set_params(plus));
    const double up = loss(probe, x, g);
    REQUIRE(probe.set_params(minus));
    out[i] = static_cast<float>((up - loss(probe, x, g)) / (2.0 * eps));
  }
  return out;
}

/// (before - after) / lr, element by element: the gradient an SGD step applied.
std::vector<float> applied(const std::vector<float>& before, const std::vector<float>& after, float lr) {
  std::vector<float> out(before.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = (before[i] - after[i]) / lr;
  return out;
}

}  // namespace

TEST_CASE("ffn forward is W2 relu(W1 x + b1) + b2 per row", "[moe]") {
  FfnExpert expert(ffn_config(1, 0));
  REQUIRE(expert.set_params(FfnParams{{1, -1, 2, 0.5f}, {0, 0.5f, -1, 0}, {1, 2, 3, -1}, {0.25f}}));
  auto y = expert.forward({rows_of({2, -1}, 1)});
  REQUIRE(y.ok());
  REQUIRE(y->size() == 1);
  CHECK(y->front().shape() == apiary::messages::Shape{2, 1});
  // x = 2: relu(2, -1.5, 3, 1) = (2, 0, 3, 1) -> 2 + 0 + 9 - 1 + 0.25; x = -1: relu(-1, 1.5, -3, -0.5) -> 3 + 0.25.
  CHECK(floats(y->front()) == std::vector<float>{10.25f, 3.25f});
  CHECK_FALSE(expert.set_params(FfnParams{{1}, {0}, {1}, {0}}).ok());
}

TEST_CASE("ffn rows are independent: a batch gives each row's outputs alone, bit for bit", "[moe]") {
  // 7 rows: passes of several rows over the weights, and a last pass of fewer.
  const std::uint32_t h = 8;
  const std::vector<float> x = random_floats(7 * h, 3);
  FfnExpert batched(ffn_config(h, 5));
  auto all = batched.forward({rows_of(x, h)});
  REQUIRE(all.ok());
  const std::vector<float> got = floats(all->front());
  for (std::size_t r = 0; r < 7; ++r) {
    FfnExpert alone(ffn_config(h, 5));
    auto one = alone.forward({rows_of(std::vector<float>(x.begin() + r * h, x.begin() + (r + 1) * h), h)});
    REQUIRE(one.ok());
    CHECK(floats(one->front()) == std::vector<float>(got.begin() + r * h, got.begin() + (r + 1) * h));
  }
}

TEST_CASE("ffn experts of one seed are equal and other seeds differ", "[moe]") {
  FfnExpert a(ffn_config(8, 5));
  FfnExpert b(ffn_config(8, 5));
  FfnExpert c(ffn_config(8, 6));
  CHECK(a.params().w1 == b.params().w1);
  CHECK(a.params().b2 == b.params().b2);
  CHECK(a.params().w1 != c.params().w1);
  // torch's nn.Linear bounds: 1/sqrt(8) for the first layer, 1/sqrt(32) for the second.
  for (float w : a.params().w1) CHECK(std::fabs(w) <= 1.0f / std::sqrt(8.0f));
  for (float w : a.params().w2) CHECK(std::fabs(w) <= 1.0f / std::sqrt(32.0f));
  const auto x = rows_of(random_floats(3 * 8, 1), 8);
  auto ya = a.forward({x});
  auto yb = b.forward({x});
  REQUIRE(ya.ok());
  REQUIRE(yb.ok());
  CHECK(ya->front() == yb->front());
}

TEST_CASE("ffn backward returns the input gradient and steps every parameter by SGD", "[moe]") {
  constexpr std::uint32_t h = 3;
  constexpr float lr = 0.1f;
  FfnExpert expert(ffn_config(h, 7, lr));
  const FfnParams before = expert.params();
  const auto x = rows_of(random_floats(4 * h, 11), h);
  const std::vector<float> g = random_floats(4 * h, 12);

  auto gx = expert.backward({x}, {rows_of(g, h)});
  REQUIRE(gx.ok());
  REQUIRE(gx->size() == 1);
  const FfnParams& after = expert.params();
  // Each parameter moved by -lr times the gradient of sum(y * g) at the old parameters.
  for (auto which : {&FfnParams::w1, &FfnParams::b1, &FfnParams::w2, &FfnParams::b2}) {
    const auto expected = numeric_grad(before, which, x, g, h);
    const auto step = applied(before.*which, after.*which, lr);
    CHECK(max_abs_diff(step, expected) < 2e-3f);
    float largest = 0;
    for (float v : expected) largest = std::fmax(largest, std::fabs(v));
    CHECK(largest > 0.05f);  // a step of zero would not pass
  }
  // The input gradient, by central differences in x at the old parameters.
  FfnExpert probe(ffn_config(h, 0));
  REQUIRE(probe.set_params(before));
  std::vector<float> numeric(4 * h);
  std::vector<float> xs = floats(x);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    auto plus = xs;
    auto minus = xs;
    plus[i] += 1e-3f;
    minus[i] -= 1e-3f;
    numeric[i] = static_cast<float>((loss(probe, rows_of(plus, h), g) - loss(probe, rows_of(minus, h), g)) / 2e-3);
  }
  CHECK(max_abs_diff(floats(gx->front()), numeric) < 2e-3f);
}

TEST_CASE("nop passes inputs forward and gradients back", "[moe]") {
  moe::NopExpert nop(2);
  const auto x = rows_of({1, 2, 3, 4}, 2);
  const auto g = rows_of({5, 6, 7, 8}, 2);
  auto y = nop.forward({x});
  REQUIRE(y.ok());
  CHECK(y->front() == x);
  auto gx = nop.backward({x}, {g});
  REQUIRE(gx.ok());
  CHECK(gx->front() == g);
  CHECK_FALSE(nop.backward({x}, {rows_of({5, 6}, 2)}).ok());  // 2 rows of input, 1 of gradient
  CHECK(moe::make_expert("nop", ffn_config(2, 0)).ok());
  auto unknown = moe::make_expert("moe", ffn_config(2, 0));
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().code == apiary::errc::not_found);
}

TEST_CASE("a batch is checked against the schema: count and dimensions and rows", "[moe]") {
  moe::NopExpert nop(16);
  const auto& schema = nop.info().args;
  CHECK(*moe::check_batch(schema, {rows_of(random_floats(3 * 16, 1), 16)}, "nop") == 3);
  auto wrong_dim = moe::check_batch(schema, {rows_of(random_floats(3 * 11, 1), 11)}, "expert 'nop.0' forward");
  REQUIRE_FALSE(wrong_dim.ok());
  CHECK(wrong_dim.error().code == apiary::errc::invalid_argument);
  CHECK_THAT(wrong_dim.error().message, Catch::Contains("[3, 11]") && Catch::Contains("[*, 16]") &&
                                            Catch::Contains("expert 'nop.0' forward"));
  auto two = moe::check_batch(schema, {rows_of({1}, 1), rows_of({1}, 1)}, "nop");
  REQUIRE_FALSE(two.ok());
  CHECK_THAT(two.error().message, Catch::Contains("takes 1 tensor(s), got 2"));
  auto empty = apiary::messages::Tensor::zeros(apiary::messages::dtype::float32, {0, 16});
  REQUIRE(empty.ok());
  CHECK_FALSE(moe::check_batch(schema, {*empty}, "nop").ok());
  CHECK_FALSE(moe::check_batch(nop.info().backward_inputs(),
                               {rows_of(random_floats(32, 1), 16), rows_of(random_floats(48, 1), 16)}, "nop")
                  .ok());  // 2 rows and 3 rows
}

TEST_CASE("the info packs as hivemind's get_info msgpack and reads back", "[moe]") {
  // NopExpert(2, FLOAT16): {forward_schema: ((descriptor,), {}), outputs_schema: descriptor,
  // keyword_names: ()}, hand-encoded from hivemind's BatchTensorDescriptor.packb field order.
  const std::string golden =
      "83ae666f72776172645f736368656d61c7844092c77f4091c77b5188a473697a65c7034092c002a56474797065ad746f7263682e66"
      "6c6f61743332a66c61796f7574ad746f7263682e73747269646564ad72657175697265735f67726164c2aa70696e5f6d656d6f7279"
      "c2ab636f6d7072657373696f6e02ab6465766963655f74797065a3637075ac6465766963655f696e646578c080ae6f757470757473"
      "5f736368656d61c77b5188a473697a65c7034092c002a56474797065ad746f7263682e666c6f61743332a66c61796f7574ad746f72"
      "63682e73747269646564ad72657175697265735f67726164c2aa70696e5f6d656d6f7279c2ab636f6d7072657373696f6e02ab6465"
      "766963655f74797065a3637075ac6465766963655f696e646578c0ad6b6579776f72645f6e616d6573d44090";
  moe::NopExpert nop(2, apiary::pb::FLOAT16);
  const std::string packed = moe::pack_info(nop.info());
  std::string hex;
  for (unsigned char c : packed) hex += fmt::format("{:02x}", c);
  CHECK(hex == golden);
  auto back = moe::unpack_info(packed);
  REQUIRE(back.ok());
  CHECK(*back == nop.info());

  // Several outputs and a keyword input travel as tuples and a map.
  moe::ExpertSchema wide = FfnExpert(ffn_config(4, 0)).info();
  wide.kwargs.emplace("mask", moe::TensorSchema{{4, 2}, apiary::messages::dtype::bool_, false, apiary::pb::NONE, ""});
  wide.outputs.push_back(
      moe::TensorSchema{{}, apiary::messages::dtype::float64, true, apiary::pb::UNIFORM_8BIT, "cpu"});
  wide.single_output = false;
  auto wide_back = moe::unpack_info(moe::pack_info(wide));
  REQUIRE(wide_back.ok());
  CHECK(*wide_back == wide);
  CHECK(wide.backward_inputs().size() == 4);

  auto junk = moe::unpack_info(std::string("\x92\x01\x02", 3));
  REQUIRE_FALSE(junk.ok());
  CHECK(junk.error().code == apiary::errc::malformed);
}
