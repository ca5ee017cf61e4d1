#include "api/autodist.hpp"

#include <algorithm>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "actors/gateway.hpp"
#include "actors/rpc.hpp"
#include "api/job_directory.hpp"
#include "api/job_files.hpp"
#include "api/job_places.hpp"
#include "api/parameter_server.hpp"
#include "api/replica.hpp"
#include "api/runtime.hpp"
#include "api/training_job_parts.hpp"
#include "core/collective/ar_plan.hpp"
#include "core/ps/plan.hpp"
#include "core/ps/wire.hpp"
#include "core/strategy/graph_item.hpp"
#include "core/strategy/resource_spec.hpp"
#include "core/strategy/validate.hpp"
#include "messages/identity/multiaddr.hpp"

namespace apiary {

namespace cc = core::collective;
namespace cps = core::ps;
namespace cs = core::strategy;

struct AutoDistJob::Parts {
  std::unique_ptr<Runtime> runtime;                  ///< the replica's; its actor system runs the others
  std::vector<std::unique_ptr<Runtime>> served_rt;   ///< one per PS device served (and the initial values)
  std::vector<std::unique_ptr<ParameterServer>> servers;
  std::unique_ptr<Replica> replica;
  std::size_t job_servers = 0;  ///< servers[0, job_servers) serve the job's PS devices (then replica 0's initial values)
  /// A job of PS variables only: its replicas leave without meeting, and a process
  /// serving PS devices waits until each replica is done with them (finished or dropped).
  bool await_replicas = false;
  bool left = false;

  ~Parts() {
    replica.reset();
    servers.clear();
    served_rt.clear();
  }
};

namespace {

Result<core::PeerAddr> addr_of(const std::string& host, std::uint32_t port, const std::string& what) {
  if (port > 65535) {
    return make_error(errc::invalid_argument, "{}: port {} is past 65535; give the job a lower first port", what, port);
  }
  auto m = messages::Multiaddr::from_ip(host, static_cast<std::uint16_t>(port));
  if (!m) return make_error(errc::invalid_argument, "{}: {}", what, m.error().message);
  return core::PeerAddr(std::move(*m));
}

cs::GraphItem item_of(const std::vector<AutoDistVariable>& variables, bool sparse) {
  cs::GraphItem item;
  for (const auto& v : variables) {
    cs::Variable var;
    var.name = v.name;
    var.shape = v.shape;
    var.sparse = sparse && v.sparse;
    item.variables.push_back(std::move(var));
  }
  return item;
}

Result<pb::autodist::Strategy> strategy_of(const AutoDistOptions& o, const cs::GraphItem& item,
                                          const cs::ResourceSpec& spec) {
  if (!o.strategy_file.empty()) return load_strategy(o.strategy_file, o.strategy_text);
  auto kind = cs::parse_builder_kind(o.builder);
  if (!kind) return kind.error();
  return cs::build_strategy(*kind, o.builder_options, item, spec, o.job);
}

std::string ps_summary(const cps::TrainingPlan& plan) {
  std::string out;
  for (const auto& v : plan.variables) {
    out += fmt::format("PS {}{} on {} ({} shard{})\n", v.name, v.sparse ? " (sparse)" : "",
                       training_job::devices_of(plan, v), v.shards.size(), v.shards.size() == 1 ? "" : "s");
  }
  return out;
}

/// Pulls every variable from replica 0's initial-value server at `from`, as replica
/// `rank` of `init` (the whole model on one PS device), retrying until it answers or
/// the patience runs out.
Result<std::map<std::string, std::vector<float>>> initial_from(caf::actor_system& system,
                                                               const std::shared_ptr<actors::Gateway>& gateway,
                                                               const std::shared_ptr<const cps::TrainingPlan>& init,
                                                               const core::PeerAddr& from, const AutoDistOptions& o,
                                                               std::int32_t session) {
  const auto deadline = std::chrono::steady_clock::now() + o.patience;
  for (;;) {
    ReplicaOptions ro;
    ro.roles.replica = session;
    ro.roles.ps = init;
    ro.roles.servers.emplace(init->servers.front(), from);
    ro.roles.job = o.job + ".initial";
    ro.roles.call_timeout = o.timeout;
    ro.roles.label = "initial values";
    ro.patience = o.timeout + std::chrono::seconds(1);
    auto replica = Replica::start(system, gateway, std::move(ro));
    if (!replica) return replica.error();
    std::map<std::string, std::vector<float>> values;
    auto pulled = (*replica)->pull_into(values);
    if (pulled) {
      (void)(*replica)->leave(o.timeout);
      return values;
    }
    // Replica 0 not started yet, or listening but not serving yet (unknown handle).
    const auto code = pulled.error().code;
    const bool absent = code == errc::unavailable || code == errc::peer_down || code == errc::deadline_exceeded ||
                        code == errc::not_found;
    if (!absent || std::chrono::steady_clock::now() >= deadline) {
      return make_error(pulled.error().code, "replica {}: could not pull the initial values from replica 0 at {}: {}",
                        o.rank, from.key(), pulled.error().message);
    }
    replica->reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

/// What every process of a job derives from the same options: the strategy, its plans
/// and every role's address.
struct Layout {
  std::shared_ptr<pb::autodist::Strategy> strategy;
  std::shared_ptr<const cc::ArPlan> ar;         ///< null: no all-reduced variables
  std::shared_ptr<const cps::TrainingPlan> ps;  ///< null: no PS variables
  std::vector<std::string> hosts;               ///< each replica's host
  std::vector<core::PeerAddr> members;          ///< each replica's address
  std::vector<std::string> devices;             ///< the PS devices, plan order
  std::map<std::string, core::PeerAddr> servers;
  core::PeerAddr init_addr;                     ///< replica 0's initial values
  std::shared_ptr<const cps::TrainingPlan> init;  ///< the whole model on one PS device
};

Result<Layout> layout_of(const AutoDistOptions& o) {
  if (o.variables.empty()) return make_error(errc::invalid_argument, "autodist: expected the model's variables, got none");
  if (auto valid = cps::validate(o.optimizer); !valid) return valid.error();
  auto spec = load_resource_spec(o.resource_spec);
  if (!spec) return spec.error();
  const cs::GraphItem item = item_of(o.variables, true);
  if (auto checked = cs::check_graph_item(item); !checked) return checked.error();
  auto strategy = strategy_of(o, item, *spec);
  if (!strategy) return strategy.error();
  if (auto valid = cs::validate(*strategy, item, *spec); !valid) {
    return make_error(errc::invalid_argument, "autodist: the strategy does not fit the model: {}",
                      valid.error().message);
  }
  Layout l;
  l.strategy = std::make_shared<pb::autodist::Strategy>(std::move(*strategy));
  // The plans: the all-reduced variables, and the PS ones (all of them, or a mixed
  // strategy's PS part).
  if (cc::uses_allreduce(*l.strategy)) {
    cc::ArOptions ao;
    ao.allow_ps = true;
    auto plan = cc::plan_allreduce(*l.strategy, item, ao);
    if (!plan) return plan.error();
    l.ar = std::make_shared<const cc::ArPlan>(std::move(*plan));
  }
  if (!l.ar || !l.ar->ps_variables.empty()) {
    auto plan = cps::plan_training(l.ar ? cc::ps_part(*l.strategy) : *l.strategy, item, o.optimizer);
    if (!plan) return plan.error();
    if (!plan->variables.empty()) l.ps = std::make_shared<const cps::TrainingPlan>(std::move(*plan));
  }
  // Addresses, by the job's port range.
  const auto& replicas = l.strategy->graph_config().replicas();
  const auto count = static_cast<std::size_t>(replicas.size());
  for (std::size_t r = 0; r < count; ++r) {
    auto host = listen_host_of(replicas[static_cast<int>(r)]);
    if (!host) return host.error();
    auto addr = addr_of(*host, o.port + r, fmt::format("replica {}", r));
    if (!addr) return addr.error();
    l.hosts.push_back(*host);
    l.members.push_back(std::move(*addr));
  }
  if (l.ps) l.devices = l.ps->servers;
  for (std::size_t k = 0; k < l.devices.size(); ++k) {
    auto host = listen_host_of(l.devices[k]);
    if (!host) return host.error();
    auto addr = addr_of(*host, o.port + count + k, "PS device " + l.devices[k]);
    if (!addr) return addr.error();
    l.servers.emplace(l.devices[k], *addr);
  }
  if (l.hosts.empty()) return make_error(errc::invalid_argument, "autodist: the strategy has no replicas");
  auto init_addr = addr_of(l.hosts.front(), o.port + count + l.devices.size(), "replica 0's initial values");
  if (!init_addr) return init_addr.error();
  l.init_addr = *init_addr;
  // The initial-value server's plan: every variable whole and dense on one device; its
  // sessions are the replicas', then one per PS process.
  const cs::GraphItem dense = item_of(o.variables, false);
  auto init_strategy = cs::build_strategy(cs::BuilderKind::ps, {}, dense, *spec, o.job + ".initial");
  if (!init_strategy) return init_strategy.error();
  auto init_plan = cps::plan_training(*init_strategy, dense, o.optimizer);
  if (!init_plan) return init_plan.error();
  for (const auto& device : l.devices) {
    init_plan->replicas.push_back("ps:" + device);
    for (auto& shard : init_plan->shards) shard.config.replica_hosts.push_back(0);  // pulls only: any host
  }
  l.init = std::make_shared<const cps::TrainingPlan>(std::move(*init_plan));
  return l;
}

/// The options of losing and regaining processes, each with what it needs.
Status check_recovery(const AutoDistOptions& o, bool serving) {
  if (o.drop_lost_replicas_after && o.drop_lost_replicas_after->count() < 0) {
    return make_error(errc::invalid_argument, "autodist: drop_lost_replicas_after must not be negative");
  }
  if (o.ps_restart_wait.count() < 0 || o.replay_steps < 0) {
    return make_error(errc::invalid_argument, "autodist: ps_restart_wait and replay_steps must not be negative");
  }
  if (o.ps_restart_wait.count() > 0 && !o.ps_processes && !serving) {
    return make_error(errc::invalid_argument,
                      "autodist: ps_restart_wait needs ps_processes: a PS device served by a replica process goes "
                      "down with that replica, and nothing starts it again");
  }
  if (o.resume_at && !serving) {
    return make_error(errc::invalid_argument,
                      "autodist: resume_at is for a PS process started again (serve_devices); a replica resumes by "
                      "waiting for its PS processes (ps_restart_wait)");
  }
  if (o.rejoin && serving) {
    return make_error(errc::invalid_argument, "autodist: rejoin is for a replica; a PS process started again "
                                              "continues from a checkpoint (resume_at)");
  }
  if (o.resume_at && *o.resume_at < 0) {
    return make_error(errc::invalid_argument, "autodist: resume_at must be a step >= 0, got {}", *o.resume_at);
  }
  return ok_status();
}

}  // namespace

Result<std::vector<std::string>> AutoDistJob::ps_devices(const AutoDistOptions& options) {
  auto l = layout_of(options);
  if (!l) return l.error();
  return l->devices;
}

Result<std::unique_ptr<AutoDistJob>> AutoDistJob::start(AutoDistOptions o) {
  for (const auto& v : o.variables) {
    std::int64_t n = 1;
    for (auto d : v.shape) n *= d;
    auto it = o.initial.find(v.name);
    if (it == o.initial.end() || it->second.size() != static_cast<std::size_t>(n)) {
      return make_error(errc::invalid_argument, "autodist: expected initial values of {} with {} values, got {}",
                        v.name, n, it == o.initial.end() ? std::string("none") : std::to_string(it->second.size()));
    }
  }
  const bool serving = !o.serve_devices.empty();
  if (auto st = check_recovery(o, serving); !st) return st.error();
  auto laid = layout_of(o);
  if (!laid) return laid.error();
  Layout& l = *laid;
  const std::size_t count = l.members.size();
  std::size_t served_index = l.devices.size();  // the first served device's
  for (const auto& device : o.serve_devices) {
    auto it = std::find(l.devices.begin(), l.devices.end(), device);
    if (it == l.devices.end()) {
      std::string known;
      for (const auto& d : l.devices) known += (known.empty() ? "" : ", ") + d;
      return make_error(errc::invalid_argument, "autodist: {} is not a PS device of the strategy; its PS devices: {}",
                        device, known.empty() ? std::string("none") : known);
    }
    if (std::count(o.serve_devices.begin(), o.serve_devices.end(), device) != 1) {
      return make_error(errc::invalid_argument, "autodist: PS device {} named twice in serve_devices", device);
    }
    served_index = std::min(served_index, static_cast<std::size_t>(it - l.devices.begin()));
  }
  if (!serving && (o.rank < 0 || static_cast<std::size_t>(o.rank) >= count)) {
    return make_error(errc::invalid_argument,
                      "autodist: rank {} is not a replica of the strategy, which has {} (its resource spec's devices); "
                      "start one process per replica with ranks 0..{}",
                      o.rank, count, count == 0 ? 0 : count - 1);
  }
  std::vector<std::string> mine;  // the PS devices this process serves
  if (serving) {
    mine = o.serve_devices;
  } else if (!o.ps_processes) {
    for (const auto& device : l.devices) {
      auto host = listen_host_of(device);
      if (!host) return host.error();
      auto first = std::find(l.hosts.begin(), l.hosts.end(), *host);
      if (first == l.hosts.end()) {
        return make_error(errc::unsupported,
                          "autodist: PS device {} is on host {}, where no replica runs to serve it; give that host a "
                          "replica in the resource spec, or the job PS processes",
                          device, *host);
      }
      if (first - l.hosts.begin() == o.rank) mine.push_back(device);
    }
  }
  if (o.rejoin && l.ar) {
    return make_error(errc::unsupported, "autodist: replica {} cannot rejoin: the strategy all-reduces variables, and an "
                                         "all-reduce group does not take a member back (PS variables only)", o.rank);
  }
  if (o.rejoin && !mine.empty()) {
    return make_error(errc::unsupported,
                      "autodist: replica {} cannot rejoin: it serves PS device {}, which went down with its process; "
                      "give the job PS processes (ps_processes) so that replicas can come and go",
                      o.rank, mine.front());
  }
  const auto& ps = l.ps;
  const auto& ar = l.ar;
  const auto& servers = l.servers;
  const auto& members = l.members;
  const auto& init = l.init;
  const auto& init_addr = l.init_addr;

  std::unique_ptr<AutoDistJob> job(new AutoDistJob());
  job->rank_ = serving ? -1 : o.rank;
  job->replicas_ = count;
  job->strategy_ = l.strategy;
  job->patience_ = o.patience;
  job->served_ = mine;
  job->parts_ = std::make_unique<Parts>();
  Parts& p = *job->parts_;

  auto start_runtime = [&](const core::PeerAddr& at, caf::actor_system* system) -> Result<std::unique_ptr<Runtime>> {
    RuntimeOptions ro;
    ro.listen = at.multiaddr();
    ro.mode = o.mode == "shm" ? transport::Mode::shm : transport::Mode::tcp;
    ro.insecure = o.insecure;
    ro.system = system;
    auto rt = Runtime::start(ro);
    if (!rt) {
      return make_error(rt.error().code, "{}: cannot listen at {}: {}",
                        serving ? "PS process of " + mine.front() : fmt::format("replica {}", o.rank), ro.listen,
                        rt.error().message);
    }
    return rt;
  };
  // A PS process listens at its first device's address, a replica at its own.
  auto rt = start_runtime(serving ? servers.at(mine.front()) : members[static_cast<std::size_t>(o.rank)], nullptr);
  if (!rt) return rt.error();
  p.runtime = std::move(*rt);

  std::map<std::string, std::vector<float>> values = std::move(o.initial);
  if ((serving && !o.resume_at) || (!serving && o.rank != 0 && !o.rejoin)) {
    // A PS process's session on replica 0's server comes after the replicas' (its first
    // device's: the devices' sessions are distinct). A resumed one starts from its
    // checkpoint's values instead, and a rejoining replica the running job's, from its
    // first pull.
    const auto session = serving ? static_cast<std::int32_t>(count + served_index) : o.rank;
    auto fetched = initial_from(p.runtime->system(), p.runtime->gateway(), init, init_addr, o, session);
    if (!fetched) return fetched.error();
    values = std::move(*fetched);
  }
  auto serve = [&](const std::string& device, const core::PeerAddr& at, std::shared_ptr<const cps::TrainingPlan> plan,
                   bool of_job) -> Status {
    Runtime* on = p.runtime.get();
    if (!serving || device != mine.front()) {  // another address: a listener of its own
      auto srt = start_runtime(at, &p.runtime->system());
      if (!srt) return srt.error();
      p.served_rt.push_back(std::move(*srt));
      on = p.served_rt.back().get();
    }
    ParameterServerOptions po;
    po.device = device;
    po.plan = std::move(plan);
    po.initial = values;
    if (of_job) {  // not replica 0's initial-value server
      po.states = o.states;
      po.drop_lost_replicas_after = o.drop_lost_replicas_after;
      po.resume_at = o.resume_at;
    }
    auto server = ParameterServer::start(*on, std::move(po));
    if (!server) return server.error();
    p.servers.push_back(std::move(*server));
    return ok_status();
  };
  for (const auto& device : mine) {
    if (auto st = serve(device, servers.at(device), ps, true); !st) return st.error();
  }
  p.job_servers = p.servers.size();
  if (ps) job->summary_ += ps_summary(*ps);
  if (ar) job->summary_ += training_job::format_allreduce_plan(*ar);
  if (serving) return job;  // serves until destroyed
  if (o.rank == 0 && !o.rejoin) {
    if (auto st = serve(init->servers.front(), init_addr, init, false); !st) return st.error();
  }
  if (o.ps_processes) {
    for (const auto& device : l.devices) {
      if (auto st = wait_until_serving(*p.runtime->gateway(), device, servers.at(device).key(), o.patience,
                                       fmt::format("replica {}", o.rank),
                                       fmt::format("start a PS process serving it (serve_devices {}) with the same job",
                                                   device));
          !st) {
        return st.error();
      }
    }
  }

  ReplicaOptions ro;
  ro.roles.replica = o.rank;
  ro.roles.ps = ps;
  ro.roles.ar = ar;
  ro.roles.servers = servers;
  ro.roles.members = members;
  ro.roles.job = o.job;
  ro.roles.optimizer = o.optimizer;
  ro.roles.call_timeout = o.timeout;
  ro.roles.exchange_timeout = o.timeout;
  ro.roles.meet = !o.rejoin;  // every PS device is served once every replica arrived
  // Without collectives nothing calls a replica after its last push: the PS devices
  // outlast the replicas instead (leave()), and a dropped replica holds no one up.
  ro.roles.meet_on_leave = ar != nullptr;
  p.await_replicas = ar == nullptr;
  ro.roles.ps_restart_wait = o.ps_restart_wait;
  ro.roles.replay_steps = o.replay_steps;
  if (ar) {
    for (const auto& v : ar->variables) ro.roles.initial[v.name] = values.at(v.name);
    for (const auto& v : ar->sparse) ro.roles.initial[v.name] = values.at(v.name);
  }
  // A pull or push waits for the slowest replica, each call bounded by the timeout.
  ro.patience = o.timeout + std::chrono::seconds(1);
  if (ar) ro.patience += o.timeout * static_cast<std::int64_t>(4 + 2 * ar->groups.size());
  ro.patience += o.ps_restart_wait;
  auto replica = Replica::start(p.runtime->system(), p.runtime->gateway(), std::move(ro));
  if (!replica) return replica.error();
  p.replica = std::move(*replica);
  if (ar && !o.states.empty()) {
    if (auto st = p.replica->restore_optimizers(o.states); !st) return st.error();
  }
  if (auto joined = p.replica->join(o.patience); !joined) {
    return make_error(joined.error().code, "replica {}: the other replicas did not all arrive: {}", o.rank,
                      joined.error().message);
  }
  return job;
}

AutoDistJob::~AutoDistJob() = default;

Status AutoDistJob::pull_into(std::map<std::string, std::vector<float>>& params, std::int64_t* version) {
  return pull_into(params, {}, version);
}

Status AutoDistJob::pull_into(std::map<std::string, std::vector<float>>& params,
                              const std::map<std::string, core::train::DirectTarget>& direct, std::int64_t* version) {
  if (!parts_->replica) return make_error(errc::protocol, "this process serves PS device {} only", served_.front());
  if (parts_->left) return make_error(errc::protocol, "replica {}: the job was left", rank_);
  return parts_->replica->pull_into(params, direct, version);
}

Status AutoDistJob::push_lent(std::map<std::string, std::vector<float>>& gradients, double samples,
                             std::map<std::string, core::ps::SparseGradient> rows, float learning_rate) {
  if (!parts_->replica) return make_error(errc::protocol, "this process serves PS device {} only", served_.front());
  if (parts_->left) return make_error(errc::protocol, "replica {}: the job was left", rank_);
  return parts_->replica->push_lent(gradients, samples, std::move(rows), learning_rate);
}

Status AutoDistJob::leave() {
  if (parts_->left || !parts_->replica) return ok_status();
  parts_->left = true;
  if (auto st = parts_->replica->leave(patience_); !st) return st;
  if (!parts_->await_replicas) return ok_status();
  // This process's PS devices serve until every replica is done with them.
  const auto until = std::chrono::steady_clock::now() + patience_;
  for (std::size_t i = 0; i < parts_->job_servers; ++i) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (!parts_->servers[i]->wait_replicas_done(std::max(left, std::chrono::milliseconds::zero()))) {
      return make_error(errc::deadline_exceeded,
                        "replica {}: PS device {} still serves replicas that neither finished nor were dropped after "
                        "{} ms; a replica whose process is lost is dropped only with drop_lost_replicas_after",
                        rank_, served_[i], patience_.count());
    }
  }
  return ok_status();
}

Result<std::map<std::string, core::ps::Optimizer::State>> AutoDistJob::optimizer_states() {
  if (!parts_->replica) return make_error(errc::protocol, "this process serves PS device {} only", served_.front());
  if (parts_->left) return make_error(errc::protocol, "replica {}: the job was left", rank_);
  return parts_->replica->optimizer_states();
}

}  // namespace apiary
