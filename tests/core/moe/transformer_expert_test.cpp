// The C++ transformer expert (hivemind's `transformer`, reference §6.1): its schema,
// padding, per-sample independence, and backward against central differences.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/moe/expert_backend.hpp"
#include "core/moe/transformer_expert.hpp"
#include "tests/core/moe/expert_tensors.hpp"

namespace {

namespace moe = apiary::core::moe;
using expert_test::floats;
using expert_test::max_abs_diff;
using expert_test::random_floats;
using moe::Tensor;
using moe::TransformerExpert;
using moe::TransformerParams;

constexpr std::uint32_t h = 12;  // 4 heads of 3
constexpr std::uint32_t seq = 5;

moe::FfnConfig config(std::uint64_t seed, float lr = 0.1f) {
  moe::FfnConfig c;
  c.hidden_dim = h;
  c.seed = seed;
  c.learning_rate = lr;
  return c;
}

Tensor inputs_of(const std::vector<float>& x) {
  auto t = Tensor::copy_of(apiary::messages::dtype::float32,
                           {static_cast<std::uint32_t>(x.size() / (seq * h)), seq, h}, x.data(),
                           x.size() * sizeof(float));
  REQUIRE(t.ok());
  return *t;
}

Tensor mask_of(const std::vector<std::uint8_t>& padding) {
  auto t = Tensor::copy_of(apiary::messages::dtype::bool_, {static_cast<std::uint32_t>(padding.size() / seq), seq},
                           padding.data(), padding.size());
  REQUIRE(t.ok());
  return *t;
}

std::vector<float> forward(TransformerExpert& expert, const Tensor& x, const Tensor& mask) {
  auto y = expert.forward({x, mask});
  REQUIRE(y.ok());
  REQUIRE(y->size() == 1);
  return floats(y->front());
}

/// sum(forward(x) * g) in double: the loss whose gradients backward(x, g) computes.
double loss(TransformerExpert& expert, const Tensor& x, const Tensor& mask, const std::vector<float>& g) {
  const std::vector<float> y = forward(expert, x, mask);
  double sum = 0;
  for (std::size_t i = 0; i < y.size(); ++i) sum += static_cast<double>(y[i]) * g[i];
  return sum;
}

}  // namespace

TEST_CASE("transformer expert: schema of x [seq h] and a bool mask [seq] and outputs of x's shape", "[moe]") {
  TransformerExpert expert(config(1), seq);
  CHECK(expert.heads() == 4);
  const auto& info = expert.info();
  REQUIRE(info.args.size() == 2);
  CHECK(info.args[0].instance_shape == apiary::messages::Shape{seq, h});
  CHECK(info.args[1].instance_shape == apiary::messages::Shape{seq});
  CHECK(info.args[1].type == apiary::messages::dtype::bool_);
  REQUIRE(info.outputs.size() == 1);
  CHECK(info.outputs[0].instance_shape == apiary::messages::Shape{seq, h});
  auto made = moe::make_expert("transformer", config(1));
  REQUIRE(made.ok());
  CHECK((*made)->info().args[0].instance_shape == apiary::messages::Shape{TransformerExpert::k_default_seq_len, h});
  // A wrong sequence length is the caller's error, named.
  auto fine = expert.forward({inputs_of(random_floats(2 * seq * h, 1)), mask_of(std::vector<std::uint8_t>(2 * seq))});
  REQUIRE(fine.ok());
  auto bad = Tensor::zeros(apiary::messages::dtype::float32, {2, seq + 1, h});
  REQUIRE(bad.ok());
  auto refused = expert.forward({*bad, mask_of(std::vector<std::uint8_t>(2 * seq))});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == apiary::errc::invalid_argument);
}

TEST_CASE("transformer samples are independent and padding keys are ignored, bit for bit", "[moe]") {
  TransformerExpert expert(config(2), seq);
  std::vector<float> x = random_floats(3 * seq * h, 3);
  const std::vector<std::uint8_t> padding = {0, 0, 0, 1, 1, /**/ 0, 0, 0, 0, 0, /**/ 0, 1, 0, 1, 0};
  const std::vector<float> y = forward(expert, inputs_of(x), mask_of(padding));
  for (float v : y) REQUIRE(std::isfinite(v));
  // Each sample alone gives its rows of the batch.
  for (std::size_t b = 0; b < 3; ++b) {
    const std::vector<float> xb(x.begin() + b * seq * h, x.begin() + (b + 1) * seq * h);
    const std::vector<std::uint8_t> mb(padding.begin() + b * seq, padding.begin() + (b + 1) * seq);
    CHECK(forward(expert, inputs_of(xb), mask_of(mb)) ==
          std::vector<float>(y.begin() + b * seq * h, y.begin() + (b + 1) * seq * h));
  }
  // Changing the padded positions of sample 0 leaves its other positions' outputs as they were.
  for (std::size_t i = 3 * h; i < 5 * h; ++i) x[i] += 5.0f;
  const std::vector<float> again = forward(expert, inputs_of(x), mask_of(padding));
  CHECK(std::vector<float>(again.begin(), again.begin() + 3 * h) == std::vector<float>(y.begin(), y.begin() + 3 * h));
  CHECK(std::vector<float>(again.begin() + 3 * h, again.begin() + 5 * h) !=
        std::vector<float>(y.begin() + 3 * h, y.begin() + 5 * h));
  // Unmasked, the same change reaches every position.
  std::vector<std::uint8_t> open(15, 0);
  CHECK(forward(expert, inputs_of(x), mask_of(open)) != y);
}

TEST_CASE("transformer: a sample all padding attends to nothing and stays finite", "[moe]") {
  TransformerExpert expert(config(4), seq);
  const auto x = inputs_of(random_floats(seq * h, 5));
  const std::vector<float> y = forward(expert, x, mask_of(std::vector<std::uint8_t>(seq, 1)));
  for (float v : y) CHECK(std::isfinite(v));
  auto gx = expert.backward({x, mask_of(std::vector<std::uint8_t>(seq, 1))}, {inputs_of(random_floats(seq * h, 6))});
  REQUIRE(gx.ok());
  for (float v : floats(gx->front())) CHECK(std::isfinite(v));
}

TEST_CASE("transformer backward: the input gradient and every parameter's step match central differences",
          "[moe]") {
  constexpr float lr = 1e-3f;
  TransformerExpert expert(config(7, lr), seq);
  const TransformerParams before = expert.params();
  const auto x = inputs_of(random_floats(2 * seq * h, 11));
  const auto mask = mask_of({0, 0, 0, 1, 1, /**/ 0, 0, 0, 0, 0});
  const std::vector<float> g = random_floats(2 * seq * h, 12);
  auto grads = expert.backward({x, mask}, {inputs_of(g)});
  REQUIRE(grads.ok());
  REQUIRE(grads->size() == 2);
  CHECK(grads->at(1).type() == apiary::messages::dtype::bool_);
  const std::vector<float> gx = floats(grads->front());
  const TransformerParams after = expert.params();

  constexpr float eps = 1e-3f;
  TransformerExpert probe(config(0), seq);
  REQUIRE(probe.set_params(before));
  // The input gradient, element by element.
  std::vector<float> xs = floats(x);
  std::vector<float> numeric(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    auto plus = xs;
    auto minus = xs;
    plus[i] += eps;
    minus[i] -= eps;
    numeric[i] = static_cast<float>((loss(probe, inputs_of(plus), mask, g) - loss(probe, inputs_of(minus), mask, g)) /
                                    (2.0 * eps));
  }
  CHECK(max_abs_diff(gx, numeric) < 5e-3f);
  // Each parameter array moved by -lr times its gradient at the old parameters (every
  // fifth element checked, to keep the test short).
  const auto names = std::vector<std::string>{"in_w", "in_b", "out_w", "out_b", "ln1_g", "ln1_b",
                                              "w1",   "b1",   "w2",    "b2",    "ln2_g", "ln2_b"};
  for (std::size_t a = 0; a < names.size(); ++a) {
    INFO("parameter " << names[a]);
    const std::vector<float>& old = *before.all()[a];
    const std::vector<float>& now = *after.all()[a];
    float worst = 0.0f;
    float largest = 0.0f;
    for (std::size_t i = a % 5; i < old.size(); i += 5) {
      TransformerParams plus = before;
      TransformerParams minus = before;
      (*plus.all()[a])[i] += eps;
      (*minus.all()[a])[i] -= eps;
      REQUIRE(probe.set_params(plus));
      const double up = loss(probe, x, mask, g);
      REQUIRE(probe.set_params(minus));
      const auto expected = static_cast<float>((up - loss(probe, x, mask, g)) / (2.0 * eps));
      const float step = (old[i] - now[i]) / lr;
      worst = std::fmax(worst, std::fabs(step - expected));
      largest = std::fmax(largest, std::fabs(expected));
    }
    CHECK(worst < 2e-2f * std::fmax(1.0f, largest));
    CHECK(largest > 1e-3f);  // a step of zero would not pass
  }
}

TEST_CASE("transformer state restores the parameters bit for bit and refuses another expert's", "[moe]") {
  TransformerExpert a(config(8), seq);
  TransformerExpert b(config(9), seq);
  auto saved = a.state();
  REQUIRE(saved.ok());
  REQUIRE(b.load_state(*saved));
  const auto x = inputs_of(random_floats(seq * h, 13));
  const auto mask = mask_of({0, 0, 1, 0, 0});
  CHECK(forward(a, x, mask) == forward(b, x, mask));
  moe::FfnExpert ffn(config(8));
  auto other = ffn.state();
  REQUIRE(other.ok());
  auto refused = a.load_state(*other);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == apiary::errc::malformed);
  CHECK(forward(a, x, mask) == forward(b, x, mask));  // nothing of it was loaded
}
