// Choosing a compression by tensor size, role and key.
#include <catch2/catch.hpp>

#include "messages/tensor/adaptive.hpp"

namespace msg = apiary::messages;
namespace pb = apiary::pb;

TEST_CASE("SizeAdaptive switches at the threshold, counting whole-tensor elements") {
  const msg::SizeAdaptive choose{500, pb::NONE, pb::FLOAT16};
  CHECK(choose.choose({"w", 499, msg::tensor_role::parameter}) == pb::NONE);
  CHECK(choose.choose({"w", 500, msg::tensor_role::parameter}) == pb::FLOAT16);
  CHECK(choose.choose({"w", 0, msg::tensor_role::parameter}) == pb::NONE);
}

TEST_CASE("RoleAdaptive picks by role, with a fallback for unspecified") {
  msg::RoleAdaptive choose;
  choose.activation = pb::FLOAT16;
  choose.parameter = pb::MEANSTD_16BIT;
  choose.gradient = pb::UNIFORM_8BIT;
  choose.optimizer = pb::QUANTILE_8BIT;
  choose.fallback = pb::BLOCKWISE_8BIT;
  CHECK(choose.choose({"", 1, msg::tensor_role::activation}) == pb::FLOAT16);
  CHECK(choose.choose({"", 1, msg::tensor_role::parameter}) == pb::MEANSTD_16BIT);
  CHECK(choose.choose({"", 1, msg::tensor_role::gradient}) == pb::UNIFORM_8BIT);
  CHECK(choose.choose({"", 1, msg::tensor_role::optimizer}) == pb::QUANTILE_8BIT);
  CHECK(choose.choose({"", 1, msg::tensor_role::unspecified}) == pb::BLOCKWISE_8BIT);
}

TEST_CASE("PerTensor picks by key, with a fallback for other keys") {
  const msg::PerTensor choose{{{"embedding", pb::UNIFORM_8BIT}, {"head", pb::FLOAT16}},
                              pb::MEANSTD_16BIT};
  CHECK(choose.choose({"embedding", 10, msg::tensor_role::parameter}) == pb::UNIFORM_8BIT);
  CHECK(choose.choose({"head", 10, msg::tensor_role::parameter}) == pb::FLOAT16);
  CHECK(choose.choose({"other", 10, msg::tensor_role::parameter}) == pb::MEANSTD_16BIT);
}
