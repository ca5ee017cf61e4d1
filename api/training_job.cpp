// apiary::run_training_job: the plans of a job's strategy, then this process's part: a
// PS device, a replica (of a PS, all-reduce or mixed strategy), or the whole job embedded.
#include "api/training_job.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "api/job_directory.hpp"
#include "api/job_files.hpp"
#include "api/training_job_parts.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/strategy/resource_spec.hpp"
#include "messages/identity/multiaddr.hpp"

namespace apiary {
namespace training_job {

namespace cc = core::collective;
namespace cps = core::ps;
namespace cs = core::strategy;

Result<std::unique_ptr<Runtime>> start_runtime(const std::string& host_port, const std::string& mode,
                                               bool insecure, const std::string& authority) {
  auto hp = split_host_port(host_port, "--listen");
  if (!hp) return hp.error();
  auto listen = messages::Multiaddr::from_ip(hp->first, hp->second);
  if (!listen) return make_error(errc::invalid_argument, "--listen: {}", listen.error().message);
  RuntimeOptions ro;
  ro.listen = listen->to_string();
  ro.mode = mode == "shm" ? transport::Mode::shm : transport::Mode::tcp;
  ro.insecure = insecure;
  ro.authorization.authority_file = authority;
  return Runtime::start(ro);
}

ParameterServerOptions ps_options(const Job& a, const cps::TrainingPlan& plan, const std::string& device) {
  ParameterServerOptions o;
  o.device = device;
  o.plan = std::make_shared<const cps::TrainingPlan>(plan);
  // A resumed PS continues from the latest --save checkpoint, or from the job's start.
  const auto& from = a.resume && a.resumed ? a.resumed : a.restored;
  o.initial = from ? from->values : cps::logistic_initial(a.features);
  if (from && restores_optimizer(*from, optimizer_of(a).kind)) o.states = from->states;
  if (a.resume) o.resume_at = (from ? from->step : 0) - (a.restored ? a.restored->step : 0);
  if (a.drop_lost_after_ms >= 0) o.drop_lost_replicas_after = std::chrono::milliseconds(a.drop_lost_after_ms);
  return o;
}

namespace {

/// Every replica of an all-reduce job uses this name for the collective's handles and op ids.
constexpr const char* k_allreduce_job = "apiary.ps.allreduce";
/// ... and of a PS or mixed job, for its NCCL group.
constexpr const char* k_mixed_job = "apiary.ps.mixed";

/// --peers DEVICE=HOST:PORT entries.
Result<std::map<std::string, actors::PeerKey>> parse_peers(const std::vector<std::string>& peers) {
  std::map<std::string, actors::PeerKey> out;
  for (const auto& p : peers) {
    const auto eq = p.find('=');
    if (eq == std::string::npos) {
      return make_error(errc::invalid_argument,
                        "--peers: expected DEVICE=HOST:PORT such as "
                        "localhost:CPU:0=127.0.0.1:7000, got '{}'",
                        p);
    }
    if (auto hp = split_host_port(p.substr(eq + 1), "--peers"); !hp) return hp.error();
    out[p.substr(0, eq)] = p.substr(eq + 1);
  }
  return out;
}

/// A PS process: serves the shards the plan puts on --device, publishing its address in
/// the job's DHT (the first PS process bootstraps it), until `wait_for_stop` returns.
Status run_ps(const Job& a, const cps::TrainingPlan& plan, const std::function<std::string()>& wait_for_stop) {
  auto started_rt = start_runtime(a.listen, a.mode, a.insecure, a.authority);
  if (!started_rt) return a.out.fail(started_rt.error());
  Runtime& rt = **started_rt;
  auto ps = ParameterServer::start(rt, ps_options(a, plan, a.device));
  if (!ps) {
    rt.stop();
    return a.out.fail(ps.error());
  }
  auto dht = start_job_dht(rt.system(), rt.gateway(), a.initial_peers);
  if (!dht) {
    ps->reset();
    rt.stop();
    return a.out.fail(dht.error());
  }
  auto publisher = std::make_unique<AddressPublisher>(**dht);
  publisher->add(ps_key(a.job, a.device), rt.gateway()->address());
  a.out.print(fmt::format("ps {} listening {} shards {}\nps {} dht {} key {}\n", a.device, rt.gateway()->address(),
                          (*ps)->shard_names(), a.device, (*dht)->address().to_string(), ps_key(a.job, a.device)));
  std::string reason;
  if (a.until_replicas_finish) {
    constexpr auto k_unbounded = std::chrono::hours(24 * 365 * 100);  // stopped by a.stop only
    const bool done = (*ps)->wait_replicas_done(k_unbounded, a.stop);
    reason = done ? "every replica finished" : a.stop_reason;
  } else {
    reason = wait_for_stop();
  }
  a.out.print(fmt::format("ps {} stopping on {}\n", a.device, reason));
  publisher.reset();
  (*dht)->stop();
  ps->reset();
  rt.stop();
  return ok_status();
}

/// A replica process (--role chief|worker): finds the PS processes (--peers or the DHT),
/// starts its replica (with the job's all-reduce part, for a mixed strategy) and trains.
Status run_replica(const Job& a, cps::TrainingPlan plan, const AllReducePart& ar = {}) {
  const std::int32_t id = a.role == "chief" ? 0 : a.replica;
  if (a.role == "worker" && id <= 0) {
    return a.out.fail(make_error(errc::invalid_argument,
                                 "--replica: expected a worker's replica id 1..{}, got {} "
                                 "(replica 0 is the chief)",
                                 static_cast<std::int64_t>(plan.replicas.size()) - 1, id));
  }
  auto servers = parse_peers(a.peers);
  if (!servers) return a.out.fail(servers.error());
  // --peers proxy:<node>=HOST:PORT name node proxies; PS devices without an entry are
  // looked up in the DHT.
  std::map<std::string, std::string> proxies;
  auto wanted = split_peers(a, plan, *servers, proxies);
  if (!wanted) return a.out.fail(wanted.error());
  auto started_rt = start_runtime(a.listen, a.mode, a.insecure, a.authority);
  if (!started_rt) return a.out.fail(started_rt.error());
  Runtime& rt = **started_rt;
  // The job's DHT node, when there is one to join: finds the PS devices not in --peers.
  std::unique_ptr<Dht> dht;
  std::unique_ptr<AddressPublisher> publisher;
  auto stop_all = [&] {
    publisher.reset();
    if (dht) dht->stop();
    rt.gateway()->stop();
  };
  if (!a.initial_peers.empty()) {
    auto started = start_job_dht(rt.system(), rt.gateway(), a.initial_peers);
    if (!started) {
      stop_all();
      return a.out.fail(started.error());
    }
    dht = std::move(*started);
    publisher = std::make_unique<AddressPublisher>(*dht);
  }
  if (!wanted->empty()) {
    auto found = find_addresses(*dht, *wanted, std::chrono::milliseconds(a.timeout_ms), "PS device",
                                fmt::format("start a PS process for each (apiary ps --role ps --device DEVICE) with "
                                            "--job {} and --initial-peers of the same DHT, or give --peers "
                                            "DEVICE=HOST:PORT",
                                            a.job));
    if (!found) {
      stop_all();
      return a.out.fail(found.error());
    }
    servers->insert(found->begin(), found->end());
  }
  // The processes of a job may start in any order: wait for each PS device to serve.
  for (const auto& device : plan.servers) {
    auto serving = wait_until_serving(*rt.gateway(), device, servers->at(device), std::chrono::milliseconds(a.timeout_ms),
                                      fmt::format("replica {}", id),
                                      fmt::format("start `apiary ps --role ps --device {}` of the same job", device),
                                      core::ps::k_ps_join_handle, "PS device", a.stop);
    if (!serving) {
      stop_all();
      return a.out.fail(serving.error());
    }
  }
  auto proxy =
      setup_node_proxy(a, plan, id, *servers, proxies, rt.system(), rt.gateway(), dht.get(), publisher.get());
  if (!proxy) {
    stop_all();
    return a.out.fail(proxy.error());
  }
  const std::size_t replicas = plan.replicas.size();
  auto replica = start_replica(a, rt.system(), rt.gateway(), id, &plan, *servers, proxy->pull_via, ar, k_mixed_job);
  if (!replica) {
    proxy->expected_reads = proxy->readers = 0;
    finish_node_proxy(a, *proxy, *rt.gateway(), id);
    stop_all();
    return a.out.fail(replica.error());
  }
  a.out.print(fmt::format("replica {} of {} ({}) listening {}: {} steps of {} samples\n", id, replicas, a.role,
                          rt.gateway()->address(), a.steps, a.batch));
  const Status trained = train(a, **replica, replicas, ar.plan != nullptr);
  replica->reset();
  if (!trained) proxy->expected_reads = proxy->readers = 0;  // a failed job: do not wait for the others' reads
  finish_node_proxy(a, *proxy, *rt.gateway(), id);
  stop_all();
  return trained;
}

/// A replica process of an all-reduce job: its members from --peers DEVICE=HOST:PORT of
/// every replica; it listens on its own entry unless --listen says otherwise.
Status run_allreduce_replica(const Job& a, const cc::ArPlan& plan) {
  const std::int32_t id = a.role == "chief" ? 0 : a.replica;
  if (a.role == "worker" && (id <= 0 || static_cast<std::size_t>(id) >= plan.replicas.size())) {
    return a.out.fail(make_error(errc::invalid_argument, "--replica: expected a worker's replica id 1..{}, got {}",
                                 static_cast<std::int64_t>(plan.replicas.size()) - 1, id));
  }
  std::vector<std::string> host_ports;
  auto members = replica_members(a.peers, plan.replicas, "", host_ports);
  if (!members) return a.out.fail(members.error());
  const std::string listen =
      a.listen == "127.0.0.1:0" || a.listen.empty() ? host_ports[static_cast<std::size_t>(id)] : a.listen;
  auto rt = start_runtime(listen, a.mode, a.insecure, a.authority);
  if (!rt) return a.out.fail(rt.error());
  a.out.print(format_allreduce_plan(plan) +
              fmt::format("replica {} of {} ({}) listening {}: {} steps of {} samples, all-reduce\n", id,
                          plan.replicas.size(), a.role, (*rt)->gateway()->address(), a.steps, a.batch));
  AllReducePart part{std::make_shared<const cc::ArPlan>(plan), std::move(*members)};
  Status trained = ok_status();
  {
    auto replica = start_replica(a, (*rt)->system(), (*rt)->gateway(), id, nullptr, {}, {}, part, k_allreduce_job);
    trained = replica ? train(a, **replica, plan.replicas.size(), true) : Status(a.out.fail(replica.error()));
  }
  (*rt)->stop();
  return trained;
}

/// A replica process of a mixed job: its collective members from the `replica:` entries
/// of --peers, the PS devices from the others (or the DHT).
Status run_mixed_replica(const Job& a, const cc::ArPlan& ar, cps::TrainingPlan ps) {
  const std::int32_t id = a.role == "chief" ? 0 : a.replica;
  if (a.role == "worker" && (id <= 0 || static_cast<std::size_t>(id) >= ar.replicas.size())) {
    return a.out.fail(make_error(errc::invalid_argument,
                                 "--replica: expected a worker's replica id 1..{}, got {} (replica 0 is the chief)",
                                 static_cast<std::int64_t>(ar.replicas.size()) - 1, id));
  }
  std::vector<std::string> host_ports;
  auto members = replica_members(a.peers, ar.replicas, k_replica_peer_prefix, host_ports);
  if (!members) return a.out.fail(members.error());
  Job ps_job = a;
  ps_job.peers.clear();
  for (const auto& p : a.peers) {
    if (p.rfind(k_replica_peer_prefix, 0) != 0) ps_job.peers.push_back(p);
  }
  // Listen where the other replicas will call this one (unless --listen says otherwise).
  if (a.listen == "127.0.0.1:0" || a.listen.empty()) ps_job.listen = host_ports[static_cast<std::size_t>(id)];
  a.out.print(format_mixed_plan(ar, ps));
  return run_replica(ps_job, std::move(ps), AllReducePart{std::make_shared<const cc::ArPlan>(ar), std::move(*members)});
}

/// Runs the job once its checkpoint is read: picks the kind of strategy and the role.
Status run(const Job& a, const pb::autodist::Strategy& strategy, const std::optional<cc::ArPlan>& ar,
           const std::function<std::string()>& wait_for_stop) {
  if (ar && ar->ps_variables.empty()) {
    // An all-reduce strategy runs without PS processes.
    if (a.role.empty()) {
      cps::TrainingPlan none;
      none.replicas = ar->replicas;
      const std::string header = format_allreduce_plan(*ar) +
                                 fmt::format("embedded all-reduce job: {} replicas: {} steps of {} samples\n",
                                             ar->replicas.size(), a.steps, a.batch);
      return run_embedded(a, none, std::make_shared<const cc::ArPlan>(*ar), header, k_allreduce_job);
    }
    if (a.role == "ps") {
      return a.out.fail(make_error(errc::invalid_argument,
                                   "--role ps: expected chief or worker, got ps; an all-reduce strategy has no "
                                   "parameter servers (every replica keeps its own copy of the model)"));
    }
    return run_allreduce_replica(a, *ar);
  }
  // A mixed strategy: PS processes serve its PS part, replicas also all-reduce.
  auto plan = load_plan(a, strategy, ar.has_value());
  if (!plan) return a.out.fail(plan.error());
  if (a.role == "ps") return run_ps(a, *plan, wait_for_stop);
  std::shared_ptr<const cc::ArPlan> shared_ar = ar ? std::make_shared<const cc::ArPlan>(*ar) : nullptr;
  if (a.role.empty()) {
    if (ar) a.out.print(format_mixed_plan(*ar, *plan));
    const std::string header = fmt::format("embedded job: {} PS devices, {} replicas: {} steps of {} samples\n",
                                           plan->servers.size(), plan->replicas.size(), a.steps, a.batch);
    return run_embedded(a, *plan, shared_ar, header, k_mixed_job);
  }
  if (ar) return run_mixed_replica(a, *ar, std::move(*plan));
  return run_replica(a, std::move(*plan));
}

}  // namespace
}  // namespace training_job

Status run_training_job(const TrainingJobOptions& options, const JobOutput& output,
                        const std::function<std::string()>& wait_for_stop) {
  training_job::Job a;
  static_cast<TrainingJobOptions&>(a) = options;
  a.out = output;
  if (!a.out.print) a.out.print = [](const std::string&) {};
  auto strategy = load_strategy(a.strategy, a.text);
  if (!strategy) return a.out.fail(strategy.error());
  auto ar = training_job::load_allreduce_plan(a, *strategy);
  if (!ar) return a.out.fail(ar.error());
  if (!a.restore.empty()) {
    auto restored = read_checkpoint(a.restore, training_job::model_variables(a.features));
    if (!restored) return a.out.fail(restored.error());
    a.restored = std::move(*restored);
    const auto kind = training_job::optimizer_of(a).kind;
    if (!restores_optimizer(*a.restored, kind)) {
      a.out.print(fmt::format("restore: the checkpoint's optimizer state is for {}, this job runs {}: its optimizer "
                              "starts afresh\n",
                              a.restored->optimizer, core::ps::optimizer_name(kind)));
    }
  }
  if (a.resume) {
    if (a.role != "ps") {
      return a.out.fail(make_error(errc::invalid_argument, "--resume: only a PS process (--role ps) continues a "
                                   "running job, got role '{}'", a.role));
    }
    auto latest = latest_checkpoint(a.save);
    if (!latest) return a.out.fail(latest.error());
    if (*latest) {
      auto resumed = read_checkpoint(**latest, training_job::model_variables(a.features));
      if (!resumed) return a.out.fail(resumed.error());
      const std::int64_t first = a.restored ? a.restored->step : 0;
      if ((*resumed)->step < first) {
        return a.out.fail(make_error(errc::invalid_argument, "--resume: the latest checkpoint {} is of step {}, before "
                                     "the job's start (--restore, step {})", **latest, (*resumed)->step, first));
      }
      a.resumed = std::move(*resumed);
    }
    a.out.print(a.resumed ? fmt::format("resume: ps {} continues the job from {} (step {})\n", a.device, **latest,
                                        a.resumed->step)
                          : fmt::format("resume: ps {} finds no checkpoint{}: it continues the job from its start\n",
                                        a.device, a.save.empty() ? " (no --save)" : " at " + a.save));
  }
  return training_job::run(a, *strategy, *ar, wait_for_stop);
}

}  // namespace apiary
