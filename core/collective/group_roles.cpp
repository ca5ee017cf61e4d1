#include "core/collective/group_roles.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/collective/barrier_role.hpp"

namespace apiary::core::collective {

namespace av = core::averaging;

namespace {

/// A runner uses 2 + 2 * group size ids; each op's lie in a range of their own.
constexpr int k_op_shift = 20;

void append(Effects& out, Effects more) {
  out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

}  // namespace

std::string group_barrier_handle(const std::string& job) { return job + "::Collective.rpc_barrier"; }

std::string group_exchange_handle(const std::string& job) { return job + "::Collective.rpc_exchange"; }

std::string group_part_handle(const std::string& job, std::uint64_t op) {
  return fmt::format("{}/{}::{}", job, op % 2, av::k_aggregate_part_handle);
}

// ---- ExchangeRole ----

Effects ExchangeRole::on(TimePoint now, Input input) {
  if (auto* r = std::get_if<Request>(&input)) return advance(exchange_.on_request(now, r->id, std::string(r->body.view())));
  if (auto* r = std::get_if<Response>(&input)) return advance(exchange_.on_response(now, r->call, r->result));
  if (auto* t = std::get_if<TimerFired>(&input)) return advance(exchange_.on_timer(now, t->id));
  auto* call = std::get_if<LocalCall>(&input);
  if (call == nullptr) return {};
  if (call->method == "stop") {
    const auto* why = call->args.as<Error>();
    Effects out = exchange_.stop(why != nullptr ? *why : make_error(errc::unavailable, "the member stopped"));
    out = advance(std::move(out));
    out.push_back(Complete{call->op, Value{}});
    return out;
  }
  if (call->method != "mean" && call->method != "gather") return {unknown_method(*call, "the exchange")};
  if (running_) return {Complete{call->op, make_error(errc::protocol, "collective: expected one op at a time, got a second one")}};
  if (call->method == "mean") {
    auto* args = call->args.as<ExchangeMeanArgs>();
    if (args == nullptr) return {Complete{call->op, make_error(errc::invalid_argument, "mean: expected ExchangeMeanArgs")}};
    running_ = call->op;
    gather_ = false;
    return advance(exchange_.start_mean(now, std::move(args->tensors), args->weight, args->codecs));
  }
  auto* payload = call->args.as<std::string>();
  if (payload == nullptr) return {Complete{call->op, make_error(errc::invalid_argument, "gather: expected a payload")}};
  running_ = call->op;
  gather_ = true;
  return advance(exchange_.start_gather(now, std::move(*payload)));
}

Effects ExchangeRole::advance(Effects out) {
  if (!exchange_.has_result()) return out;
  auto r = exchange_.take_result();
  if (!running_) return out;  // an op left by stop()
  const OpId op = *std::exchange(running_, std::nullopt);
  if (!r) {
    out.push_back(Complete{op, r.error()});
  } else if (gather_) {
    out.push_back(Complete{op, Value::of(std::move(r->gathered))});
  } else {
    out.push_back(Complete{op, Value::of(std::move(r->tensors))});
  }
  return out;
}

// ---- GroupAllReduceRole ----

std::vector<std::string> GroupAllReduceRole::handles() const {
  return {group_part_handle(config_.job, 0), group_part_handle(config_.job, 1)};
}

PeerAddr GroupAllReduceRole::member_of(const PeerAddr& from) const {
  for (const auto& m : config_.members) {
    if (from == m || (!m.peer() && from.peer() && from.key() == m.key())) return m;
  }
  return {};
}

Effects GroupAllReduceRole::on(TimePoint now, Input input) {
  if (auto* call = std::get_if<LocalCall>(&input)) {
    if (call->method != "allreduce") return {unknown_method(*call, "the group's all-reduce")};
    if (running_) {
      return {Complete{call->op, make_error(errc::protocol, "collective: expected one op at a time, got a second one")}};
    }
    auto* args = call->args.as<GroupAllReduceArgs>();
    if (args == nullptr) {
      return {Complete{call->op, make_error(errc::invalid_argument, "allreduce: expected GroupAllReduceArgs")}};
    }
    return start(now, call->op, *args);
  }
  return advance(feed(now, std::move(input)));
}

Effects GroupAllReduceRole::feed(TimePoint now, Input input) {
  if (auto* r = std::get_if<Request>(&input)) {
    // A part stream of an op not started yet (a faster member's): held until it starts.
    if (!runner_ || r->handle != part_handle_) {
      held_requests_.push_back(r->id);
      held_.push_back(std::move(input));
      return {};
    }
    return runner_->on_request(now, r->id, member_of(r->from), std::move(r->body));
  }
  if (auto* m = std::get_if<RequestMessage>(&input)) {
    if (std::find(held_requests_.begin(), held_requests_.end(), m->id) != held_requests_.end()) {
      held_.push_back(std::move(input));
      return {};
    }
    if (!runner_) return {};
    return runner_->on_request_message(now, m->id, std::move(m->message), m->last);
  }
  if (!runner_) return {};
  if (auto* m = std::get_if<StreamMessage>(&input)) return runner_->on_message(now, m->call, m->message.view(), m->landed);
  if (auto* r = std::get_if<Response>(&input)) return runner_->on_response(now, r->call, r->result);
  if (auto* t = std::get_if<TimerFired>(&input)) return runner_->on_timer(now, t->id);
  return {};
}

Effects GroupAllReduceRole::start(TimePoint now, OpId op, GroupAllReduceArgs& args) {
  av::AllReduceConfig c;
  c.group_id = fmt::format("{}/{}", config_.job, args.op);
  c.peers = config_.members;
  c.self = config_.rank;
  c.modes.assign(c.peers.size(), av::AveragingMode::node);
  c.weight = args.weight;
  for (const auto& t : args.tensors) c.tensor_sizes.push_back(static_cast<std::int64_t>(t.size()));
  c.codecs = args.codecs.empty() ? std::vector<pb::CompressionType>{pb::NONE} : args.codecs;
  c.peer_fractions.assign(c.peers.size(), 1.0);
  c.part_size_bytes = config_.part_size_bytes;
  c.sender_timeout = config_.timeout;
  c.reducer_timeout = 2 * config_.timeout;
  c.call_timeout = 4 * config_.timeout;
  c.handle = group_part_handle(config_.job, args.op);
  c.id_base = (++generation_) << k_op_shift;
  // The tensors go to the runner and come back averaged (no copy, no deltas); parts
  // leave as views of them; answers carry the averages, so every member holds the same bits.
  c.averages_in_place = true;
  c.splice_parts = true;
  c.answer_averages = true;
  c.identical_results = args.identical_results;
  auto runner = av::AllReduceRunner::create(std::move(c), std::move(args.tensors));
  if (!runner) return {Complete{op, runner.error()}};
  op_ = args.op;
  part_handle_ = group_part_handle(config_.job, op_);
  running_ = op;
  runner_.emplace(std::move(*runner));
  Effects out = runner_->start(now);
  // The streams this op's members opened early, in the order they came.
  auto held = std::move(held_);
  held_.clear();
  held_requests_.clear();
  for (auto& in : held) append(out, feed(now, std::move(in)));
  return advance(std::move(out));
}

Effects GroupAllReduceRole::advance(Effects out) {
  if (!runner_ || !runner_->finished() || !running_) return out;
  auto outcome = runner_->take_outcome();
  runner_.reset();
  const OpId op = *std::exchange(running_, std::nullopt);
  if (!outcome.status) {
    out.push_back(Complete{op, outcome.status.error()});
    return out;
  }
  if (!outcome.failed_senders.empty() || !outcome.failed_reducers.empty()) {
    auto names = [&](const std::vector<PeerAddr>& peers) {
      std::string s;
      for (const auto& p : peers) {
        std::size_t rank = 0;
        while (rank < config_.members.size() && config_.members[rank] != p) ++rank;
        s += fmt::format("{}rank {} ({})", s.empty() ? "" : ", ", rank, p);
      }
      return s.empty() ? std::string("none") : s;
    };
    out.push_back(Complete{
        op, make_error(errc::peer_down,
                       "all-reduce op {} of job {}: expected every member to take part, but these failed as reducers: "
                       "{}; as senders: {} (a member died, or stalled longer than the {} ms timeout)",
                       op_, config_.job, names(outcome.failed_reducers), names(outcome.failed_senders),
                       std::chrono::duration_cast<std::chrono::milliseconds>(config_.timeout).count())});
    return out;
  }
  out.push_back(Complete{op, Value::of(std::move(outcome.averages))});
  return out;
}

Status add_group_roles(Mux& mux, const GroupConfig& config) {
  if (config.job.empty()) {
    return make_error(errc::invalid_argument, "collective: expected a job name (it names the handles), got none");
  }
  if (config.members.empty() || config.rank >= config.members.size()) {
    return make_error(errc::invalid_argument, "collective: expected a rank below the member count {}, got {}",
                      config.members.size(), config.rank);
  }
  if (config.timeout <= Duration::zero()) {
    return make_error(errc::invalid_argument, "collective: expected a timeout > 0 ms, got {} ms",
                      std::chrono::duration_cast<std::chrono::milliseconds>(config.timeout).count());
  }
  BarrierConfig bc;
  bc.peers = config.members;
  bc.self = config.rank;
  bc.handle = group_barrier_handle(config.job);
  if (auto added = mux.add("barrier", std::make_unique<BarrierRole>(std::move(bc))); !added) return added.error();
  ExchangeConfig ec;
  ec.peers = config.members;
  ec.self = config.rank;
  ec.handle = group_exchange_handle(config.job);
  ec.timeout = config.timeout;
  auto exchange = Exchange::create(std::move(ec));
  if (!exchange) return exchange.error();
  if (auto added = mux.add("exchange", std::make_unique<ExchangeRole>(std::move(*exchange), group_exchange_handle(config.job)));
      !added) {
    return added.error();
  }
  if (auto added = mux.add("allreduce", std::make_unique<GroupAllReduceRole>(config)); !added) return added.error();
  return ok_status();
}

}  // namespace apiary::core::collective
