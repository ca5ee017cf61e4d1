// core/ps/checkpoint: a PS job's checkpoint round trip (values, shapes, optimizer
// state), and what decode and check refuse.
#include <catch2/catch.hpp>

#include "core/ps/checkpoint.hpp"
#include "ps.pb.h"

using namespace apiary;
using namespace apiary::core::ps;

namespace {

const std::vector<VariablePlan> k_variables = {VariablePlan{"w", {2, 3}, "", false, {}},
                                               VariablePlan{"b", {}, "", false, {}}};

std::map<std::string, std::vector<float>> values() { return {{"w", {1, 2, 3, 4, 5, 6}}, {"b", {-0.5F}}}; }

std::map<std::string, Optimizer::State> adam_states() {
  return {{"w", Optimizer::State{7, {0.1F, 0.2F, 0.3F, 0.4F, 0.5F, 0.6F}, {1, 1, 1, 1, 1, 1}}},
          {"b", Optimizer::State{7, {0.25F}, {2.0F}}}};
}

}  // namespace

TEST_CASE("a checkpoint round-trips values, shapes and optimizer state", "[ps][checkpoint]") {
  auto bytes = encode_checkpoint(12, k_variables, values(), OptimizerKind::adam, adam_states());
  REQUIRE(bytes.ok());
  auto c = decode_checkpoint(*bytes);
  REQUIRE(c.ok());
  CHECK(c->step == 12);
  CHECK(c->optimizer == "adam");
  CHECK(c->values == values());
  CHECK(c->shapes.at("w") == std::vector<std::int64_t>{2, 3});
  CHECK(c->shapes.at("b").empty());
  CHECK(c->states.at("w").updates == 7);
  CHECK(c->states.at("w").m == adam_states().at("w").m);
  CHECK(c->states.at("b").v == std::vector<float>{2.0F});
  CHECK(check_checkpoint(*c, k_variables).ok());
  // A plan with fewer variables (a mixed strategy's PS part) fits too.
  CHECK(check_checkpoint(*c, {k_variables[1]}).ok());
}

TEST_CASE("encode refuses values or state that do not fit, check names what does not match", "[ps][checkpoint]") {
  auto short_w = values();
  short_w["w"].pop_back();
  CHECK_THAT(encode_checkpoint(1, k_variables, short_w, OptimizerKind::sgd, {{"w", {}}, {"b", {}}}).error().message,
             Catch::Contains("expected 6 values of w for shape [2, 3], got 5"));
  auto bad_slot = adam_states();
  bad_slot["w"].m.resize(4);
  CHECK_THAT(encode_checkpoint(1, k_variables, values(), OptimizerKind::adam, bad_slot).error().message,
             Catch::Contains("optimizer state of w"));
  auto c = decode_checkpoint(*encode_checkpoint(1, k_variables, values(), OptimizerKind::sgd, {{"w", {}}, {"b", {}}}));
  REQUIRE(c.ok());
  auto other = k_variables;
  other[0].shape = {3, 2};
  CHECK_THAT(check_checkpoint(*c, other).error().message,
             Catch::Contains("expected variable 'w' of shape [3, 2], got shape [2, 3]"));
  CHECK_THAT(check_checkpoint(*c, {VariablePlan{"v", {1}, "", false, {}}}).error().message,
             Catch::Contains("expected variable 'v' of shape [1], got none"));
}

TEST_CASE("decode refuses what is not a well-formed checkpoint", "[ps][checkpoint]") {
  CHECK_THAT(decode_checkpoint("\xff\xff\xff").error().message, Catch::Contains("expected a PsCheckpoint"));
  auto base = [] {
    pb::PsCheckpoint m;
    m.set_step(3);
    m.set_optimizer("momentum");
    auto* v = m.add_variables();
    v->set_name("b");
    v->add_values(1.0F);
    return m;
  };
  auto negative = base();
  negative.set_step(-1);
  auto unknown = base();
  unknown.set_optimizer("lion");
  auto twice = base();
  *twice.add_variables() = twice.variables(0);
  auto slot = base();
  slot.mutable_variables(0)->add_slot_m(1.0F);
  slot.mutable_variables(0)->add_slot_m(2.0F);
  auto unfilled = base();
  unfilled.mutable_variables(0)->add_shape(3);
  const std::vector<std::pair<pb::PsCheckpoint, std::string>> cases = {
      {negative, "expected a step >= 0"},
      {unknown, "expected optimizer sgd, momentum or adam, got 'lion'"},
      {twice, "appears twice"},
      {slot, "slots of 2 and 0"},
      {unfilled, "of shape [3] expected 3 values"},
  };
  for (const auto& [m, why] : cases) {
    auto c = decode_checkpoint(m.SerializeAsString());
    REQUIRE_FALSE(c.ok());
    CHECK(c.error().code == errc::malformed);
    CHECK_THAT(c.error().message, Catch::Contains(why));
  }
  CHECK(decode_checkpoint(base().SerializeAsString()).ok());
}

TEST_CASE("an optimizer continues from a restored state, and refuses one of another kind", "[ps][optimizer]") {
  OptimizerConfig adam;
  adam.kind = OptimizerKind::adam;
  adam.learning_rate = 0.1F;
  Optimizer a(adam, 3, 1), b(adam, 3, 1);
  std::vector<float> pa(3, 1.0F), pb(3, 1.0F);
  const std::vector<float> g = {0.5F, -1.0F, 2.0F};
  REQUIRE(a.apply_dense(pa, g).ok());
  REQUIRE(a.apply_dense(pa, g).ok());
  pb = pa;
  REQUIRE(b.restore(a.state()).ok());  // b takes over where a stands
  REQUIRE(a.apply_dense(pa, g).ok());
  REQUIRE(b.apply_dense(pb, g).ok());
  CHECK(pa == pb);
  CHECK(b.updates() == 3);
  OptimizerConfig sgd;
  CHECK_FALSE(Optimizer(sgd, 3, 1).restore(a.state()).ok());  // SGD has no slots
  CHECK_FALSE(b.restore(Optimizer::State{1, {1.0F}, {1.0F}}).ok());
}
