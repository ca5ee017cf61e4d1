#include "sim/scenarios/modelled_device.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/averaging/averager_role.hpp"

namespace apiary::sim::scenarios {

core::Effects ModelledDevice::on(core::TimePoint now, core::Input input) {
  if (auto* c = std::get_if<core::LocalCall>(&input)) {
    auto* job = c->args.as<core::averaging::ReduceJob>();
    if (c->method != core::averaging::k_reduce_method || job == nullptr) return {core::unknown_method(*c, "the modelled device")};
    std::size_t values = 0;
    for (const auto& in : job->inputs) values += in.size();
    const auto cost = std::chrono::duration_cast<core::Duration>(
        std::chrono::duration<double, std::nano>(ns_per_value_ * static_cast<double>(values)));
    free_ = std::max(free_, now) + cost;
    const core::TimerId timer = next_timer_++;
    jobs_.emplace(timer, Job{c->op, std::move(*job)});
    return {core::SetTimer{timer, free_}};
  }
  if (auto* t = std::get_if<core::TimerFired>(&input)) {
    auto it = jobs_.find(t->id);
    if (it == jobs_.end()) return {};
    Job done = std::move(it->second);
    jobs_.erase(it);
    auto reduced = core::averaging::reduce_part(std::move(done.job));
    if (!reduced) return {core::Complete{done.op, reduced.error()}};
    return {core::Complete{done.op, core::Value::of(std::move(reduced.value()))}};
  }
  return {};
}

}  // namespace apiary::sim::scenarios
