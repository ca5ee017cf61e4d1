// `apiary ps` with an all-reduce strategy: replicas (apiary::Replica) averaging gradients
// with each other and applying their optimizer locally.
#include "apps/ps_allreduce.hpp"

#include "messages/identity/multiaddr.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <fmt/format.h>

#include "actors/collective/nccl_group.hpp"
#include "api/replica.hpp"
#include "api/startup.hpp"
#include "apps/commands.hpp"
#include "apps/ps_checkpoint.hpp"
#include "apps/ps_roles.hpp"
#include "core/collective/synchronizer.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/strategy/resource_spec.hpp"
#include "core/strategy/strategy_io.hpp"
#include "core/strategy/validate.hpp"

namespace apiary::apps {
namespace {

namespace cc = core::collective;
namespace cps = core::ps;
namespace cs = core::strategy;
using ps_roles::fail;
using ps_roles::PsArgs;
using ps_roles::start_runtime;

/// Every replica of a job uses this name for the collective's handles and op ids.
constexpr const char* k_job = "apiary.ps.allreduce";


/// One replica of the job on `gw` (its members: every replica's multiaddr), trained.
int run_replica_on(const PsArgs& a, const cc::ArPlan& plan, caf::actor_system& sys,
                   std::shared_ptr<actors::Gateway> gw, std::int32_t id, std::vector<core::PeerAddr> members) {
  ps_roles::AllReducePart part{std::make_shared<const cc::ArPlan>(plan), std::move(members)};
  auto replica = ps_roles::start_replica(a, sys, std::move(gw), id, nullptr, {}, {}, part, k_job);
  if (!replica) return fail(replica.error());
  return ps_roles::train(a, **replica, plan.replicas.size(), true);
}

int run_process(const PsArgs& a, const cc::ArPlan& plan) {
  const std::int32_t id = a.role == "chief" ? 0 : a.replica;
  if (a.role == "worker" && (id <= 0 || static_cast<std::size_t>(id) >= plan.replicas.size())) {
    return fail(make_error(errc::invalid_argument, "--replica: expected a worker's replica id 1..{}, got {}",
                           static_cast<std::int64_t>(plan.replicas.size()) - 1, id));
  }
  std::vector<std::string> host_ports;
  auto members = replica_members(a.peers, plan.replicas, "", host_ports);
  if (!members) return fail(members.error());
  // Listen where the others will call this replica (unless --listen says otherwise).
  const std::string listen =
      a.listen == "127.0.0.1:0" || a.listen.empty() ? host_ports[static_cast<std::size_t>(id)] : a.listen;
  auto rt = start_runtime(listen, a.mode);
  if (!rt) return fail(rt.error());
  print_allreduce_plan(plan);
  std::printf("replica %d of %zu (%s) listening %s: %lld steps of %zu samples, all-reduce\n", id, plan.replicas.size(),
              a.role.c_str(), (*rt)->gateway()->address().c_str(), static_cast<long long>(a.steps), a.batch);
  std::fflush(stdout);
  const int rc = run_replica_on(a, plan, (*rt)->system(), (*rt)->gateway(), id, std::move(*members));
  (*rt)->stop();
  return rc;
}

int run_embedded(const PsArgs& a, const cc::ArPlan& plan) {
  auto config = api::node_actor_system_config(0);
  caf::actor_system sys(*config);
  const std::size_t replicas = plan.replicas.size();
  std::vector<std::shared_ptr<actors::Gateway>> gateways;
  std::vector<core::PeerAddr> members;
  auto stop_all = [&gateways] {
    for (auto& gw : gateways) gw->stop();
  };
  for (std::size_t r = 0; r < replicas; ++r) {
    actors::GatewayConfig gc;
    gc.backend = actors::Backend::local;
    auto gw = actors::Gateway::start(sys, gc);
    if (!gw) {
      stop_all();
      return fail(gw.error());
    }
    gateways.push_back(*gw);
    auto m = replica_multiaddr((*gw)->address());
    if (!m) {
      stop_all();
      return fail(m.error());
    }
    members.push_back(*m);
  }
  print_allreduce_plan(plan);
  std::printf("embedded all-reduce job: %zu replicas: %lld steps of %zu samples\n", replicas,
              static_cast<long long>(a.steps), a.batch);
  std::fflush(stdout);
  std::vector<int> rcs(replicas, 0);
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < replicas; ++r) {
    threads.emplace_back(
        [&, r] { rcs[r] = run_replica_on(a, plan, sys, gateways[r], static_cast<std::int32_t>(r), members); });
  }
  for (auto& t : threads) t.join();
  stop_all();
  for (int rc : rcs) {
    if (rc != 0) return rc;
  }
  return 0;
}

}  // namespace

Result<core::PeerAddr> replica_multiaddr(const std::string& host_port, const char* flag) {
  auto m = messages::Multiaddr::from_host_port(host_port, flag);
  if (!m || m->port == 0) {
    return make_error(errc::invalid_argument,
                      "{}: expected HOST:PORT with a fixed port such as 127.0.0.1:7000, got '{}'", flag, host_port);
  }
  return m->to_string();
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

void print_allreduce_plan(const cc::ArPlan& plan) {
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
  const std::string transport = uses_nccl(plan) ? "NCCL" : "RING";
  std::printf("all-reduce plan: %zu replicas, %zu collectives per step (%s): %s\n", plan.replicas.size(),
              collectives, transport.c_str(), groups.c_str());
  for (const auto& n : plan.notes) std::printf("note: %s\n", n.c_str());
}

bool uses_nccl(const cc::ArPlan& plan) {
  return std::any_of(plan.groups.begin(), plan.groups.end(),
                     [](const cc::ArGroup& g) { return g.transport == cc::Transport::nccl; });
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
  config.root = root;
  config.device = static_cast<int>(name->index);
  config.timeout = std::chrono::milliseconds(timeout_ms);
  auto group = actors::NcclGroup::create(sys, std::move(gw), config);
  if (!group) return make_error(group.error().code, "replica {} ({}): {}", rank, device, group.error().message);
  return std::shared_ptr<actors::NcclGroup>(std::move(*group));
}

Result<std::optional<cc::ArPlan>> load_allreduce_plan(const std::string& strategy_path, bool text,
                                                      const std::string& spec_path, std::size_t features,
                                                      const std::vector<std::string>& sparse) {
  auto bytes = read_file(strategy_path, "strategy");
  if (!bytes) return bytes.error();
  auto strategy =
      cs::parse_strategy(*bytes, text ? cs::StrategyFormat::text : cs::StrategyFormat::binary, strategy_path);
  if (!strategy) return strategy.error();
  if (!cc::uses_allreduce(*strategy)) return std::optional<cc::ArPlan>{};
  auto spec_text = read_file(spec_path, "resource spec");
  if (!spec_text) return spec_text.error();
  auto spec = cs::parse_resource_spec(*spec_text, spec_path);
  if (!spec) return spec.error();
  auto item = cps::logistic_graph_item(features);
  for (const auto& name : sparse) {
    auto var =
        std::find_if(item.variables.begin(), item.variables.end(), [&](const auto& v) { return v.name == name; });
    if (var == item.variables.end()) {
      return make_error(errc::invalid_argument, "--sparse: expected a variable of the model ({} or {}), got '{}'",
                        cps::k_logreg_weights, cps::k_logreg_bias, name);
    }
    var->sparse = true;
  }
  if (auto valid = cs::validate(*strategy, item, *spec); !valid) {
    return make_error(errc::invalid_argument, "{}: {} (the model is logistic regression: {} [{}] and {} [1])",
                      strategy_path, valid.error().message, cps::k_logreg_weights, features, cps::k_logreg_bias);
  }
  cc::ArOptions options;
  options.allow_ps = true;  // a mixed strategy's PS variables go to apps/ps_mixed.hpp
  // NCCL needs one GPU per rank: AUTO and NCCL run over it when every replica has one.
  options.have_gpus = strategy->graph_config().replicas_size() > 0;
  for (const auto& device : strategy->graph_config().replicas()) {
    auto name = cs::parse_device_name(device);
    if (!name || name->type != cs::DeviceType::gpu) options.have_gpus = false;
  }
  auto plan = cc::plan_allreduce(*strategy, item, options);
  if (!plan) return Error{plan.error().code, strategy_path + ": " + plan.error().message};
  return std::optional<cc::ArPlan>(std::move(*plan));
}

int run_allreduce_job(const PsArgs& a, const cc::ArPlan& plan) {
  if (a.embedded) return run_embedded(a, plan);
  if (a.role == "ps") {
    return fail(make_error(errc::invalid_argument,
                           "--role ps: expected chief or worker, got ps; an all-reduce strategy has no parameter "
                           "servers (every replica keeps its own copy of the model)"));
  }
  return run_process(a, plan);
}

void print_final(std::int32_t id, std::int64_t version, double loss, double mean_ms,
                 std::optional<std::uint64_t> collectives, const std::map<std::string, std::vector<float>>& params) {
  std::string out = fmt::format("final replica {} version {} loss {:.6f} mean_step_ms {:.3f}", id, version, loss,
                                mean_ms);
  if (collectives) out += fmt::format(" collectives {}", *collectives);
  out += "\n";
  for (const auto& [name, values] : params) {
    out += "final " + name;
    for (float v : values) out += fmt::format(" {:.9g}", v);
    out += "\n";
  }
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace apiary::apps
