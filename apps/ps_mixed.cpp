// `apiary ps` with a mixed strategy: PS variables pulled and pushed through the
// replica driver, all-reduced variables averaged by apiary::Replica.
#include "apps/ps_mixed.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "api/replica.hpp"
#include "apps/ps_allreduce.hpp"
#include "apps/ps_checkpoint.hpp"
#include "core/collective/synchronizer.hpp"
#include "core/ps/logistic_regression.hpp"

namespace apiary::apps {
namespace {

namespace cc = core::collective;
namespace cps = core::ps;
using ps_roles::fail;
using ps_roles::optimizer_of;
using ps_roles::PsArgs;
using ps_roles::ReplicaRun;

/// Values per row of axis 0 of `shape` (1 for a scalar or a vector).
std::size_t row_width(const std::vector<std::int64_t>& shape) {
  std::size_t width = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) width *= static_cast<std::size_t>(shape[d]);
  return width;
}

/// The gradients the PS variables push: whole tensors, or the touched rows of a sparse one.
std::map<std::string, cps::Gradient> ps_gradients(const cps::TrainingPlan& ps,
                                                  const std::map<std::string, std::vector<float>>& grads) {
  std::map<std::string, cps::Gradient> out;
  for (const auto& v : ps.variables) {
    const auto& g = grads.at(v.name);
    if (v.sparse) {
      out.emplace(v.name, cc::touched_rows(g, row_width(v.shape)));
    } else {
      out.emplace(v.name, g);
    }
  }
  return out;
}

/// One replica of a mixed job: `members` are every replica's collective multiaddrs.
/// Returns the exit code.
int train_mixed(const PsArgs& a, const cc::ArPlan& ar, const cps::TrainingPlan& ps, ReplicaRun& run,
                std::vector<core::PeerAddr> members) {
  auto& driver = run.driver;
  const std::int32_t id = driver.id();
  const std::size_t replicas = ar.replicas.size();
  const core::PeerAddr root = members.at(0);
  const auto data = cps::make_logistic_data(a.samples, a.features, a.seed);
  auto params = a.restored ? a.restored->values : cps::logistic_initial(a.features);
  const std::int64_t first = a.restored ? a.restored->step : 0;  // the data steps go on from the checkpoint's
  const auto optimizer = optimizer_of(a);
  const std::chrono::milliseconds patience(a.timeout_ms);
  // The dense groups whose spec runs over NCCL: the replicas' NCCL group.
  auto group = nccl_group_for(run.system, run.gateway, ar, static_cast<std::size_t>(id), root, a.timeout_ms,
                              "apiary.ps.mixed");
  if (!group) return fail(group.error());
  // The all-reduced variables: this replica's copy, averaged with the others' (apiary::Replica).
  ReplicaOptions o;
  o.roles.replica = id;
  o.roles.ar = std::make_shared<const cc::ArPlan>(ar);
  o.roles.members = std::move(members);
  o.roles.job = "apiary.ps.allreduce";
  o.roles.optimizer = optimizer;
  o.roles.initial = params;
  o.roles.exchange_timeout = patience;
  o.roles.label = "mixed replica";
  o.nccl = std::move(*group);
  o.patience = patience * static_cast<std::int64_t>(4 + 2 * ar.groups.size());
  auto reduced = Replica::start(run.system, run.gateway, std::move(o));
  if (!reduced) return fail(reduced.error());
  auto& replica = **reduced;
  if (a.restored && restores_optimizer(*a.restored, optimizer.kind)) {
    if (auto st = replica.restore_optimizers(a.restored->states); !st) {
      return fail(make_error(st.error().code, "--restore: {}", st.error().message));
    }
  }
  if (auto joined = replica.join(patience); !joined) {
    return fail(make_error(joined.error().code, "replica {}: {}", id, joined.error().message));
  }
  // The chief's checkpoint after `global` steps: the PS variables' optimizer state from
  // their shards, the all-reduced ones' from this replica.
  auto checkpoint = [&](std::int64_t global) -> Status {
    auto states = driver.optimizer_states();
    if (!states) return states.error();
    auto own = replica.optimizer_states();
    if (!own) return own.error();
    for (auto& [name, state] : *own) (*states)[name] = std::move(state);
    return save_checkpoint(checkpoint_path(a.save, global), global, model_variables(a.features), params,
                           optimizer.kind, *states);
  };
  // A step's parameters: the PS variables pulled, this replica's copy of the all-reduced ones.
  auto pull = [&]() -> Status {
    if (auto pulled = driver.pull_into(params); !pulled) return pulled.error();
    auto own = replica.pull();
    if (!own) return own.error();
    for (auto& [name, values] : own->params) params[name] = std::move(values);
    return ok_status();
  };
  double total_ms = 0;
  for (std::int64_t step = 0; step < a.steps; ++step) {
    if (ps_roles::g_stdin_closed) {
      return fail(make_error(errc::cancelled, "replica {}: stopped before step {}: stdin closed", id, step));
    }
    const auto start = std::chrono::steady_clock::now();
    // 1. The PS variables of this step.
    if (auto pulled = pull(); !pulled) return fail(pulled.error());
    const auto version = driver.min_version();
    if (id == 0 && periodic_checkpoint(a.save_every, step, first + step)) {
      if (auto saved = checkpoint(first + step); !saved) return fail(saved.error());
    }
    // 2. Gradients of the whole model on this replica's batch.
    std::map<std::string, std::vector<float>> grads;
    const double loss =
        cps::logistic_loss(data,
                           cps::logistic_batch(data, replicas, static_cast<std::size_t>(id), first + step, a.batch),
                           params, &grads);
    if (a.step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.step_delay_ms));
    // 3. The PS variables' gradients to their shards.
    if (auto pushed = driver.push(ps_gradients(ps, grads), static_cast<double>(a.batch)); !pushed) {
      return fail(pushed.error());
    }
    // 4. The all-reduced variables: averaged with the other replicas, applied here.
    if (auto st = replica.push(std::move(grads), static_cast<double>(a.batch)); !st) return fail(st.error());
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    total_ms += ms;
    // Replica 0 reports the loss of the parameters it trained with this step.
    const std::string full = id == 0 ? fmt::format(" loss {:.6f}", cps::logistic_full_loss(data, params)) : "";
    std::fputs(fmt::format("step {} replica {} version {} batch_loss {:.6f}{} step_ms {:.3f}\n", step, id, version,
                           loss, full, ms)
                   .c_str(),
               stdout);
    std::fflush(stdout);
  }
  // The PS variables after the last step (in BSP: every replica's pushes applied).
  if (auto pulled = pull(); !pulled) return fail(pulled.error());
  print_final(id, driver.min_version(), cps::logistic_full_loss(data, params),
              a.steps > 0 ? total_ms / static_cast<double>(a.steps) : 0.0,
              replica.collectives(), params);
  if (auto left = driver.leave(); !left) std::fprintf(stderr, "apiary ps: %s\n", left.error().what().c_str());
  if (auto left = replica.leave(patience); !left) {
    std::fprintf(stderr, "apiary ps: %s\n", left.error().what().c_str());
  }
  // Only the chief writes the checkpoint: every replica holds the same parameters.
  if (id == 0 && !a.save.empty()) {
    if (auto saved = checkpoint(first + a.steps); !saved) return fail(saved.error());
  }
  return 0;
}

/// A replica process: its collective members from the `replica:` entries of --peers,
/// the PS devices from the others (or the DHT).
int run_mixed_replica(const PsArgs& a, const cc::ArPlan& ar, cps::TrainingPlan ps) {
  const std::int32_t id = a.role == "chief" ? 0 : a.replica;
  if (a.role == "worker" && (id <= 0 || static_cast<std::size_t>(id) >= ar.replicas.size())) {
    return fail(make_error(errc::invalid_argument,
                           "--replica: expected a worker's replica id 1..{}, got {} (replica 0 is the chief)",
                           static_cast<std::int64_t>(ar.replicas.size()) - 1, id));
  }
  std::vector<std::string> host_ports;
  auto members = replica_members(a.peers, ar.replicas, k_replica_peer_prefix, host_ports);
  if (!members) return fail(members.error());
  PsArgs ps_args = a;
  ps_args.peers.clear();
  for (const auto& p : a.peers) {
    if (p.rfind(k_replica_peer_prefix, 0) != 0) ps_args.peers.push_back(p);
  }
  // Listen where the other replicas will call this one (unless --listen says otherwise).
  if (a.listen == "127.0.0.1:0" || a.listen.empty()) ps_args.listen = host_ports[static_cast<std::size_t>(id)];
  print_mixed_plan(ar, ps);
  std::fflush(stdout);
  auto trainer = [&](ReplicaRun& run) { return train_mixed(ps_args, ar, ps, run, *members); };
  return ps_roles::run_replica(ps_args, ps, trainer);  // a copy: `trainer` reads `ps`
}

int run_mixed_embedded(const PsArgs& a, const cc::ArPlan& ar, const cps::TrainingPlan& ps) {
  print_mixed_plan(ar, ps);
  std::fflush(stdout);
  auto trainer = [&](ReplicaRun& run) {
    std::vector<core::PeerAddr> members;
    for (const auto& address : run.replica_addresses) {
      auto m = replica_multiaddr(address, "replica gateway");
      if (!m) return fail(m.error());
      members.push_back(*m);
    }
    return train_mixed(a, ar, ps, run, std::move(members));
  };
  return ps_roles::run_embedded(a, ps, trainer);
}

}  // namespace

void print_mixed_plan(const cc::ArPlan& ar, const cps::TrainingPlan& ps) {
  std::string on_ps;
  for (const auto& v : ps.variables) {
    std::string devices;
    for (auto shard : v.shards) {
      const auto& d = ps.shards[shard].device;
      if (devices.find(d) == std::string::npos) devices += (devices.empty() ? "" : ",") + d;
    }
    on_ps += fmt::format("{}{}{} on {}", on_ps.empty() ? "" : ", ", v.name, v.sparse ? " (sparse)" : "", devices);
  }
  std::string reduced;
  for (const auto& v : ar.variables) reduced += (reduced.empty() ? "" : ", ") + v.name;
  for (const auto& sp : ar.sparse) reduced += (reduced.empty() ? "" : ", ") + sp.name + " (sparse)";
  std::printf("mixed plan: PS [%s]; all-reduce [%s]\n", on_ps.c_str(), reduced.c_str());
  print_allreduce_plan(ar);
}

int run_mixed_job(const PsArgs& a, const cc::ArPlan& ar, cps::TrainingPlan ps) {
  if (a.embedded) return run_mixed_embedded(a, ar, ps);
  return run_mixed_replica(a, ar, std::move(ps));
}

}  // namespace apiary::apps
