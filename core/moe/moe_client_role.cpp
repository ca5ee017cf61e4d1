#include "core/moe/moe_client_role.hpp"

#include <fmt/format.h>

#include <cstring>
#include <set>
#include <utility>

#include "core/moe/expert_server_role.hpp"
#include "messages/tensor/codec.hpp"
#include "runtime.pb.h"

namespace apiary::core::moe {
namespace {

/// A [rows, h] float32 tensor of `values`.
messages::Tensor rows_tensor(const std::vector<float>& values, std::size_t rows, std::uint32_t h) {
  auto t = messages::Tensor::copy_of(messages::dtype::float32, {static_cast<std::uint32_t>(rows), h}, values.data(),
                                     values.size() * sizeof(float));
  return std::move(*t);  // the sizes agree by construction
}

/// A serialized ExpertRequest for `uid` with `tensors`, sent uncompressed.
std::string request_of(const std::string& uid, const std::vector<messages::Tensor>& tensors) {
  pb::ExpertRequest r;
  r.set_uid(uid);
  for (const auto& t : tensors) *r.add_tensors() = messages::encode_none(t);
  return r.SerializeAsString();
}

double ms(Duration d) { return to_seconds(d) * 1e3; }

}  // namespace

Status validate(const MoeClientConfig& c) {
  auto bad = [](const char* field, const std::string& got, const std::string& want) {
    return make_error(errc::invalid_argument, "expected {} {}, got {}; fix the client config", field, want, got);
  };
  std::set<std::string> uids;
  for (const auto& e : c.grid) {
    if (e.uid.empty() || !uids.insert(e.uid).second) return bad("grid", "'" + e.uid + "'", "distinct, non-empty uids");
  }
  if (c.grid.empty()) return bad("grid", "no experts", "at least one expert");
  if (c.k < 1 || c.k > c.grid.size()) {
    return bad("k", std::to_string(c.k), "in [1, " + std::to_string(c.grid.size()) + "] (the grid's size)");
  }
  if (c.k_min < 1 || c.k_min > c.k) {
    return bad("k_min", std::to_string(c.k_min), "in [1, k = " + std::to_string(c.k) + "]");
  }
  if (c.timeout_after_k_min < Duration::zero()) return bad("timeout_after_k_min", "a negative time", ">= 0");
  if (c.forward_timeout <= Duration::zero()) return bad("forward_timeout", "a time <= 0", "> 0");
  if (c.backward_timeout <= Duration::zero()) return bad("backward_timeout", "a time <= 0", "> 0");
  if (c.hidden_dim < 1) return bad("hidden_dim", "0", ">= 1");
  if (c.rows < 1) return bad("rows", "0", ">= 1");
  if (c.steps < 0) return bad("steps", std::to_string(c.steps), ">= 0");
  if (c.pause < Duration::zero()) return bad("pause", "a negative time", ">= 0");
  return ok_status();
}

std::uint64_t checksum_of(const std::vector<float>& values) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64 offset basis
  for (float v : values) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    for (int i = 0; i < 4; ++i) {
      h ^= static_cast<unsigned char>(bits >> (8 * i));
      h *= 0x100000001b3ULL;  // FNV-1a 64 prime
    }
  }
  return h;
}

MoeClientRole::MoeClientRole(MoeClientConfig config) : config_(std::move(config)), rng_(config_.seed) {}

Effects MoeClientRole::on(TimePoint now, Input input) {
  if (std::holds_alternative<Start>(input)) return done() ? Effects{} : begin_step(now);
  if (auto* r = std::get_if<Response>(&input)) return on_response(now, r->call, r->result);
  if (auto* t = std::get_if<TimerFired>(&input)) return on_timer(now, t->id);
  if (auto* d = std::get_if<PeerDown>(&input)) return on_peer_down(now, d->peer);
  if (auto* c = std::get_if<LocalCall>(&input)) return {unknown_method(*c, "the MoE client")};
  return {};
}

Effects MoeClientRole::begin_step(TimePoint now) {
  const std::size_t k = config_.k;
  const std::size_t h = config_.hidden_dim;
  current_ = MoeStep{};
  current_.step = static_cast<std::int64_t>(steps_.size());
  current_.start = now;
  // Draw k distinct experts (a partial Fisher-Yates shuffle of the grid), then the rows.
  std::vector<std::size_t> order(config_.grid.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (std::size_t i = 0; i < k; ++i) std::swap(order[i], order[i + rng_.uniform(order.size() - i)]);
  chosen_.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
  current_.inputs.resize(config_.rows * h);
  for (float& v : current_.inputs) v = static_cast<float>(2.0 * rng_.uniform01() - 1.0);
  current_.mask.assign(k, false);
  outputs_.assign(k, {});
  // Send the batch to every expert at once.
  const messages::Tensor x = rows_tensor(current_.inputs, config_.rows, config_.hidden_dim);
  Effects fx;
  for (std::size_t e = 0; e < k; ++e) {
    const GridExpert& expert = config_.grid[chosen_[e]];
    current_.asked.push_back(expert.uid);
    const CallId id = next_call_++;
    pending_.emplace(id, Pending{e, true});
    fx.push_back(unary_call(id, expert.server, k_forward_handle, request_of(expert.uid, {x}), config_.forward_timeout));
  }
  phase_ = Phase::forward;
  return fx;
}

Effects MoeClientRole::on_response(TimePoint now, CallId call, const Result<std::string>& response) {
  auto it = pending_.find(call);
  if (it == pending_.end()) return {};  // a call of an earlier step, or one given up
  const Pending p = it->second;
  pending_.erase(it);
  if (!response) {
    record(p, {}, response.error());
  } else if (!p.forward) {
    record(p, {}, std::nullopt);
  } else {
    auto out = output_of(*response);
    if (out) record(p, std::move(*out), std::nullopt);
    else record(p, {}, out.error());
  }
  return advance(now, {});
}

Effects MoeClientRole::on_timer(TimePoint now, TimerId id) {
  if (id == k_step_timer && phase_ == Phase::idle && !done()) return begin_step(now);
  if (id != k_k_min_timer || phase_ != Phase::forward || !k_min_armed_) return {};
  // The wait after k_min answers is over: the experts still running are masked out.
  Effects fx;
  for (const auto& [call, p] : pending_) {
    fx.push_back(Cancel{call, "the mixture stopped waiting"});
    current_.failures.push_back(failure(
        p.expert, fmt::format("no answer {:.3f} ms after k_min = {} answers (timeout_after_k_min)",
                              ms(config_.timeout_after_k_min), config_.k_min)));
  }
  pending_.clear();
  k_min_armed_ = false;  // it fired
  return end_forward(now, std::move(fx));
}

Effects MoeClientRole::on_peer_down(TimePoint now, const PeerAddr& peer) {
  Effects fx;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (config_.grid[chosen_[it->second.expert]].server != peer) {
      ++it;
      continue;
    }
    fx.push_back(Cancel{it->first, "the server went down"});
    record(it->second, {}, make_error(errc::peer_down, "server {} went down", peer));
    it = pending_.erase(it);
  }
  return fx.empty() ? fx : advance(now, std::move(fx));
}

void MoeClientRole::record(const Pending& p, std::vector<float> output, const std::optional<Error>& error) {
  if (error) {
    current_.failures.push_back(failure(p.expert, (p.forward ? "forward: " : "backward: ") + error->what()));
  } else if (p.forward) {
    current_.mask[p.expert] = true;
    outputs_[p.expert] = std::move(output);
    ++current_.answered;
  } else {
    ++current_.backward_answered;
  }
}

Effects MoeClientRole::advance(TimePoint now, Effects fx) {
  if (phase_ == Phase::backward) return pending_.empty() ? finish(now, std::move(fx)) : fx;
  if (phase_ != Phase::forward) return fx;
  if (pending_.empty()) return end_forward(now, std::move(fx));
  // k_min answers: the others get timeout_after_k_min more.
  if (current_.answered >= config_.k_min && !k_min_armed_) {
    fx.push_back(SetTimer{k_k_min_timer, now + config_.timeout_after_k_min});
    k_min_armed_ = true;
  }
  return fx;
}

Effects MoeClientRole::end_forward(TimePoint now, Effects fx) {
  if (k_min_armed_) fx.push_back(CancelTimer{k_k_min_timer});
  k_min_armed_ = false;
  const std::size_t a = current_.answered;
  if (a < config_.k_min) {
    std::string why;
    for (const auto& f : current_.failures) why += (why.empty() ? "" : "; ") + f;
    current_.error = make_error(errc::unavailable,
                                "step {}: expected at least k_min = {} of the {} experts asked to answer, got {}; {}; "
                                "bring their servers back or lower k_min",
                                current_.step, config_.k_min, config_.k, a, why);
    return finish(now, std::move(fx));
  }
  // Mix: the mean of the answers, in the order the experts were drawn.
  std::vector<float>& mixed = current_.mixed;
  mixed.assign(current_.inputs.size(), 0.0f);
  for (std::size_t e = 0; e < config_.k; ++e) {
    if (!current_.mask[e]) continue;
    for (std::size_t i = 0; i < mixed.size(); ++i) mixed[i] += outputs_[e][i];
  }
  for (float& v : mixed) v /= static_cast<float>(a);
  current_.ok = true;
  current_.checksum = checksum_of(mixed);
  // L = ½‖mixed‖²: every answering expert's output gets dL/dy_e = mixed / a.
  std::vector<float> grad(mixed);
  for (float& v : grad) v /= static_cast<float>(a);
  const messages::Tensor x = rows_tensor(current_.inputs, config_.rows, config_.hidden_dim);
  const messages::Tensor g = rows_tensor(grad, config_.rows, config_.hidden_dim);
  for (std::size_t e = 0; e < config_.k; ++e) {
    if (!current_.mask[e]) continue;
    const GridExpert& expert = config_.grid[chosen_[e]];
    const CallId id = next_call_++;
    pending_.emplace(id, Pending{e, false});
    fx.push_back(unary_call(id, expert.server, k_backward_handle, request_of(expert.uid, {x, g}),
                            config_.backward_timeout));
  }
  phase_ = Phase::backward;
  return fx;
}

Effects MoeClientRole::finish(TimePoint now, Effects fx) {
  current_.end = now;
  steps_.push_back(std::move(current_));
  current_ = MoeStep{};
  outputs_.clear();
  pending_.clear();
  phase_ = Phase::idle;
  if (!done()) fx.push_back(SetTimer{k_step_timer, now + config_.pause});
  return fx;
}

Result<std::vector<float>> MoeClientRole::output_of(const std::string& response) const {
  pb::ExpertResponse r;
  if (!r.ParseFromString(response) || r.tensors_size() < 1) {
    return make_error(errc::malformed, "expected an ExpertResponse with one tensor, got {} bytes that are not one",
                      response.size());
  }
  auto t = messages::decode(r.tensors(0));
  if (!t) return t.error();
  const messages::Shape want{static_cast<std::uint32_t>(config_.rows), config_.hidden_dim};
  if (t->type() != messages::dtype::float32 || t->shape() != want) {
    return make_error(errc::malformed,
                      "expected a float32 output of shape {} (the batch's rows and hidden dim), got {} of shape {}; "
                      "give the client the experts' hidden dim",
                      messages::format_shape(want), messages::to_string(t->type()), messages::format_shape(t->shape()));
  }
  std::vector<float> out(t->numel());
  std::memcpy(out.data(), t->data<float>(), t->byte_size());
  return out;
}

std::string MoeClientRole::failure(std::size_t expert, const std::string& what) const {
  const GridExpert& e = config_.grid[chosen_[expert]];
  return fmt::format("{} at {}: {}", e.uid, e.server, what);
}

}  // namespace apiary::core::moe
