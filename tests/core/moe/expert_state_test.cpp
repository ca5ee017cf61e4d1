// Checkpoint states of the C++ experts (saved and restored bit for bit, refused when
// they are another expert's) and the det_dropout expert.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/moe/dropout_expert.hpp"
#include "core/moe/expert_backend.hpp"
#include "tests/core/moe/expert_tensors.hpp"

namespace {

namespace moe = apiary::core::moe;
using apiary::errc;
using expert_test::floats;
using expert_test::random_floats;
using expert_test::rows_of;

moe::FfnConfig config(std::uint32_t h, std::uint64_t seed) {
  moe::FfnConfig c;
  c.hidden_dim = h;
  c.seed = seed;
  c.learning_rate = 0.1f;
  return c;
}

moe::Tensor mask_of(const std::vector<std::int64_t>& values, std::uint32_t h) {
  auto t = moe::Tensor::copy_of(apiary::messages::dtype::int64, {static_cast<std::uint32_t>(values.size() / h), h},
                                values.data(), values.size() * sizeof(std::int64_t));
  REQUIRE(t.ok());
  return *t;
}

std::vector<float> forward_floats(moe::ExpertBackend& e, const std::vector<moe::Tensor>& inputs) {
  auto out = e.forward(inputs);
  REQUIRE(out.ok());
  return floats(out->front());
}

}  // namespace

TEST_CASE("an ffn expert's state restores it bit for bit in another expert") {
  moe::FfnExpert trained(config(8, 1));
  const auto x = rows_of(random_floats(3 * 8, 7), 8);
  REQUIRE(trained.backward({x}, {rows_of(random_floats(3 * 8, 8), 8)}).ok());
  auto state = trained.state();
  REQUIRE(state.ok());

  moe::FfnExpert restored(config(8, 2));
  REQUIRE(forward_floats(restored, {x}) != forward_floats(trained, {x}));
  REQUIRE(restored.load_state(*state).ok());
  CHECK(forward_floats(restored, {x}) == forward_floats(trained, {x}));
  CHECK(restored.params().w1 == trained.params().w1);
  CHECK(restored.params().b2 == trained.params().b2);
}

TEST_CASE("a state of another expert is refused and changes nothing") {
  moe::FfnExpert expert(config(8, 1));
  const auto before = expert.params().w1;
  auto other_h = moe::FfnExpert(config(4, 1)).state();
  auto other_cls = moe::DetDropoutExpert(config(8, 1)).state();
  REQUIRE(other_h.ok());
  REQUIRE(other_cls.ok());
  auto own = expert.state();
  REQUIRE(own.ok());
  for (const std::string& bad : {*other_h, *other_cls, own->substr(0, own->size() - 1), std::string("garbage")}) {
    auto loaded = expert.load_state(bad);
    REQUIRE_FALSE(loaded.ok());
    CHECK(loaded.error().code == errc::malformed);
  }
  CHECK(expert.params().w1 == before);
  CHECK(moe::NopExpert(8).state().error().code == errc::unsupported);
}

TEST_CASE("det_dropout drops by the given mask and gives the same bits again") {
  moe::DetDropoutExpert expert(config(4, 3), 0.5f);
  const auto x = rows_of(random_floats(2 * 4, 5), 4);
  const auto mask = mask_of({1, 0, 1, 0, 0, 0, 1, 1}, 4);
  const auto y = forward_floats(expert, {x, mask});
  const auto all = forward_floats(expert, {x, mask_of({1, 1, 1, 1, 1, 1, 1, 1}, 4)});
  const std::vector<std::int64_t> m = {1, 0, 1, 0, 0, 0, 1, 1};
  for (std::size_t i = 0; i < m.size(); ++i) CHECK(y[i] == (m[i] != 0 ? all[i] : 0.0f));
  CHECK(forward_floats(expert, {x, mask}) == y);
  auto wrong = expert.forward({x, x});
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().message.find("int64") != std::string::npos);
}

TEST_CASE("det_dropout backward matches the numerical gradient and steps its parameters") {
  const std::uint32_t h = 3;
  const auto xs = random_floats(2 * h, 11);
  const auto g = random_floats(2 * h, 12);
  const auto mask = mask_of({1, 1, 0, 1, 0, 1}, h);
  auto loss = [&](const std::vector<float>& x) {
    moe::DetDropoutExpert fresh(config(h, 4));
    const auto y = forward_floats(fresh, {rows_of(x, h), mask});
    double sum = 0;
    for (std::size_t i = 0; i < y.size(); ++i) sum += static_cast<double>(y[i]) * g[i];
    return sum;
  };
  moe::DetDropoutExpert expert(config(h, 4));
  const auto before = forward_floats(expert, {rows_of(xs, h), mask});
  auto grads = expert.backward({rows_of(xs, h), mask}, {rows_of(g, h)});
  REQUIRE(grads.ok());
  REQUIRE(grads->size() == 2);
  CHECK((*grads)[1].type() == apiary::messages::dtype::int64);
  const auto gx = floats((*grads)[0]);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    auto up = xs;
    auto down = xs;
    up[i] += 1e-2f;
    down[i] -= 1e-2f;
    CHECK(gx[i] == Approx((loss(up) - loss(down)) / 2e-2).margin(1e-3));
  }
  CHECK(forward_floats(expert, {rows_of(xs, h), mask}) != before);
}
