#include "core/ps/replica.hpp"

#include <algorithm>
#include <limits>
#include <utility>

namespace apiary::core::ps {

namespace {
const char* phase_name(ReplicaPhase p) {
  switch (p) {
    case ReplicaPhase::idle: return "idle";
    case ReplicaPhase::pulling: return "pulling";
    case ReplicaPhase::computing: return "computing";
    case ReplicaPhase::pushing: return "pushing";
  }
  return "unknown";
}
}  // namespace

Result<Replica> Replica::create(std::int32_t id, std::vector<VariablePlan> variables) {
  std::vector<Planned> planned;
  std::map<std::size_t, std::pair<std::size_t, std::size_t>> where;
  for (auto& v : variables) {
    auto layouts = shard_layouts(v.shape, v.partitioner);
    if (!layouts) return make_error(layouts.error().code, "variable {}: {}", v.name, layouts.error().message);
    if (layouts->size() != v.shards.size()) {
      return make_error(errc::invalid_argument, "variable {}: expected {} shard ids (one per piece), got {}", v.name,
                        layouts->size(), v.shards.size());
    }
    if (v.sparse && (v.shape.empty() || layouts->front().axis != 0)) {
      return make_error(errc::invalid_argument,
                        "variable {}: expected a sparse variable of rank >= 1 split along axis 0, got rank {} "
                        "split along axis {}", v.name, v.shape.size(), layouts->front().axis);
    }
    for (std::size_t piece = 0; piece < v.shards.size(); ++piece) {
      if (!where.emplace(v.shards[piece], std::make_pair(planned.size(), piece)).second) {
        return make_error(errc::invalid_argument, "variable {}: shard id {} is already used; give each piece its own",
                          v.name, v.shards[piece]);
      }
    }
    planned.push_back(Planned{std::move(v), std::move(*layouts)});
  }
  return Replica(id, std::move(planned), std::move(where));
}

Replica::Replica(std::int32_t id, std::vector<Planned> variables,
                 std::map<std::size_t, std::pair<std::size_t, std::size_t>> where)
    : id_(id), variables_(std::move(variables)), where_(std::move(where)) {}

Error Replica::wrong_phase(const char* call, const char* expected) const {
  return make_error(errc::protocol, "replica {}: {} expects phase {}, but the replica is {} at step {}", id_, call,
                    expected, phase_name(phase_), step_);
}

Result<std::vector<ShardPull>> Replica::start_pull() {
  if (phase_ != ReplicaPhase::idle) return wrong_phase("start_pull", "idle");
  phase_ = ReplicaPhase::pulling;
  pulled_.clear();
  in_place_.clear();
  min_version_ = std::numeric_limits<std::int64_t>::max();
  std::vector<ShardPull> out;
  for (const auto& [shard, _] : where_) out.push_back(ShardPull{shard, step_});
  return out;
}

Status Replica::check_reply(std::size_t shard, const PullReply& reply, bool in_place) const {
  if (phase_ != ReplicaPhase::pulling) return wrong_phase("on_pull_reply", "pulling");
  auto it = where_.find(shard);
  if (it == where_.end() || pulled_.count(shard) != 0 || reply.replica != id_ || reply.step != step_) {
    return make_error(errc::protocol,
                      "replica {}: expected one reply per shard for replica {} step {}, got shard {} replica {} "
                      "step {} (unknown or repeated shard?)", id_, id_, step_, shard, reply.replica, reply.step);
  }
  const Planned& v = variables_[it->second.first];
  // A variable's pieces all come in place or all as values.
  const bool others_in_place = in_place_.count(it->second.first) != 0;
  const bool others_as_values = !others_in_place && std::any_of(pulled_.begin(), pulled_.end(), [&](const auto& p) {
    return where_.at(p.first).first == it->second.first;
  });
  if ((in_place && others_as_values) || (!in_place && others_in_place)) {
    return make_error(errc::invalid_argument,
                      "replica {}: the pieces of {} came both in place and as values; expected one or the other",
                      id_, v.plan.name);
  }
  if (in_place) {
    if (v.plan.sparse || !pieces_are_ranges(v.layouts, ShardLayout{v.plan.shape}.size())) {
      return make_error(errc::invalid_argument,
                        "replica {}: shard {} is a piece of {}, whose pieces are not ranges of its values; expected "
                        "its values", id_, shard, v.plan.name);
    }
    return ok_status();
  }
  const auto& layout = v.layouts[it->second.second];
  if (reply.values.size() != layout.size()) {
    return make_error(errc::invalid_argument, "replica {}: expected {} values from shard {}, got {}", id_,
                      layout.size(), shard, reply.values.size());
  }
  return ok_status();
}

bool Replica::pulled(std::int64_t version) {
  min_version_ = std::min(min_version_, version);
  if (pulled_.size() < where_.size()) return false;
  phase_ = ReplicaPhase::computing;
  return true;
}

Result<bool> Replica::on_pull_reply(std::size_t shard, const PullReply& reply) {
  if (auto s = check_reply(shard, reply); !s) return s.error();
  pulled_.emplace(shard, reply.values);
  return pulled(reply.version);
}

Result<bool> Replica::on_pull_reply(std::size_t shard, PullReply&& reply) {
  if (auto s = check_reply(shard, reply); !s) return s.error();
  pulled_.emplace(shard, std::move(reply.values));
  return pulled(reply.version);
}

Result<bool> Replica::on_pull_reply_in_place(std::size_t shard, const PullReply& reply) {
  if (auto s = check_reply(shard, reply, true); !s) return s.error();
  in_place_.insert(where_.at(shard).first);
  pulled_.emplace(shard, std::vector<float>{});
  return pulled(reply.version);
}

Error Replica::taken(const char* call) const {
  return make_error(errc::protocol,
                    "replica {}: {} found the pulled pieces of step {} already taken; take_parameters() hands "
                    "them over once per step",
                    id_, call, step_);
}

Result<std::map<std::string, std::vector<float>>> Replica::parameters() const {
  if (phase_ != ReplicaPhase::computing) return wrong_phase("parameters", "computing");
  if (pulled_.size() < where_.size()) return taken("parameters");
  if (!in_place_.empty()) {
    return make_error(errc::protocol, "replica {}: parameters() at step {}: pieces came in place, into the caller's "
                      "vectors; take_parameters() leaves those variables to it", id_, step_);
  }
  std::map<std::string, std::vector<float>> out;
  for (const auto& v : variables_) {
    std::vector<std::vector<float>> pieces;
    for (auto shard : v.plan.shards) pieces.push_back(pulled_.at(shard));
    auto whole = reassemble(pieces, v.plan.shape, v.layouts);
    if (!whole) return whole.error();
    out.emplace(v.plan.name, std::move(*whole));
  }
  return out;
}

Result<std::map<std::string, std::vector<float>>> Replica::take_parameters() {
  if (phase_ != ReplicaPhase::computing) return wrong_phase("take_parameters", "computing");
  if (pulled_.size() < where_.size()) return taken("take_parameters");
  std::map<std::string, std::vector<float>> out;
  for (std::size_t i = 0; i < variables_.size(); ++i) {
    const Planned& v = variables_[i];
    if (in_place_.count(i) != 0) continue;  // the caller holds it
    std::vector<std::vector<float>> pieces;
    for (auto shard : v.plan.shards) pieces.push_back(std::move(pulled_.at(shard)));
    if (pieces.size() == 1) {
      out.emplace(v.plan.name, std::move(pieces.front()));  // one piece: the variable as it came
      continue;
    }
    auto whole = reassemble(pieces, v.plan.shape, v.layouts);
    if (!whole) return whole.error();
    out.emplace(v.plan.name, std::move(*whole));
  }
  pulled_.clear();
  in_place_.clear();
  return out;
}

Result<std::vector<ShardPush>> Replica::push(const std::map<std::string, Gradient>& gradients, double samples) {
  auto views = push_views(gradients, samples);
  if (!views) return views.error();
  std::vector<ShardPush> out;
  for (auto& v : *views) {
    Gradient g = v.piece ? std::move(*v.piece) : Gradient{std::vector<float>(v.dense, v.dense + v.count)};
    out.push_back(ShardPush{v.shard, Push{v.replica, v.step, std::move(g), v.samples}});
  }
  return out;
}

Result<std::vector<ShardPushView>> Replica::push_views(const std::map<std::string, Gradient>& gradients,
                                                       double samples) {
  if (phase_ != ReplicaPhase::computing) return wrong_phase("push", "computing");
  if (gradients.size() != variables_.size()) {
    return make_error(errc::invalid_argument, "replica {}: expected a gradient for each of {} variables, got {}", id_,
                      variables_.size(), gradients.size());
  }
  std::vector<ShardPushView> out;
  for (const auto& v : variables_) {
    auto it = gradients.find(v.plan.name);
    if (it == gradients.end()) {
      return make_error(errc::invalid_argument, "replica {}: expected a gradient for variable {}, got none", id_,
                        v.plan.name);
    }
    if (std::holds_alternative<SparseGradient>(it->second) != v.plan.sparse) {
      return make_error(errc::invalid_argument, "replica {}: expected a {} gradient for variable {}", id_,
                        v.plan.sparse ? "sparse" : "dense", v.plan.name);
    }
    const auto* dense = std::get_if<std::vector<float>>(&it->second);
    if (dense != nullptr && v.layouts.size() == 1 && dense->size() == v.layouts.front().size()) {
      // One piece, the whole tensor: the push reads the caller's values.
      out.push_back(ShardPushView{v.plan.shards.front(), id_, step_, samples, dense->data(), dense->size(), {}});
      continue;
    }
    if (dense != nullptr && pieces_are_ranges(v.layouts, dense->size())) {
      // Pieces along axis 0 lie one after another: each push reads its range of the
      // caller's values, as a whole tensor's does.
      const std::size_t row = v.layouts.front().row_width();
      for (std::size_t i = 0; i < v.layouts.size(); ++i) {
        const auto& l = v.layouts[i];
        out.push_back(ShardPushView{v.plan.shards[i], id_, step_, samples,
                                    dense->data() + static_cast<std::size_t>(l.offset) * row, l.size(), {}});
      }
      continue;
    }
    std::vector<Gradient> pieces;
    if (v.plan.sparse) {
      auto parts = split_sparse(std::get<SparseGradient>(it->second), v.plan.shape.front(),
                                v.layouts.front().row_width(), static_cast<std::int64_t>(v.layouts.size()));
      if (!parts) return make_error(parts.error().code, "variable {}: {}", v.plan.name, parts.error().message);
      pieces.assign(parts->begin(), parts->end());
    } else {
      auto parts = split_dense(*dense, v.plan.shape, v.layouts);
      if (!parts) return make_error(parts.error().code, "variable {}: {}", v.plan.name, parts.error().message);
      pieces.assign(parts->begin(), parts->end());
    }
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      out.push_back(ShardPushView{v.plan.shards[i], id_, step_, samples, nullptr, 0, std::move(pieces[i])});
    }
  }
  phase_ = ReplicaPhase::pushing;
  acked_.clear();
  return out;
}

Result<bool> Replica::on_push_ack(std::size_t shard, const PushAck& ack) {
  if (phase_ != ReplicaPhase::pushing) return wrong_phase("on_push_ack", "pushing");
  if (where_.count(shard) == 0 || acked_.count(shard) != 0 || ack.replica != id_ || ack.step != step_) {
    return make_error(errc::protocol,
                      "replica {}: expected one ack per shard for replica {} step {}, got shard {} replica {} step {}",
                      id_, id_, step_, shard, ack.replica, ack.step);
  }
  acked_.emplace(shard, true);
  if (acked_.size() < where_.size()) return false;
  phase_ = ReplicaPhase::idle;
  ++step_;
  return true;
}

Status Replica::start_at(std::int64_t step) {
  if (step < 0) return make_error(errc::invalid_argument, "replica {}: expected a first step >= 0, got {}", id_, step);
  if (phase_ != ReplicaPhase::idle || step_ != 0 || !pulled_.empty()) {
    return make_error(errc::protocol, "replica {}: its steps can start elsewhere only before the first pull", id_);
  }
  step_ = step;
  return ok_status();
}

}  // namespace apiary::core::ps
