// `apiary ps` with an all-reduce strategy: replicas averaging gradients through the
// collective actor and applying their optimizer locally.
#include "apps/ps_allreduce.hpp"

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

#include "actors/collective/collective.hpp"
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
using ps_roles::start_runtime;

/// Every replica of a job uses this name for the collective's handles and op ids.
constexpr const char* k_job = "apiary.ps.allreduce";


/// Every replica's multiaddr, in replica order, from --peers DEVICE=HOST:PORT.
Result<std::vector<core::PeerAddr>> members_of(const ArJobArgs& a, const cc::ArPlan& plan,
                                               std::vector<std::string>& host_ports) {
  return replica_members(a.peers, plan.replicas, "", host_ports);
}

/// Makes this replica's NCCL group once every replica is listening (nullptr: none needed).
using NcclMaker = std::function<Result<std::shared_ptr<actors::NcclGroup>>()>;

/// Trains replica `id` of `replicas` through `collective` (and the NCCL group `nccl`
/// makes, for the plan's NCCL groups). Returns the exit code.
int train(const ArJobArgs& a, const cc::ArPlan& plan, actors::Collective& collective, std::int32_t id,
          const NcclMaker& nccl) {
  const std::size_t replicas = plan.replicas.size();
  const auto data = cps::make_logistic_data(a.samples, a.features, a.seed);
  auto params = a.restored ? a.restored->values : cps::logistic_initial(a.features);
  const std::int64_t first = a.restored ? a.restored->step : 0;  // the data steps go on from the checkpoint's
  auto stepper = ArStepper::create(plan, a.optimizer, params);
  if (!stepper) return fail(stepper.error());
  if (a.restored && restores_optimizer(*a.restored, a.optimizer.kind)) {
    if (auto st = stepper->restore_optimizers(a.restored->states); !st) return fail(st.error());
  }
  const std::chrono::milliseconds patience(a.timeout_ms);
  if (auto joined = collective.join(patience); !joined) {
    return fail(make_error(joined.error().code, "replica {}: {}", id, joined.error().message));
  }
  auto group = nccl();
  if (!group) return fail(group.error());
  stepper->use_nccl(std::move(*group));
  // The chief's checkpoint after `global` steps, with this replica's optimizer state.
  auto checkpoint = [&](std::int64_t global) -> Status {
    return save_checkpoint(checkpoint_path(a.save, global), global, model_variables(a.features), params,
                           a.optimizer.kind, stepper->optimizer_states());
  };
  double total_ms = 0;
  for (std::int64_t step = 0; step < a.steps; ++step) {
    if (a.stopped != nullptr && *a.stopped) {
      return fail(make_error(errc::cancelled, "replica {}: stopped before step {}: stdin closed", id, step));
    }
    const auto start = std::chrono::steady_clock::now();
    if (id == 0 && periodic_checkpoint(a.save_every, step, first + step)) {
      if (auto saved = checkpoint(first + step); !saved) return fail(saved.error());
    }
    std::map<std::string, std::vector<float>> grads;
    const double loss = cps::logistic_loss(
        data, cps::logistic_batch(data, replicas, static_cast<std::size_t>(id), first + step, a.batch), params, &grads);
    if (a.step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.step_delay_ms));
    if (auto st = stepper->step(collective, grads, params, static_cast<double>(a.batch),
                                fmt::format("replica {} at step {}", id, step));
        !st) {
      // The members still calling this one learn why it left before it goes.
      collective.abandon(st.error(), std::min(std::chrono::milliseconds(1000), patience));
      return fail(st.error());
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    total_ms += ms;
    const std::string full = id == 0 ? fmt::format(" loss {:.6f}", cps::logistic_full_loss(data, params)) : "";
    std::fputs(fmt::format("step {} replica {} version {} batch_loss {:.6f}{} step_ms {:.3f}\n", step, id, step, loss,
                           full, ms)
                   .c_str(),
               stdout);
    std::fflush(stdout);
  }
  print_final(id, a.steps, cps::logistic_full_loss(data, params),
              a.steps > 0 ? total_ms / static_cast<double>(a.steps) : 0.0, collective.ops() + stepper->nccl_ops(),
              params);
  if (auto left = collective.leave(patience); !left)
    std::fprintf(stderr, "apiary ps: %s\n", left.error().what().c_str());
  // Only the chief writes the checkpoint: every replica holds the same parameters.
  if (id == 0 && !a.save.empty()) {
    if (auto saved = checkpoint(first + a.steps); !saved) return fail(saved.error());
  }
  return 0;
}

actors::CollectiveActorConfig collective_config(const ArJobArgs& a, std::size_t rank,
                                                std::vector<core::PeerAddr> members) {
  return allreduce_collective_config(a.timeout_ms, rank, std::move(members));
}

int run_process(const ArJobArgs& a, const cc::ArPlan& plan) {
  const std::int32_t id = a.role == "chief" ? 0 : a.replica;
  if (a.role == "worker" && (id <= 0 || static_cast<std::size_t>(id) >= plan.replicas.size())) {
    return fail(make_error(errc::invalid_argument, "--replica: expected a worker's replica id 1..{}, got {}",
                           static_cast<std::int64_t>(plan.replicas.size()) - 1, id));
  }
  std::vector<std::string> host_ports;
  auto members = members_of(a, plan, host_ports);
  if (!members) return fail(members.error());
  // Listen where the others will call this replica (unless --listen says otherwise).
  const std::string listen =
      a.listen == "127.0.0.1:0" || a.listen.empty() ? host_ports[static_cast<std::size_t>(id)] : a.listen;
  auto rt = start_runtime(listen, a.mode);
  if (!rt) return fail(rt.error());
  caf::actor_system& sys = (*rt)->system();
  const auto& gw = (*rt)->gateway();
  auto collective = actors::Collective::create(sys, gw, collective_config(a, static_cast<std::size_t>(id), *members));
  if (!collective) return fail(collective.error());
  print_allreduce_plan(plan);
  std::printf("replica %d of %zu (%s) listening %s: %lld steps of %zu samples, all-reduce\n", id, plan.replicas.size(),
              a.role.c_str(), gw->address().c_str(), static_cast<long long>(a.steps), a.batch);
  std::fflush(stdout);
  const auto root = (*members)[0];
  const int rc = train(a, plan, **collective, id, [&] {
    return nccl_group_for(sys, gw, plan, static_cast<std::size_t>(id), root, a.timeout_ms, k_job);
  });
  collective->reset();
  (*rt)->stop();
  return rc;
}

int run_embedded(const ArJobArgs& a, const cc::ArPlan& plan) {
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
  std::vector<std::unique_ptr<actors::Collective>> collectives;
  for (std::size_t r = 0; r < replicas; ++r) {
    auto c = actors::Collective::create(sys, gateways[r], collective_config(a, r, members));
    if (!c) {
      collectives.clear();
      stop_all();
      return fail(c.error());
    }
    collectives.push_back(std::move(*c));
  }
  print_allreduce_plan(plan);
  std::printf("embedded all-reduce job: %zu replicas: %lld steps of %zu samples\n", replicas,
              static_cast<long long>(a.steps), a.batch);
  std::fflush(stdout);
  std::vector<int> rcs(replicas, 0);
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < replicas; ++r) {
    threads.emplace_back([&, r] {
      rcs[r] = train(a, plan, *collectives[r], static_cast<std::int32_t>(r),
                     [&] { return nccl_group_for(sys, gateways[r], plan, r, members[0], a.timeout_ms, k_job); });
    });
  }
  for (auto& t : threads) t.join();
  collectives.clear();
  stop_all();
  for (int rc : rcs) {
    if (rc != 0) return rc;
  }
  return 0;
}

}  // namespace

Result<core::PeerAddr> replica_multiaddr(const std::string& host_port, const char* flag) {
  const auto colon = host_port.rfind(':');
  const std::string port = colon == std::string::npos ? "" : host_port.substr(colon + 1);
  if (colon == std::string::npos || colon == 0 || port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoul(port) == 0 || std::stoul(port) > 65535) {
    return make_error(errc::invalid_argument,
                      "{}: expected HOST:PORT with a fixed port such as 127.0.0.1:7000, got '{}'", flag, host_port);
  }
  std::string host = host_port.substr(0, colon);
  const bool v6 = host.size() >= 2 && host.front() == '[';
  if (v6) host = host.substr(1, host.size() - 2);
  return fmt::format("/{}/{}/tcp/{}", v6 ? "ip6" : "ip4", host, port);
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

actors::CollectiveActorConfig allreduce_collective_config(std::int64_t timeout_ms, std::size_t rank,
                                                          std::vector<core::PeerAddr> members) {
  actors::CollectiveActorConfig c;
  c.job = k_job;
  c.rank = rank;
  c.members = std::move(members);
  c.timeout = std::chrono::milliseconds(timeout_ms);
  return c;
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

Result<ArStepper> ArStepper::create(const cc::ArPlan& plan, const cps::OptimizerConfig& optimizer,
                                    const std::map<std::string, std::vector<float>>& params) {
  auto sync = cc::Synchronizer::create(plan);
  if (!sync) return sync.error();
  std::map<std::string, cps::Optimizer> optimizers;
  auto add = [&](const std::string& name, std::size_t width) -> Status {
    auto it = params.find(name);
    if (it == params.end()) {
      return make_error(errc::invalid_argument,
                        "all-reduced variable {}: expected initial values, got none; is the strategy for this model?",
                        name);
    }
    optimizers.emplace(name, cps::Optimizer(optimizer, it->second.size(), width));
    return ok_status();
  };
  for (const auto& v : plan.variables) {
    if (auto st = add(v.name, 1); !st) return st.error();
  }
  for (const auto& sp : plan.sparse) {
    if (auto st = add(sp.name, sp.row_width); !st) return st.error();
  }
  return ArStepper(std::move(*sync), std::move(optimizers));
}

std::map<std::string, cps::Optimizer::State> ArStepper::optimizer_states() const {
  std::map<std::string, cps::Optimizer::State> out;
  for (const auto& [name, optimizer] : optimizers_) out.emplace(name, optimizer.state());
  return out;
}

Status ArStepper::restore_optimizers(const std::map<std::string, cps::Optimizer::State>& states) {
  for (auto& [name, optimizer] : optimizers_) {
    auto it = states.find(name);
    if (it == states.end()) {
      return make_error(errc::invalid_argument, "--restore: expected the optimizer state of {}, got none", name);
    }
    if (auto st = optimizer.restore(it->second); !st) {
      return make_error(st.error().code, "--restore: {}: {}", name, st.error().message);
    }
  }
  return ok_status();
}

Status ArStepper::step(actors::Collective& collective, const std::map<std::string, std::vector<float>>& grads,
                       std::map<std::string, std::vector<float>>& params, double weight, const std::string& where) {
  const auto& plan = sync_.plan();
  // Dense variables: their gradients only (a mixed job's PS variables stay out).
  std::map<std::string, std::vector<float>> dense;
  for (const auto& v : plan.variables) {
    auto it = grads.find(v.name);
    if (it != grads.end()) dense.emplace(v.name, it->second);
  }
  // Sparse variables: the rows they touched, gathered by every replica and averaged there.
  std::map<std::string, cps::SparseGradient> sparse;
  for (const auto& sp : plan.sparse) {
    auto it = grads.find(sp.name);
    if (it == grads.end()) {
      return make_error(errc::invalid_argument, "{}: expected a gradient for sparse variable {}, got none", where,
                        sp.name);
    }
    sparse[sp.name] = cc::touched_rows(it->second, sp.row_width);
  }
  // One collective per fusion group, weighted by this replica's samples; every replica
  // gets the same bits (decode(encode(average))), so the copies stay identical.
  auto inputs = sync_.prepare(dense);
  if (!inputs) return make_error(inputs.error().code, "{}: {}", where, inputs.error().message);
  std::vector<std::vector<std::vector<float>>> outputs;
  for (auto& in : *inputs) {
    if (in.transport == cc::Transport::nccl && !nccl_) {
      return make_error(errc::unsupported,
                        "{} (fusion group {}): expected this replica's NCCL group for a NCCL collective, got "
                        "none; NCCL needs a GPU on every replica: run the replicas on their GPUs, or rebuild the "
                        "strategy with --spec RING",
                        where, in.group);
    }
    auto avg = in.transport == cc::Transport::nccl ? nccl_->mean(std::move(in.tensors), weight, in.codecs)
                                                   : collective.mean(std::move(in.tensors), weight, in.codecs);
    if (!avg) {
      return make_error(avg.error().code, "{} (fusion group {}): {}", where, in.group, avg.error().message);
    }
    outputs.push_back(std::move(*avg));
  }
  std::map<std::string, cps::SparseGradient> sparse_avg;
  if (!plan.sparse.empty()) {
    auto payload = sync_.prepare_sparse(sparse, weight);
    if (!payload) return make_error(payload.error().code, "{}: {}", where, payload.error().message);
    auto gathered = collective.gather(std::move(*payload));
    if (!gathered) {
      return make_error(gathered.error().code, "{} (sparse gather): {}", where, gathered.error().message);
    }
    auto rows = sync_.assemble_sparse(*gathered);
    if (!rows) return make_error(rows.error().code, "{}: {}", where, rows.error().message);
    sparse_avg = std::move(*rows);
  }
  auto averaged = sync_.assemble(outputs);
  if (!averaged) return make_error(averaged.error().code, "{}: {}", where, averaged.error().message);
  // Every replica applies the same averaged gradient to its own copy (sparse ones to
  // the touched rows only).
  for (auto& [name, opt] : optimizers_) {
    auto& values = params.at(name);
    auto dense_avg = averaged->find(name);
    auto applied = dense_avg != averaged->end() ? opt.apply_dense(values, dense_avg->second)
                                                : opt.apply_sparse(values, sparse_avg.at(name));
    if (!applied) return make_error(applied.error().code, "{}: {}", where, applied.error().message);
  }
  return ok_status();
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

int run_allreduce_job(const ArJobArgs& a, const cc::ArPlan& plan) {
  if (a.embedded) return run_embedded(a, plan);
  if (a.role == "ps") {
    return fail(make_error(errc::invalid_argument,
                           "--role ps: expected chief or worker, got ps; an all-reduce strategy has no parameter "
                           "servers (every replica keeps its own copy of the model)"));
  }
  return run_process(a, plan);
}

void print_final(std::int32_t id, std::int64_t version, double loss, double mean_ms, std::uint64_t collectives,
                 const std::map<std::string, std::vector<float>>& params) {
  std::string out = fmt::format("final replica {} version {} loss {:.6f} mean_step_ms {:.3f} collectives {}\n", id,
                                version, loss, mean_ms, collectives);
  for (const auto& [name, values] : params) {
    out += "final " + name;
    for (float v : values) out += fmt::format(" {:.9g}", v);
    out += "\n";
  }
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace apiary::apps
