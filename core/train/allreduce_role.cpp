#include "core/train/allreduce_role.hpp"

#include <utility>

#include "core/collective/group_roles.hpp"

namespace apiary::core::train {

namespace {

constexpr const char* k_name = "the all-reduce role";

void append(Effects& out, Effects more) {
  out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

}  // namespace

Result<std::unique_ptr<AllReduceRole>> AllReduceRole::create(AllReduceConfig config) {
  if (!config.plan) return make_error(errc::invalid_argument, "{}: expected an all-reduce plan, got none", config.label);
  const auto& plan = *config.plan;
  if (config.rank >= plan.replicas.size() || config.members.size() != plan.replicas.size()) {
    return make_error(errc::invalid_argument,
                      "{}: expected a rank below {} and one address per replica, got rank {} and {} addresses",
                      config.label, plan.replicas.size(), config.rank, config.members.size());
  }
  collective::ExchangeConfig ec;
  ec.peers = config.members;
  ec.self = config.rank;
  ec.handle = config.job + "::Collective.rpc_exchange";
  ec.timeout = config.timeout;
  auto step = collective::ArStep::create(plan, std::move(ec));
  if (!step) return step.error();
  step->run_nccl_outside(!config.nccl_role.empty());
  step->run_ring_outside(!config.ring_role.empty());
  return std::unique_ptr<AllReduceRole>(new AllReduceRole(std::move(config), std::move(*step)));
}

AllReduceRole::AllReduceRole(AllReduceConfig config, collective::ArStep step)
    : config_(std::move(config)), handle_(config_.job + "::Collective.rpc_exchange"), step_(std::move(step)) {}

Effects AllReduceRole::on(TimePoint now, Input input) {
  if (auto* c = std::get_if<LocalCall>(&input)) return on_call(now, std::move(*c));
  if (auto* r = std::get_if<Request>(&input)) return advance(step_.on_request(now, r->id, std::string(r->body.view())));
  if (auto* r = std::get_if<Response>(&input)) {
    if (!step_.owns_call(r->call)) return {};
    return advance(step_.on_response(now, r->call, r->result));
  }
  if (auto* t = std::get_if<TimerFired>(&input)) {
    if (failure_ || !step_.owns_timer(t->id)) return {};
    return advance(step_.on_timer(now, t->id));
  }
  if (auto* r = std::get_if<LocalReply>(&input)) {
    if (!external_ || r->op != *external_ || failure_) return {};
    external_.reset();
    Result<std::vector<std::vector<float>>> averages = std::vector<std::vector<float>>{};
    if (!r->result.ok()) {
      averages = r->result.error();
    } else if (auto* tensors = r->result->as<std::vector<std::vector<float>>>()) {
      averages = std::move(*tensors);
    } else {
      averages = make_error(errc::internal, "{}: answered no tensors", external_role_);
    }
    return advance(step_.on_external(now, std::move(averages)));
  }
  if (auto* d = std::get_if<PeerDown>(&input)) {
    down_.insert(d->peer);
    if (failure_) return {};
    for (std::size_t r = 0; r < config_.members.size(); ++r) {
      if (r == config_.rank || config_.members[r] != d->peer) continue;
      return fail(make_error(errc::peer_down,
                             "replica {} at step {}: expected every member to take part in collective op {} of job "
                             "{}, but the connection to {} broke (it went down); the job cannot continue without it",
                             config_.rank, current_, step_.ops(), config_.job, step_.name_of(d->peer)));
    }
  }
  return {};
}

Effects AllReduceRole::on_call(TimePoint now, LocalCall call) {
  if (call.method == "watch") {
    if (failure_) return {Complete{call.op, *failure_}};
    watch_ = call.op;
    return {};
  }
  if (call.method == "stop") {
    const Error* why = call.args.as<Error>();
    Effects out;
    if (!failure_) {
      failure_ = why != nullptr ? *why : make_error(errc::cancelled, "the replica stopped");
      out = step_.stop(make_error(errc::unavailable, "replica {} failed: {}", config_.rank, failure_->message));
      if (running_) out.push_back(Complete{*std::exchange(running_, std::nullopt), *failure_});
      if (watch_) out.push_back(Complete{*std::exchange(watch_, std::nullopt), *failure_});
    }
    out.push_back(Complete{call.op, Value{}});
    return out;
  }
  if (call.method != "step") return {unknown_method(call, k_name)};
  if (failure_) return {Complete{call.op, *failure_}};
  if (running_) {
    return {Complete{call.op, make_error(errc::protocol, "replica {}: a step while step {} still runs", config_.rank,
                                         current_)}};
  }
  auto* args = call.args.as<ArStepArgs>();
  if (args == nullptr) {
    return {Complete{call.op, make_error(errc::invalid_argument, "step: expected ArStepArgs, got {}",
                                         call.args.type_name())}};
  }
  current_ = args->step;
  // A member whose connection broke answers nothing more: fail now, as a gateway would.
  if (auto peer = step_.first_down(down_)) {
    running_ = call.op;
    return fail(make_error(errc::peer_down,
                           "replica {} at step {}: expected every member to take part in collective op {} of job {}, "
                           "but {} went down; the job cannot continue without it",
                           config_.rank, current_, step_.ops(), config_.job, step_.name_of(*peer)));
  }
  running_ = call.op;
  // The gradients' buffers go through the collectives unless someone else holds them too.
  auto gradients = call.args.shared() ? args->gradients : std::move(args->gradients);
  return advance(step_.begin(now, std::move(gradients), args->weight, &args->sparse));
}

void AllReduceRole::ask_external(Effects& out) {
  auto group = step_.take_external();
  if (!group) return;
  external_ = next_ask_++;
  if (group->transport == collective::Transport::ring) {
    external_role_ = config_.ring_role;
    out.push_back(Ask{*external_, config_.ring_role, "allreduce",
                      Value::of(collective::GroupAllReduceArgs{ring_ops_++, std::move(group->tensors), step_.weight(),
                                                               std::move(group->codecs), true})});
    return;
  }
  external_role_ = config_.nccl_role;
  out.push_back(Ask{*external_, config_.nccl_role, "mean",
                    Value::of(NcclMeanArgs{group->group, std::move(group->tensors), std::move(group->codecs),
                                           step_.weight()})});
}

Effects AllReduceRole::advance(Effects out) {
  if (!failure_) ask_external(out);
  if (!running_ || !step_.done() || failure_) return out;
  auto averaged = step_.take();
  if (!averaged) {
    append(out, fail(make_error(averaged.error().code, "replica {} at step {}: {}", config_.rank, current_,
                                averaged.error().message)));
    return out;
  }
  out.push_back(Complete{*std::exchange(running_, std::nullopt), Value::of(std::move(*averaged))});
  ++current_;
  return out;
}

Effects AllReduceRole::fail(Error error) {
  if (failure_) return {};
  failure_ = std::move(error);
  // Leave the running op and refuse every held and later part, so that no member waits
  // for this replica.
  Effects out = step_.stop(make_error(errc::unavailable, "replica {} failed: {}", config_.rank, failure_->message));
  if (running_) out.push_back(Complete{*std::exchange(running_, std::nullopt), *failure_});
  if (watch_) out.push_back(Complete{*std::exchange(watch_, std::nullopt), *failure_});
  return out;
}

}  // namespace apiary::core::train
