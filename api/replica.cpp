#include "api/replica.hpp"

#include <algorithm>
#include <future>
#include <utility>

#include <caf/all.hpp>

#include "actors/collective/nccl_route.hpp"
#include "actors/gateway.hpp"
#include "actors/role_actor.hpp"
#include "api/runtime.hpp"
#include "api/startup.hpp"
#include "core/mux.hpp"
#include "core/train/allreduce_role.hpp"
#include "core/train/ps_client_role.hpp"

namespace apiary {

namespace ct = core::train;

namespace {

template <class T>
Result<T> value_as(Result<core::Value> r, const char* what) {
  if (!r) return r.error();
  T* v = r->as<T>();
  if (v == nullptr) return make_error(errc::internal, "the replica answered {} with a {}", what, r->type_name());
  return std::move(*v);
}

Status status_of(Result<core::Value> r) {
  if (!r) return r.error();
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<Replica>> Replica::start(Runtime& runtime, ReplicaOptions options) {
  return start(runtime.system(), runtime.gateway(), std::move(options));
}

Result<std::unique_ptr<Replica>> Replica::start(caf::actor_system& system, std::shared_ptr<actors::Gateway> gateway,
                                                ReplicaOptions options) {
  const api::CafThreadRelease released;
  auto& roles = options.roles;
  const bool nccl_groups =
      roles.ar && std::any_of(roles.ar->groups.begin(), roles.ar->groups.end(),
                              [](const core::collective::ArGroup& g) { return g.transport == core::collective::Transport::nccl; });
  if (nccl_groups && !options.nccl) {
    return make_error(errc::unsupported,
                      "replica {}: expected this replica's NCCL group for the plan's NCCL collectives, got none; NCCL "
                      "needs a GPU on every replica: run the replicas on their GPUs, or rebuild the strategy with "
                      "--spec RING",
                      roles.replica);
  }
  if (options.patience <= std::chrono::milliseconds::zero()) {
    return make_error(errc::invalid_argument, "replica {}: expected a patience > 0 ms, got {} ms", roles.replica,
                      options.patience.count());
  }
  // Replicas that all-reduce meet before their first collective and after their last;
  // others when the caller asks (their processes also serve the PS devices).
  roles.meet = roles.meet || roles.ar != nullptr;
  if (nccl_groups) roles.nccl_role = "nccl";
  roles.stream_ring = true;
  auto mux = std::make_unique<core::Mux>();
  if (auto added = ct::add_replica_roles(*mux, roles); !added) return added.error();
  std::unique_ptr<Replica> replica(new Replica());
  replica->id_ = roles.replica;
  replica->gateway_ = gateway;
  replica->patience_ = options.patience;
  replica->handles_ = mux->handles();
  actors::RoleRoutes routes;
  if (nccl_groups) {
    replica->nccl_route_ = std::make_shared<caf::actor>(actors::spawn_nccl_route(system, std::move(options.nccl)));
    routes.emplace("nccl", *replica->nccl_route_);
  }
  // The collectives count, published after every input for other threads to read.
  auto counters = replica->counters_;
  const auto* ar = mux->find("allreduce");
  const auto* ps = mux->find("ps");
  auto watched = actors::watched<core::Mux>(std::move(mux), [counters, ar, ps](const core::Mux&) {
    if (ar != nullptr) counters->collectives.store(static_cast<const ct::AllReduceRole*>(ar)->ops());
    if (ps != nullptr) counters->pulls_landed.store(static_cast<const ct::PsClientRole*>(ps)->pulls_landed());
  });
  replica->host_ =
      std::make_shared<caf::actor>(actors::spawn_role_actor(system, std::move(gateway), std::move(watched), routes));
  return replica;
}

Replica::~Replica() {
  if (host_) actors::stop_role_actor(*gateway_, *host_, handles_);
  if (nccl_route_) caf::anon_send_exit(*nccl_route_, caf::exit_reason::user_shutdown);
}

Result<core::Value> Replica::call(const char* method, core::Value args, std::chrono::milliseconds patience) {
  auto future = actors::call_role(*host_, "replica", method, std::move(args));
  if (future.wait_for(patience) != std::future_status::ready) {
    return make_error(errc::deadline_exceeded, "replica {}: '{}' got no answer within {} ms", id_, method,
                      patience.count());
  }
  return future.get();
}

Status Replica::join(std::chrono::milliseconds patience) {
  // The barrier's own deadline ends the round first; the call's wait is a little longer.
  return status_of(call("join", core::Value::of(core::Duration(patience)), patience + std::chrono::seconds(5)));
}

Result<ReplicaParams> Replica::pull() { return value_as<ReplicaParams>(call("pull", {}, patience_), "a pull"); }

Status Replica::pull_into(std::map<std::string, std::vector<float>>& params, std::int64_t* version) {
  return pull_into(params, {}, version);
}

Status Replica::pull_into(std::map<std::string, std::vector<float>>& params,
                          const std::map<std::string, core::train::DirectTarget>& direct, std::int64_t* version) {
  auto pulled = value_as<ReplicaParams>(
      call("pull", core::Value::of(ct::ReplicaPullInto{std::move(params), direct}), patience_), "a pull");
  params.clear();
  if (!pulled) return pulled.error();
  params = std::move(pulled->params);
  step_ = pulled->step;
  if (version != nullptr) *version = pulled->version;
  return ok_status();
}

Status Replica::push(std::map<std::string, std::vector<float>> gradients, double samples) {
  return push_lent(gradients, samples);
}

Status Replica::push_lent(std::map<std::string, std::vector<float>>& gradients, double samples,
                          std::map<std::string, core::ps::SparseGradient> rows, float learning_rate) {
  const auto args =
      core::Value::of(ct::ReplicaGradients{std::move(gradients), samples, std::move(rows), learning_rate});
  auto done = call("push", args, patience_);
  gradients.clear();
  if (!done) {
    // A refused push left them in the args.
    if (done.error().code == errc::invalid_argument || done.error().code == errc::protocol) {
      gradients = std::move(args.as<ct::ReplicaGradients>()->gradients);
    }
    return done.error();
  }
  if (auto* back = done->as<ct::ReplicaGradients>()) gradients = std::move(back->gradients);
  return ok_status();
}

Status Replica::leave(std::chrono::milliseconds patience) {
  return status_of(call("leave", core::Value::of(core::Duration(patience)), patience + std::chrono::seconds(5)));
}

Result<std::map<std::string, core::ps::Optimizer::State>> Replica::optimizer_states() {
  return value_as<std::map<std::string, core::ps::Optimizer::State>>(call("optimizer_states", {}, patience_),
                                                                     "optimizer_states");
}

Status Replica::restore_optimizers(std::map<std::string, core::ps::Optimizer::State> states) {
  return status_of(call("restore_optimizers", core::Value::of(std::move(states)), patience_));
}

}  // namespace apiary
