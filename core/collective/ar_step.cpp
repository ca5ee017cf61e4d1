#include "core/collective/ar_step.hpp"

#include <iterator>

#include <fmt/format.h>
#include <utility>

namespace apiary::core::collective {
namespace {

void append(Effects& out, Effects more) {
  out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

}  // namespace

Status apply_averages(const ArAverages& averages, std::map<std::string, ps::Optimizer>& optimizers,
                      std::map<std::string, std::vector<float>>& params) {
  for (auto& [name, opt] : optimizers) {
    auto values = params.find(name);
    auto dense = averages.dense.find(name);
    auto sparse = averages.sparse.find(name);
    if (values == params.end() || (dense == averages.dense.end() && sparse == averages.sparse.end())) {
      return make_error(errc::not_found,
                        "all-reduce step: expected values and an average of {}, got {}; the plan and the "
                        "model disagree",
                        name, values == params.end() ? "no values" : "no average");
    }
    auto applied = dense != averages.dense.end() ? opt.apply_dense(values->second, dense->second)
                                                 : opt.apply_sparse(values->second, sparse->second);
    if (!applied) return applied;
  }
  return ok_status();
}

Result<ArStep> ArStep::create(ArPlan plan, ExchangeConfig exchange) {
  auto sync = Synchronizer::create(std::move(plan));
  if (!sync) return sync.error();
  std::vector<PeerAddr> members = exchange.peers;
  const std::size_t self = exchange.self;
  auto ex = Exchange::create(std::move(exchange));
  if (!ex) return ex.error();
  return ArStep(std::move(*sync), std::move(*ex), std::move(members), self);
}

std::string ArStep::name_of(const PeerAddr& peer) const {
  std::size_t rank = 0;
  while (rank < members_.size() && members_[rank] != peer) ++rank;
  return fmt::format("rank {} ({})", rank, peer);
}

std::optional<PeerAddr> ArStep::first_down(const std::set<PeerAddr>& down) const {
  for (std::size_t r = 0; r < members_.size(); ++r) {
    if (r != self_ && down.count(members_[r]) != 0) return members_[r];
  }
  return std::nullopt;
}

Effects ArStep::begin(TimePoint now, std::map<std::string, std::vector<float>> gradients, double weight,
                      const std::map<std::string, ps::SparseGradient>* rows) {
  weight_ = weight;
  outcome_.reset();
  outputs_.clear();
  sparse_.clear();
  rest_.clear();
  const ArPlan& plan = sync_.plan();
  // Sparse variables: the rows they touched, gathered after the dense collectives.
  static const std::vector<float> none;
  auto gradient_of = [&](const std::string& name) -> const std::vector<float>& {
    auto it = gradients.find(name);
    return it == gradients.end() ? none : it->second;
  };
  for (const auto& sp : plan.sparse) {
    const ps::SparseGradient* given = nullptr;
    if (rows != nullptr) {
      auto it = rows->find(sp.name);
      if (it != rows->end()) given = &it->second;
    }
    sparse_[sp.name] = given != nullptr ? *given : touched_rows(gradient_of(sp.name), sp.row_width);
  }
  std::map<std::string, std::vector<float>> dense;
  for (const auto& v : plan.variables) {
    if (sparse_.count(v.name) != 0) continue;
    if (auto it = gradients.find(v.name); it != gradients.end()) dense.insert(gradients.extract(it));
  }
  rest_ = std::move(gradients);
  // One collective per fusion group, each tensor compressed as its synchronizer says.
  auto inputs = sync_.prepare(std::move(dense));
  if (!inputs) {
    finish(inputs.error());
    return {};
  }
  inputs_ = std::move(*inputs);
  if (inputs_.empty() && plan.sparse.empty()) {
    finish(ArAverages{{}, {}, std::exchange(rest_, {})});
    return {};
  }
  return start_op(now);
}

Effects ArStep::start_op(TimePoint now) {
  if (outputs_.size() == inputs_.size()) {
    // Every replica's rows to every replica, weighted by its samples.
    auto payload = sync_.prepare_sparse(sparse_, weight_);
    if (!payload) {
      finish(payload.error());
      return {};
    }
    return advance(now, exchange_.start_gather(now, std::move(*payload)));
  }
  // Every replica gets the same bits: decode(encode(weighted average)), own share included.
  auto& in = inputs_[outputs_.size()];
  if ((external_nccl_ && in.transport == Transport::nccl) || (external_ring_ && in.transport == Transport::ring)) {
    // The owner runs it (on its NCCL group, or streamed) and hands the averages to on_external().
    external_waiting_ = true;
    external_ = std::move(in);
    return {};
  }
  return advance(now, exchange_.start_mean(now, std::move(in.tensors), weight_, in.codecs));
}

Effects ArStep::advance(TimePoint now, Effects out) {
  if (!exchange_.has_result() || done()) return out;
  auto result = exchange_.take_result();
  ++done_ops_;
  if (!result) return failed_op(std::move(out), result.error());
  if (outputs_.size() < inputs_.size()) return mean_done(now, std::move(out), std::move(result->tensors));
  auto rows = sync_.assemble_sparse(result->gathered);
  if (!rows) {
    finish(rows.error());
    return out;
  }
  sparse_ = std::move(*rows);
  return assemble(std::move(out));
}

Effects ArStep::failed_op(Effects out, const Error& e) {
  const bool gather = outputs_.size() == inputs_.size();
  const std::string what =
      gather ? std::string("sparse gather") : fmt::format("fusion group {}", inputs_[outputs_.size()].group);
  finish(make_error(e.code, "{}: {}", what, e.message));
  return out;
}

Effects ArStep::mean_done(TimePoint now, Effects out, std::vector<std::vector<float>> tensors) {
  outputs_.push_back(std::move(tensors));
  if (outputs_.size() < inputs_.size() || !sync_.plan().sparse.empty()) {
    append(out, start_op(now));
    return out;
  }
  return assemble(std::move(out));
}

Effects ArStep::assemble(Effects out) {
  auto averaged = sync_.assemble(std::exchange(outputs_, {}));
  if (!averaged) {
    finish(averaged.error());
    return out;
  }
  finish(ArAverages{std::move(*averaged), std::move(sparse_), std::exchange(rest_, {})});
  return out;
}

std::optional<CollectiveInput> ArStep::take_external() { return std::exchange(external_, std::nullopt); }

Effects ArStep::on_external(TimePoint now, Result<std::vector<std::vector<float>>> averages) {
  if (!external_waiting_ || done()) return {};
  external_waiting_ = false;
  ++done_ops_;
  if (!averages) return failed_op({}, averages.error());
  return mean_done(now, {}, std::move(*averages));
}

Effects ArStep::on_request(TimePoint now, RequestId id, const std::string& body) {
  return advance(now, exchange_.on_request(now, id, body));
}

Effects ArStep::on_response(TimePoint now, CallId call, const Result<std::string>& result) {
  return advance(now, exchange_.on_response(now, call, result));
}

Effects ArStep::on_timer(TimePoint now, TimerId id) { return advance(now, exchange_.on_timer(now, id)); }

Effects ArStep::stop(Error why) {
  external_waiting_ = false;
  external_.reset();
  Effects out = exchange_.stop(std::move(why));
  if (exchange_.has_result()) (void)exchange_.take_result();
  return out;
}

Result<ArAverages> ArStep::take() {
  if (!outcome_) {
    return make_error(errc::unavailable, "all-reduce step: its averages are not ready; wait until done()");
  }
  Result<ArAverages> out = std::move(*outcome_);
  outcome_.reset();
  return out;
}

}  // namespace apiary::core::collective
