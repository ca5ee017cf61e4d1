#pragma once
/// A modelled device as a role, for simulated averagers: it answers local method
/// "reduce" (args core::averaging::ReduceJob) with reduce_part()'s result, one job at a
/// time in arrival order, each taking inputs x values x `ns_per_value` of virtual time.
#include <map>
#include <string>
#include <vector>

#include "core/averaging/part_reducer.hpp"
#include "core/role.hpp"

namespace apiary::sim::scenarios {

class ModelledDevice final : public core::Role {
 public:
  explicit ModelledDevice(double ns_per_value) : ns_per_value_(ns_per_value) {}

  [[nodiscard]] std::vector<std::string> handles() const override { return {}; }
  [[nodiscard]] core::Effects on(core::TimePoint now, core::Input input) override;

 private:
  struct Job {
    core::OpId op = 0;
    core::averaging::ReduceJob job;
  };
  double ns_per_value_ = 0;
  std::map<core::TimerId, Job> jobs_;  ///< by the timer of their end
  core::TimerId next_timer_ = 1;
  core::TimePoint free_{};  ///< when the device finishes its queue
};

}  // namespace apiary::sim::scenarios
