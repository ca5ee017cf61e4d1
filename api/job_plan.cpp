// A training job's plans (the all-reduce plan, the PS part's training plan) from its
// strategy, checked against the logistic-regression model; the replicas' collective
// addresses, their NCCL group; and how the plans are printed.
#include <algorithm>
#include <chrono>
#include <map>

#include <fmt/format.h>

#include "api/job_files.hpp"
#include "api/training_job_parts.hpp"
#include "core/collective/synchronizer.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/strategy/resource_spec.hpp"
#include "core/strategy/validate.hpp"
#include "messages/identity/multiaddr.hpp"

namespace apiary::training_job {

namespace cc = core::collective;
namespace cps = core::ps;
namespace cs = core::strategy;

cps::OptimizerConfig optimizer_of(const Job& a) {
  cps::OptimizerConfig opt;
  opt.learning_rate = a.learning_rate;
  opt.kind = a.optimizer == "adam"       ? cps::OptimizerKind::adam
             : a.optimizer == "momentum" ? cps::OptimizerKind::momentum
                                         : cps::OptimizerKind::sgd;
  return opt;
}

std::vector<cps::VariablePlan> model_variables(std::size_t features) {
  std::vector<cps::VariablePlan> out;
  for (const auto& v : cps::logistic_graph_item(features).variables) out.push_back({v.name, v.shape, "", false, {}});
  return out;
}

Result<std::pair<std::string, std::uint16_t>> split_host_port(const std::string& text, const char* what) {
  auto m = messages::Multiaddr::from_host_port(text, what);
  if (!m) return m.error();
  return std::make_pair(m->host, m->port);
}

Result<core::PeerAddr> replica_multiaddr(const std::string& host_port, const char* flag) {
  auto m = messages::Multiaddr::from_host_port(host_port, flag);
  if (!m || m->port == 0) {
    return make_error(errc::invalid_argument,
                      "{}: expected HOST:PORT with a fixed port such as 127.0.0.1:7000, got '{}'", flag, host_port);
  }
  return core::PeerAddr(std::move(*m));
}

Result<std::vector<core::PeerAddr>> replica_members(const std::vector<std::string>& peers,
                                                    const std::vector<std::string>& replicas,
                                                    const std::string& prefix, std::vector<std::string>& host_ports) {
  std::map<std::string, std::string> given;
  for (const auto& p : peers) {
    if (p.compare(0, prefix.size(), prefix) != 0) continue;
    const auto eq = p.find('=');
    if (eq == std::string::npos) {
      return make_error(errc::invalid_argument,
                        "--peers: expected {}DEVICE=HOST:PORT of every replica, such as "
                        "{}localhost:CPU:0=127.0.0.1:7000, got '{}'",
                        prefix, prefix, p);
    }
    given[p.substr(prefix.size(), eq - prefix.size())] = p.substr(eq + 1);
  }
  std::vector<core::PeerAddr> out;
  for (const auto& device : replicas) {
    auto it = given.find(device);
    if (it == given.end()) {
      return make_error(errc::invalid_argument,
                        "--peers: expected an address for every replica device of the strategy, got none for {}; the "
                        "replicas all-reduce among themselves, so each needs every replica's {}DEVICE=HOST:PORT",
                        device, prefix);
    }
    auto m = replica_multiaddr(it->second);
    if (!m) return m.error();
    out.push_back(*m);
    host_ports.push_back(it->second);
  }
  return out;
}

namespace {

/// The model's graph item, with the variables in `sparse` marked sparse. Errors:
/// invalid_argument for a name that is not a variable of the model, when `strict`.
Result<cs::GraphItem> model_item(const Job& a, const std::vector<std::string>& sparse, bool strict) {
  auto item = cps::logistic_graph_item(a.features);
  for (const auto& name : sparse) {
    auto var =
        std::find_if(item.variables.begin(), item.variables.end(), [&](const auto& v) { return v.name == name; });
    if (var != item.variables.end()) {
      var->sparse = true;
    } else if (strict) {
      return make_error(errc::invalid_argument, "--sparse: expected a variable of the model ({} or {}), got '{}'",
                        cps::k_logreg_weights, cps::k_logreg_bias, name);
    }
  }
  return item;
}

/// `strategy` checked against the model `item` and the cluster `spec`. Errors:
/// invalid_argument naming the strategy file.
Status check_strategy(const Job& a, const pb::autodist::Strategy& strategy, const cs::GraphItem& item,
                      const cs::ResourceSpec& spec) {
  if (auto valid = cs::validate(strategy, item, spec); !valid) {
    return make_error(errc::invalid_argument, "{}: {} (the model is logistic regression: {} [{}] and {} [1])",
                      a.strategy, valid.error().message, cps::k_logreg_weights, a.features, cps::k_logreg_bias);
  }
  return ok_status();
}

/// Whether any fusion group of `plan` runs over NCCL.
bool uses_nccl(const cc::ArPlan& plan) {
  return std::any_of(plan.groups.begin(), plan.groups.end(),
                     [](const cc::ArGroup& g) { return g.transport == cc::Transport::nccl; });
}

}  // namespace

Result<std::optional<cc::ArPlan>> load_allreduce_plan(const Job& a, const pb::autodist::Strategy& strategy) {
  if (!cc::uses_allreduce(strategy)) return std::optional<cc::ArPlan>{};
  auto spec = load_resource_spec(a.resource_spec);
  if (!spec) return spec.error();
  auto item = model_item(a, a.sparse, true);
  if (!item) return item.error();
  if (auto valid = check_strategy(a, strategy, *item, *spec); !valid) return valid.error();
  cc::ArOptions options;
  options.allow_ps = true;  // a mixed strategy's PS variables go to its PS processes
  // NCCL needs one GPU per rank: AUTO and NCCL run over it when every replica has one.
  options.have_gpus = strategy.graph_config().replicas_size() > 0;
  for (const auto& device : strategy.graph_config().replicas()) {
    auto name = cs::parse_device_name(device);
    if (!name || name->type != cs::DeviceType::gpu) options.have_gpus = false;
  }
  auto plan = cc::plan_allreduce(strategy, item.value(), options);
  if (!plan) return Error{plan.error().code, a.strategy + ": " + plan.error().message};
  return std::optional<cc::ArPlan>(std::move(*plan));
}

Result<cps::TrainingPlan> load_plan(const Job& a, const pb::autodist::Strategy& strategy, bool ps_only) {
  auto spec = load_resource_spec(a.resource_spec);
  if (!spec) return spec.error();
  auto item = model_item(a, ps_only ? a.sparse : std::vector<std::string>{}, false);
  if (!item) return item.error();
  if (auto valid = check_strategy(a, strategy, *item, *spec); !valid) return valid.error();
  return cps::plan_training(ps_only ? cc::ps_part(strategy) : strategy, *item, optimizer_of(a));
}

std::string format_allreduce_plan(const cc::ArPlan& plan) {
  std::string groups;
  for (const auto& g : plan.groups) {
    groups += fmt::format("{}group {} [", groups.empty() ? "" : " ", g.group);
    for (std::size_t k = 0; k < g.tensors.size(); ++k) {
      const auto& t = plan.tensors[g.tensors[k]];
      groups += fmt::format("{}{} {}", k == 0 ? "" : ", ", t.name, to_string(t.compressor));
    }
    groups += "]";
  }
  for (const auto& sp : plan.sparse) groups += fmt::format("{}gather [{} sparse]", groups.empty() ? "" : " ", sp.name);
  const std::size_t collectives = plan.groups.size() + (plan.sparse.empty() ? 0 : 1);
  std::string out = fmt::format("all-reduce plan: {} replicas, {} collectives per step ({}): {}\n",
                                plan.replicas.size(), collectives, uses_nccl(plan) ? "NCCL" : "RING", groups);
  for (const auto& n : plan.notes) out += fmt::format("note: {}\n", n);
  if (auto sync = cc::Synchronizer::create(plan)) {
    for (std::size_t v = 0; v < plan.variables.size(); ++v) {
      if (!sync->whole(v)) continue;
      out += fmt::format("note: {}'s {} pieces travel whole, one tensor (they follow one another in one collective)\n",
                         plan.variables[v].name, plan.variables[v].shards.size());
    }
  }
  return out;
}

std::string devices_of(const cps::TrainingPlan& plan, const cps::VariablePlan& v) {
  std::string devices;
  for (auto shard : v.shards) {
    const auto& d = plan.shards[shard].device;
    if (devices.find(d) == std::string::npos) devices += (devices.empty() ? "" : ",") + d;
  }
  return devices;
}

std::string format_mixed_plan(const cc::ArPlan& ar, const cps::TrainingPlan& ps) {
  std::string on_ps;
  for (const auto& v : ps.variables) {
    on_ps += fmt::format("{}{}{} on {}", on_ps.empty() ? "" : ", ", v.name, v.sparse ? " (sparse)" : "",
                         devices_of(ps, v));
  }
  std::string reduced;
  for (const auto& v : ar.variables) reduced += (reduced.empty() ? "" : ", ") + v.name;
  for (const auto& sp : ar.sparse) reduced += (reduced.empty() ? "" : ", ") + sp.name + " (sparse)";
  return fmt::format("mixed plan: PS [{}]; all-reduce [{}]\n", on_ps, reduced) + format_allreduce_plan(ar);
}

Result<std::shared_ptr<actors::NcclGroup>> nccl_group_for(caf::actor_system& sys, std::shared_ptr<actors::Gateway> gw,
                                                          const cc::ArPlan& plan, std::size_t rank,
                                                          const core::PeerAddr& root, std::int64_t timeout_ms,
                                                          const std::string& job) {
  if (!uses_nccl(plan)) return std::shared_ptr<actors::NcclGroup>{};
  const std::string& device = plan.replicas.at(rank);
  auto name = cs::parse_device_name(device);
  if (!name || name->type != cs::DeviceType::gpu) {
    return make_error(errc::unsupported,
                      "replica {}: NCCL needs a GPU on every replica; expected a GPU device, got {}; give every "
                      "replica a GPU in the resource spec, or rebuild the strategy with --spec RING",
                      rank, device);
  }
  actors::NcclGroupConfig config;
  config.group = job;
  config.rank = rank;
  config.ranks = plan.replicas.size();
  config.root = root.key();
  config.device = static_cast<int>(name->index);
  config.timeout = std::chrono::milliseconds(timeout_ms);
  auto group = actors::NcclGroup::create(sys, std::move(gw), config);
  if (!group) return make_error(group.error().code, "replica {} ({}): {}", rank, device, group.error().message);
  return std::shared_ptr<actors::NcclGroup>(std::move(*group));
}

}  // namespace apiary::training_job
