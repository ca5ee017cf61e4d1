#pragma once
/// An all-reduce plan of one dense variable "w" [2] in one fusion group, among
/// `replicas` replicas ("localhost:CPU:r"): what the replica tests over real gateways share.
#include <cstddef>
#include <memory>
#include <string>

#include "core/collective/ar_plan.hpp"

namespace apiary::testing {

inline std::shared_ptr<const core::collective::ArPlan> one_variable_plan(std::size_t replicas) {
  core::collective::ArPlan plan;
  core::ps::VariablePlan v;
  v.name = "w";
  v.shape = {2};
  v.shards = {0};
  plan.variables.push_back(v);
  for (std::size_t r = 0; r < replicas; ++r) plan.replicas.push_back("localhost:CPU:" + std::to_string(r));
  core::collective::ArTensor t;
  t.name = "w";
  t.size = 2;
  plan.tensors.push_back(t);
  core::collective::ArGroup g;
  g.tensors = {0};
  plan.groups.push_back(g);
  return std::make_shared<const core::collective::ArPlan>(std::move(plan));
}

}  // namespace apiary::testing
