// A replica of a training job, whatever the strategy: apiary::Replica started from the
// job's plans and addresses, and the one training loop of the logistic-regression model.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "api/job_files.hpp"
#include "api/training_job_parts.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/ps/values_text.hpp"

namespace apiary::training_job {

namespace cps = core::ps;

namespace {

/// Processor time of the calling thread, in milliseconds.
double thread_cpu_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

/// The multiaddrs of "host:port" addresses, by the same keys.
template <class K>
Result<std::map<K, core::PeerAddr>> multiaddrs(const std::map<K, actors::PeerKey>& keys, const char* what) {
  std::map<K, core::PeerAddr> out;
  for (const auto& [k, host_port] : keys) {
    auto m = replica_multiaddr(host_port, what);
    if (!m) return m.error();
    out.emplace(k, std::move(*m));
  }
  return out;
}

/// A replica's final line and parameters, as every kind of job prints them.
std::string format_final(std::int32_t id, std::int64_t version, double loss, double mean_ms,
                         std::optional<std::uint64_t> collectives,
                         const std::map<std::string, std::vector<float>>& params) {
  std::string out = fmt::format("final replica {} version {} loss {:.6f} mean_step_ms {:.3f}", id, version, loss,
                                mean_ms);
  if (collectives) out += fmt::format(" collectives {}", *collectives);
  out += "\n";
  for (const auto& [name, values] : params) {
    out += "final " + name;
    out += cps::values_text(values);
    out += "\n";
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<Replica>> start_replica(const Job& a, caf::actor_system& system,
                                               std::shared_ptr<actors::Gateway> gateway, std::int32_t id,
                                               const cps::TrainingPlan* ps,
                                               const std::map<std::string, actors::PeerKey>& servers,
                                               const std::map<std::size_t, actors::PeerKey>& pull_via,
                                               const AllReducePart& ar, const std::string& nccl_job) {
  const std::chrono::milliseconds timeout(a.timeout_ms);
  ReplicaOptions o;
  o.roles.replica = id;
  if (ps != nullptr && !ps->variables.empty()) {
    o.roles.ps = std::make_shared<const cps::TrainingPlan>(*ps);
    auto addrs = multiaddrs(servers, "PS address");
    if (!addrs) return addrs.error();
    o.roles.servers = std::move(*addrs);
    auto via = multiaddrs(pull_via, "proxy address");
    if (!via) return via.error();
    o.roles.pull_via = std::move(*via);
  }
  // A pull or push waits for the slowest replica, each call bounded by the timeout.
  o.patience = timeout + std::chrono::seconds(1);
  if (ar.plan) {
    if (ar.members.empty() || static_cast<std::size_t>(id) >= ar.members.size()) {
      return make_error(errc::invalid_argument, "replica {}: expected every replica's collective address, got {}", id,
                        ar.members.size());
    }
    o.roles.ar = ar.plan;
    o.roles.members = ar.members;
    o.roles.job = "apiary.ps.allreduce";
    o.roles.exchange_timeout = timeout;
    o.patience += timeout * static_cast<std::int64_t>(4 + 2 * ar.plan->groups.size());
    // The dense groups whose spec runs over NCCL: the replicas' NCCL group.
    auto group = nccl_group_for(system, gateway, *ar.plan, static_cast<std::size_t>(id), ar.members.front(),
                                a.timeout_ms, nccl_job);
    if (!group) return group.error();
    o.nccl = std::move(*group);
  }
  o.roles.optimizer = optimizer_of(a);
  o.roles.initial = a.restored ? a.restored->values : cps::logistic_initial(a.features);
  o.roles.call_timeout = timeout;
  if (a.ps_restart_wait_ms > 0 && o.roles.ps) {
    // A PS started again continues from its latest checkpoint: the pushes since, kept.
    std::int64_t staleness = 0;
    for (const auto& shard : o.roles.ps->shards) staleness = std::max(staleness, shard.config.staleness);
    o.roles.ps_restart_wait = std::chrono::milliseconds(a.ps_restart_wait_ms);
    o.roles.replay_steps = a.save_every > 0 ? 2 * a.save_every + staleness + 2 : a.steps;
    o.patience += std::chrono::milliseconds(a.ps_restart_wait_ms);
  }
  auto replica = Replica::start(system, std::move(gateway), std::move(o));
  if (!replica) return replica.error();
  if (ar.plan && a.restored && restores_optimizer(*a.restored, optimizer_of(a).kind)) {
    if (auto st = (*replica)->restore_optimizers(a.restored->states); !st) {
      return make_error(st.error().code, "--restore: {}", st.error().message);
    }
  }
  return replica;
}

Status train(const Job& a, Replica& replica, std::size_t replicas, bool collectives) {
  const std::int32_t id = replica.id();
  const auto data = cps::make_logistic_data(a.samples, a.features, a.seed, a.density);
  const std::int64_t first = a.restored ? a.restored->step : 0;  // the data steps go on from the checkpoint's
  const std::chrono::milliseconds timeout(a.timeout_ms);
  if (auto joined = replica.join(timeout); !joined) {
    return a.out.fail(make_error(joined.error().code, "replica {}: {}", id, joined.error().message));
  }
  // A step that failed: the replica has stopped, refusing every later part of the
  // all-reduce with the reason, so the members still calling it learn why it left (which
  // member went down first) before it goes, rather than only that it is gone.
  auto failed = [&](const Error& e) {
    if (collectives) std::this_thread::sleep_for(std::min(timeout, std::chrono::milliseconds(1000)));
    return a.out.fail(e);
  };
  // The parameters and gradients live across steps: pulls land in the one, pushes are
  // sent from the other.
  std::map<std::string, std::vector<float>> params;
  std::map<std::string, std::vector<float>> grads;
  // The chief's checkpoint of `params` after `global` steps, with every variable's
  // optimizer state (the PS variables' from their shards).
  auto checkpoint = [&](std::int64_t global) -> Status {
    auto states = replica.optimizer_states();
    if (!states) return states.error();
    const std::string path = checkpoint_path(a.save, global);
    auto saved = save_checkpoint(path, global, model_variables(a.features), params, optimizer_of(a).kind, *states);
    if (saved) a.out.print(fmt::format("checkpoint {} step {}\n", path, global));
    return saved;
  };
  double total_ms = 0;
  std::int64_t version = 0;
  std::int64_t trained = 0;  // steps this process ran
  for (std::int64_t next = 0;;) {
    if (a.stop != nullptr && *a.stop) {
      return a.out.fail(make_error(errc::cancelled, "replica {}: stopped before step {}: {}", id, next, a.stop_reason));
    }
    const auto start = std::chrono::steady_clock::now();
    if (auto pulled = replica.pull_into(params, &version); !pulled) return failed(pulled.error());
    // The job's step: this replica's count, unless it rejoined a running job (its PS
    // devices had dropped it), which it then joins where it stands.
    const std::int64_t step = replica.step();
    if (trained == 0 && step > next) {
      a.out.print(fmt::format("replica {} rejoined the running job at step {}\n", id, step));
    }
    if (step >= a.steps) break;  // the parameters after the last step
    ++trained;
    if (id == 0 && periodic_checkpoint(a.save_every, step, first + step)) {
      if (auto saved = checkpoint(first + step); !saved) return a.out.fail(saved.error());
    }
    // The gradient's processor time (this thread's): what a step's arithmetic costs inside
    // the running job, beside its wall time.
    const double compute_begin = thread_cpu_ms();
    const double loss = cps::logistic_loss(
        data, cps::logistic_batch(data, replicas, static_cast<std::size_t>(id), first + step, a.batch), params, &grads);
    const double compute_ms = thread_cpu_ms() - compute_begin;
    if (a.step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.step_delay_ms));
    if (auto pushed = replica.push_lent(grads, static_cast<double>(a.batch)); !pushed) return failed(pushed.error());
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    total_ms += ms;
    std::string full;
    if (id == 0) {
      const double loss_begin = thread_cpu_ms();
      const double full_loss = cps::logistic_full_loss(data, params);
      full = fmt::format(" loss {:.6f} loss_cpu_ms {:.3f}", full_loss, thread_cpu_ms() - loss_begin);
    }
    a.out.print(fmt::format("step {} replica {} version {} batch_loss {:.6f}{} step_ms {:.3f} gradient_cpu_ms {:.3f}\n",
                            step, id, version, loss, full, ms, compute_ms));
    next = step + 1;
  }
  // `params` are the parameters after the last step (in BSP: every replica's updates applied).
  const double mean_ms = trained > 0 ? total_ms / static_cast<double>(trained) : 0.0;
  a.out.print(format_final(id, version, cps::logistic_full_loss(data, params), mean_ms,
                           collectives ? std::optional<std::uint64_t>(replica.collectives()) : std::nullopt, params));
  // Only the chief writes the checkpoint: every replica holds the same parameters.
  Status result = ok_status();
  if (id == 0 && !a.save.empty()) {
    if (auto saved = checkpoint(first + a.steps); !saved) result = a.out.fail(saved.error());
  }
  // A replica that trained to the end but could not leave cleanly still succeeded.
  if (auto left = replica.leave(timeout); !left) (void)a.out.fail(left.error());
  return result;
}

}  // namespace apiary::training_job
