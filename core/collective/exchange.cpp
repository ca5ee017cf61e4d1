#include "core/collective/exchange.hpp"

#include <cmath>

#include <fmt/format.h>

namespace apiary::core::collective {

Result<Exchange> Exchange::create(ExchangeConfig config) {
  if (config.peers.empty() || config.self >= config.peers.size()) {
    return make_error(errc::invalid_argument, "collective exchange: expected a rank below the member count {}, got {}",
                      config.peers.size(), config.self);
  }
  if (config.timeout.count() <= 0) {
    return make_error(errc::invalid_argument, "collective exchange: expected a timeout > 0, got {} s",
                      to_seconds(config.timeout));
  }
  return Exchange(std::move(config));
}

bool Exchange::owns_call(CallId call) const {
  return call > config_.id_base && call <= config_.id_base + 2 * config_.peers.size();
}

std::pair<std::size_t, std::size_t> Exchange::span(std::size_t rank) const {
  const std::size_t n = config_.peers.size();
  const std::size_t total = op_ ? op_->layout.total : 0;
  return {total * rank / n, total * (rank + 1) / n};
}

bool Exchange::expects_request(std::size_t rank) const {
  if (rank == config_.self) return false;
  if (op_->kind == ExchangeKind::gather) return true;
  const auto [lo, hi] = span(config_.self);
  return lo < hi;
}

bool Exchange::expects_answer(std::size_t rank) const {
  if (rank == config_.self) return false;
  if (op_->kind == ExchangeKind::gather) return true;
  const auto [lo, hi] = span(rank);
  return lo < hi;
}

std::string Exchange::names(const std::vector<std::size_t>& ranks) const {
  std::string s;
  for (auto r : ranks) s += fmt::format("{}rank {} ({})", s.empty() ? "" : ", ", r, config_.peers[r]);
  return s.empty() ? std::string("none") : s;
}

Effects Exchange::start_mean(TimePoint now, std::vector<std::vector<float>> tensors, double weight,
                             const std::vector<pb::CompressionType>& codecs) {
  if (op_) {
    result_ = make_error(errc::protocol, "collective exchange: expected one op at a time, got a second one");
    return {};
  }
  const std::uint64_t number = next_op_++;
  if (!std::isfinite(weight) || weight < 0) {
    result_ = make_error(errc::invalid_argument, "collective mean op {}: expected a finite weight >= 0, got {}",
                         number, weight);
    return {};
  }
  std::vector<std::size_t> sizes;
  for (const auto& t : tensors) sizes.push_back(t.size());
  auto layout = make_span_layout(sizes, codecs);
  if (!layout) {
    result_ = layout.error();
    return {};
  }
  const std::size_t n = config_.peers.size();
  Op op;
  op.number = number;
  op.kind = ExchangeKind::mean;
  op.fingerprint = fingerprint_of(op.kind, *layout);
  op.layout = std::move(*layout);
  for (auto& t : tensors) op.flat.insert(op.flat.end(), t.begin(), t.end());
  op.inbox.resize(n);
  op.weights.assign(n, 0.0);
  op_ = std::move(op);
  // 1. Every owner's span of the own tensors, in the codecs; the own span through the same bytes.
  std::vector<std::string> bodies(n);
  for (std::size_t r = 0; r < n; ++r) {
    const auto [lo, hi] = span(r);
    if (lo == hi) continue;
    ExchangeFrame f{number, static_cast<std::uint32_t>(config_.self), ExchangeKind::mean, weight, op_->fingerprint, {}};
    encode_span(op_->layout, lo, hi, op_->flat.data() + lo, f.payload);
    if (r == config_.self) {
      op_->inbox[r].resize(hi - lo);
      (void)decode_span(op_->layout, lo, hi, f.payload, op_->inbox[r].data());
      op_->weights[r] = weight;
    } else {
      bodies[r] = encode_frame(f);
    }
  }
  return begin(now, std::move(bodies));
}

Effects Exchange::start_gather(TimePoint now, std::string payload) {
  if (op_) {
    result_ = make_error(errc::protocol, "collective exchange: expected one op at a time, got a second one");
    return {};
  }
  Op op;
  op.number = next_op_++;
  op.kind = ExchangeKind::gather;
  op.fingerprint = fingerprint_of(op.kind, op.layout);
  op.result.gathered.resize(config_.peers.size());
  const std::string body =
      encode_frame({op.number, static_cast<std::uint32_t>(config_.self), op.kind, 0.0, op.fingerprint, payload});
  op.own_payload = std::move(payload);
  op_ = std::move(op);
  return begin(now, std::vector<std::string>(config_.peers.size(), body));
}

Effects Exchange::begin(TimePoint now, std::vector<std::string> bodies) {
  Effects fx;
  const std::size_t n = config_.peers.size();
  op_->requested.assign(n, false);
  op_->answered.assign(n, false);
  // The op's deadline: every member's part must come by then.
  fx.push_back(SetTimer{config_.id_base, now + config_.timeout});
  for (std::size_t r = 0; r < n; ++r) {
    if (!expects_answer(r)) continue;
    const CallId id = config_.id_base + 1 + (op_->number % 2) * n + r;
    op_->calls[id] = r;
    fx.push_back(unary_call(id, config_.peers[r], config_.handle, std::move(bodies[r]), 2 * config_.timeout));
  }
  // Parts of this op that faster members sent before it started here.
  auto held = std::move(held_);
  held_.clear();
  for (auto& [id, body] : held) serve(fx, id, body);
  if (op_ && op_->kind == ExchangeKind::mean && !op_->reduced) reduce(fx);
  maybe_finish(fx);
  return fx;
}

Effects Exchange::on_request(TimePoint, RequestId id, const std::string& body) {
  Effects fx;
  serve(fx, id, body);
  maybe_finish(fx);
  return fx;
}

void Exchange::serve(Effects& fx, RequestId id, const std::string& body) {
  auto refuse = [&](Error e) { fx.push_back(Reply{id, std::move(e), true}); };
  if (stopped_) return refuse(*stopped_);
  auto f = decode_frame(body);
  if (!f) return refuse(f.error());
  if (f->op >= next_op_) {
    held_.emplace_back(id, body);  // an op not started here yet
    return;
  }
  if (failed_ && f->op == failed_->first) {
    return refuse(make_error(errc::unavailable, "rank {} failed op {}: {}", config_.self, f->op,
                             failed_->second.message));
  }
  if (!op_ || f->op != op_->number) {
    return refuse(make_error(errc::unavailable,
                             "collective exchange: rank {} is past op {} (it ended or failed there); expected op {}",
                             config_.self, f->op, next_op_ - (op_ ? 1 : 0)));
  }
  const std::size_t rank = f->rank;
  if (rank >= config_.peers.size() || !expects_request(rank) || op_->requested[rank]) {
    return refuse(make_error(errc::protocol,
                             "collective exchange op {}: expected one part from each other member, got a part from "
                             "rank {} that is unexpected or repeated",
                             f->op, rank));
  }
  if (f->kind != op_->kind || f->fingerprint != op_->fingerprint) {
    auto e = make_error(errc::invalid_argument,
                        "collective exchange op {}: expected the layout of rank {} (kind, tensor sizes, codecs), got "
                        "another from {}; every member must run the same ops with the same tensors",
                        f->op, config_.self, names({rank}));
    refuse(e);
    return fail(fx, std::move(e));
  }
  op_->requested[rank] = true;
  if (op_->kind == ExchangeKind::gather) {
    op_->result.gathered[rank] = std::move(f->payload);
    fx.push_back(Reply{id, std::string{}, true});
    return;
  }
  // 2. Another member's copy of the own span.
  const auto [lo, hi] = span(config_.self);
  op_->inbox[rank].resize(hi - lo);
  if (auto d = decode_span(op_->layout, lo, hi, f->payload, op_->inbox[rank].data()); !d) {
    refuse(d.error());
    return fail(fx, make_error(errc::protocol, "collective exchange op {}: {} sent a bad part: {}", f->op,
                               names({rank}), d.error().message));
  }
  op_->weights[rank] = f->weight;
  op_->waiting.emplace_back(id, rank);
  reduce(fx);
}

void Exchange::reduce(Effects& fx) {
  if (!op_ || op_->reduced) return;
  for (std::size_t r = 0; r < config_.peers.size(); ++r) {
    if (expects_request(r) && !op_->requested[r]) return;
  }
  const auto [lo, hi] = span(config_.self);
  op_->reduced = true;
  if (lo == hi) return;
  // 3. sum(w_i x_i) / sum(w_i) in rank order, in double; the plain mean when no weight.
  double total = 0;
  for (double w : op_->weights) total += w;
  const std::size_t n = config_.peers.size();
  std::vector<float> avg(hi - lo);
  for (std::size_t j = 0; j < avg.size(); ++j) {
    double acc = 0;
    for (std::size_t r = 0; r < n; ++r) acc += (total > 0 ? op_->weights[r] : 1.0) * op_->inbox[r][j];
    avg[j] = static_cast<float>(acc / (total > 0 ? total : static_cast<double>(n)));
  }
  op_->inbox.clear();
  ExchangeFrame f{op_->number, static_cast<std::uint32_t>(config_.self), ExchangeKind::mean, 0.0, op_->fingerprint,
                  {}};
  encode_span(op_->layout, lo, hi, avg.data(), f.payload);
  // 4. The same bytes to every member, and decode(E) for the own span.
  (void)decode_span(op_->layout, lo, hi, f.payload, op_->flat.data() + lo);
  const std::string answer = encode_frame(f);
  for (const auto& [request, rank] : op_->waiting) fx.push_back(Reply{request, answer, true});
  op_->waiting.clear();
}

Effects Exchange::on_response(TimePoint, CallId call, const Result<std::string>& result) {
  Effects fx;
  if (!op_) return fx;
  auto it = op_->calls.find(call);
  if (it == op_->calls.end()) return fx;
  const std::size_t rank = it->second;
  op_->calls.erase(it);
  if (!result) {
    fail(fx, make_error(errc::peer_down,
                        "collective exchange op {}: expected every member to take part, but the call to {} failed: {}",
                        op_->number, names({rank}), result.error().what()));
    return fx;
  }
  if (op_->kind == ExchangeKind::mean) {
    // 5. The owner's encoded average goes to its span.
    auto f = decode_frame(*result);
    const auto [lo, hi] = span(rank);
    Status placed = f ? ok_status() : Status(f.error());
    if (f && (f->op != op_->number || f->rank != rank || f->fingerprint != op_->fingerprint)) {
      placed = make_error(errc::protocol, "expected the average of op {} from rank {}, got op {} from rank {}",
                          op_->number, rank, f->op, f->rank);
    }
    if (placed) placed = decode_span(op_->layout, lo, hi, f->payload, op_->flat.data() + lo);
    if (!placed) {
      fail(fx, make_error(errc::protocol, "collective exchange op {}: {} answered badly: {}", op_->number,
                          names({rank}), placed.error().message));
      return fx;
    }
  }
  op_->answered[rank] = true;
  maybe_finish(fx);
  return fx;
}

Effects Exchange::on_timer(TimePoint, TimerId id) {
  Effects fx;
  if (!op_ || id != config_.id_base) return fx;
  std::vector<std::size_t> silent;
  std::vector<std::size_t> unanswered;
  for (std::size_t r = 0; r < config_.peers.size(); ++r) {
    if (expects_request(r) && !op_->requested[r]) silent.push_back(r);
    if (expects_answer(r) && !op_->answered[r]) unanswered.push_back(r);
  }
  fail(fx, make_error(errc::peer_down,
                      "collective exchange op {}: expected every member to take part within {} ms, but these sent no "
                      "part: {}; these did not answer: {} (a member died, or stalled longer than the timeout)",
                      op_->number, to_seconds(config_.timeout) * 1e3, names(silent), names(unanswered)));
  return fx;
}

Effects Exchange::on_peer_down(TimePoint, const PeerAddr& peer) {
  Effects fx;
  if (!op_) return fx;
  for (std::size_t r = 0; r < config_.peers.size(); ++r) {
    if (config_.peers[r] != peer) continue;
    if ((expects_request(r) && !op_->requested[r]) || (expects_answer(r) && !op_->answered[r])) {
      fail(fx, make_error(errc::peer_down,
                          "collective exchange op {}: expected every member to take part, but the connection to {} "
                          "broke (it went down)",
                          op_->number, names({r})));
      return fx;
    }
  }
  return fx;
}

Effects Exchange::stop(Error why) {
  Effects fx;
  stopped_ = why;
  if (op_) fail(fx, why);
  for (const auto& [id, body] : held_) fx.push_back(Reply{id, why, true});
  held_.clear();
  return fx;
}

void Exchange::maybe_finish(Effects& fx) {
  if (!op_) return;
  if (op_->kind == ExchangeKind::mean && !op_->reduced) return;
  for (std::size_t r = 0; r < config_.peers.size(); ++r) {
    if (expects_request(r) && !op_->requested[r]) return;
    if (expects_answer(r) && !op_->answered[r]) return;
  }
  ExchangeResult out = std::move(op_->result);
  if (op_->kind == ExchangeKind::mean) {
    std::size_t at = 0;
    for (std::size_t size : op_->layout.sizes) {
      out.tensors.emplace_back(op_->flat.begin() + static_cast<std::ptrdiff_t>(at),
                               op_->flat.begin() + static_cast<std::ptrdiff_t>(at + size));
      at += size;
    }
  } else {
    out.gathered[config_.self] = std::move(op_->own_payload);
  }
  fx.push_back(CancelTimer{config_.id_base});
  result_ = std::move(out);
  op_.reset();
}

void Exchange::fail(Effects& fx, Error error) {
  if (!op_) return;
  for (const auto& [request, rank] : op_->waiting) fx.push_back(Reply{request, error, true});
  for (const auto& [call, rank] : op_->calls) fx.push_back(Cancel{call, "collective exchange op failed here"});
  fx.push_back(CancelTimer{config_.id_base});
  failed_.emplace(op_->number, error);
  result_ = std::move(error);
  op_.reset();
}

Result<ExchangeResult> Exchange::take_result() {
  if (!result_) return make_error(errc::internal, "collective exchange: expected a finished op, got none");
  auto out = std::move(*result_);
  result_.reset();
  return out;
}

}  // namespace apiary::core::collective
