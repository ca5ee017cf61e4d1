#include "sim/scenarios/ar_member.hpp"

#include <utility>

namespace apiary::sim::scenarios {

namespace cc = core::collective;
namespace cps = core::ps;

Result<ArMember> ArMember::create(ArMemberConfig config, const std::map<std::string, std::vector<float>>& params) {
  const auto& plan = *config.plan;
  std::vector<std::string> names;
  for (const auto& v : plan.variables) names.push_back(v.name);
  for (const auto& sp : plan.sparse) names.push_back(sp.name);
  for (const auto& name : names) {
    if (params.count(name) == 0) {
      return make_error(errc::invalid_argument, "{} {}: expected initial values of {}, got none", config.label,
                        config.rank, name);
    }
  }
  cc::ExchangeConfig ec;
  ec.peers = config.members;
  ec.self = config.rank;
  ec.handle = config.job + "::Collective.rpc_exchange";
  ec.id_base = k_ar_member_id_base;
  ec.timeout = config.timeout;
  auto step = cc::ArStep::create(plan, std::move(ec));
  if (!step) return step.error();
  ArMember member(std::move(config), std::move(*step));
  for (const auto& v : plan.variables) {
    member.optimizers_.emplace(v.name, cps::Optimizer(member.config_.optimizer, params.at(v.name).size(), 1));
  }
  for (const auto& sp : plan.sparse) {
    member.optimizers_.emplace(sp.name,
                               cps::Optimizer(member.config_.optimizer, params.at(sp.name).size(), sp.row_width));
  }
  return member;
}

ArMember::ArMember(ArMemberConfig config, cc::ArStep step)
    : config_(std::move(config)), handle_(config_.job + "::Collective.rpc_exchange"), step_(std::move(step)) {}

Result<core::Effects> ArMember::begin(core::TimePoint now, std::size_t step_index,
                                      const std::map<std::string, std::vector<float>>& gradients, double weight,
                                      const std::set<core::PeerAddr>& down) {
  // A member whose connection broke answers nothing more: fail now, as a gateway would.
  if (auto peer = step_.first_down(down)) {
    return make_error(errc::peer_down,
                      "replica {} at step {}: expected every member to take part in collective op {} of job {}, but "
                      "{} went down; the job cannot continue without it",
                      config_.rank, step_index, step_.ops(), config_.job, step_.name_of(*peer));
  }
  return step_.begin(now, gradients, weight);
}

core::Effects ArMember::on_request(core::TimePoint now, core::RequestId id, const std::string& handle,
                                   const std::string& request) {
  if (handle != handle_) {
    return {core::Reply{id,
                        make_error(errc::not_found, "replica {}: expected a call to {}, got a call to '{}'",
                                   config_.rank, handle_, handle),
                        true}};
  }
  return step_.on_request(now, id, request);
}

std::optional<Error> ArMember::lost(const core::PeerAddr& peer, std::size_t step_index) const {
  for (std::size_t r = 0; r < config_.members.size(); ++r) {
    if (r == config_.rank || config_.members[r] != peer) continue;
    return make_error(errc::peer_down,
                      "replica {} at step {}: expected every member to take part in collective op {} of job {}, but "
                      "the connection to {} broke (it went down); the job cannot continue without it",
                      config_.rank, step_index, step_.ops(), config_.job, step_.name_of(peer));
  }
  return std::nullopt;
}

Status ArMember::apply(std::size_t step_index, std::map<std::string, std::vector<float>>& params) {
  auto averaged = step_.take();
  if (!averaged) {
    return make_error(averaged.error().code, "replica {} at step {}: {}", config_.rank, step_index,
                      averaged.error().message);
  }
  // Every replica applies the same averages to its own copy (sparse ones to the touched
  // rows only).
  return cc::apply_averages(*averaged, optimizers_, params);
}

core::Effects ArMember::stop(const Error& why) {
  return step_.stop(make_error(errc::unavailable, "replica {} failed: {}", config_.rank, why.message));
}

}  // namespace apiary::sim::scenarios
