#include "core/ps/checkpoint.hpp"

#include <limits>

#include "ps.pb.h"

namespace apiary::core::ps {
namespace {

/// Elements of a tensor of `shape` (1 for a scalar); -1 when a dimension is negative or
/// the product overflows.
std::int64_t elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const auto d : shape) {
    if (d < 0 || (d > 0 && n > std::numeric_limits<std::int64_t>::max() / d)) return -1;
    n *= d;
  }
  return n;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  return s + "]";
}

/// Whether a slot of `size` values fits a variable of `n` elements: whole, or absent.
bool slot_fits(std::size_t size, std::int64_t n) { return size == 0 || static_cast<std::int64_t>(size) == n; }

}  // namespace

const char* optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::momentum: return "momentum";
    case OptimizerKind::adam: return "adam";
    case OptimizerKind::sgd: break;
  }
  return "sgd";
}

Result<std::string> encode_checkpoint(std::int64_t step, const std::vector<VariablePlan>& variables,
                                      const std::map<std::string, std::vector<float>>& values, OptimizerKind kind,
                                      const std::map<std::string, Optimizer::State>& states) {
  pb::PsCheckpoint m;
  m.set_step(step);
  m.set_optimizer(optimizer_name(kind));
  for (const auto& v : variables) {
    auto it = values.find(v.name);
    auto state = states.find(v.name);
    const auto want = elements(v.shape);
    if (it == values.end() || static_cast<std::int64_t>(it->second.size()) != want) {
      return make_error(errc::invalid_argument, "checkpoint: expected {} values of {} for shape {}, got {}", want,
                        v.name, shape_text(v.shape), it == values.end() ? 0 : it->second.size());
    }
    if (state == states.end() || !slot_fits(state->second.m.size(), want) || !slot_fits(state->second.v.size(), want)) {
      return make_error(errc::invalid_argument, "checkpoint: expected the optimizer state of {} (slots of {} values)",
                        v.name, want);
    }
    auto* out = m.add_variables();
    out->set_name(v.name);
    out->mutable_shape()->Add(v.shape.begin(), v.shape.end());
    out->mutable_values()->Add(it->second.begin(), it->second.end());
    out->set_updates(state->second.updates);
    out->mutable_slot_m()->Add(state->second.m.begin(), state->second.m.end());
    out->mutable_slot_v()->Add(state->second.v.begin(), state->second.v.end());
  }
  return m.SerializeAsString();
}

Result<Checkpoint> decode_checkpoint(std::string_view bytes) {
  pb::PsCheckpoint m;
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()) ||
      !m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return make_error(errc::malformed, "checkpoint: expected a PsCheckpoint (proto/ps.proto), got {} bytes that are not one",
                      bytes.size());
  }
  if (m.step() < 0) return make_error(errc::malformed, "checkpoint: expected a step >= 0, got {}", m.step());
  if (m.optimizer() != "sgd" && m.optimizer() != "momentum" && m.optimizer() != "adam") {
    return make_error(errc::malformed, "checkpoint: expected optimizer sgd, momentum or adam, got '{}'", m.optimizer());
  }
  Checkpoint c;
  c.step = m.step();
  c.optimizer = m.optimizer();
  for (const auto& v : m.variables()) {
    std::vector<std::int64_t> shape(v.shape().begin(), v.shape().end());
    const auto n = elements(shape);
    if (n != v.values_size() || !slot_fits(static_cast<std::size_t>(v.slot_m_size()), n) ||
        !slot_fits(static_cast<std::size_t>(v.slot_v_size()), n) || v.updates() < 0) {
      return make_error(errc::malformed,
                        "checkpoint: variable '{}' of shape {} expected {} values (and slots of as many, or none), got "
                        "{} values, slots of {} and {}, {} updates",
                        v.name(), shape_text(shape), n, v.values_size(), v.slot_m_size(), v.slot_v_size(),
                        v.updates());
    }
    if (!c.values.emplace(v.name(), std::vector<float>(v.values().begin(), v.values().end())).second) {
      return make_error(errc::malformed, "checkpoint: variable '{}' appears twice", v.name());
    }
    c.shapes.emplace(v.name(), std::move(shape));
    c.states.emplace(v.name(), Optimizer::State{v.updates(), std::vector<float>(v.slot_m().begin(), v.slot_m().end()),
                                                std::vector<float>(v.slot_v().begin(), v.slot_v().end())});
  }
  return c;
}

Status check_checkpoint(const Checkpoint& checkpoint, const std::vector<VariablePlan>& variables) {
  for (const auto& v : variables) {
    auto it = checkpoint.shapes.find(v.name);
    if (it == checkpoint.shapes.end()) {
      return make_error(errc::invalid_argument, "checkpoint: expected variable '{}' of shape {}, got none", v.name,
                        shape_text(v.shape));
    }
    if (it->second != v.shape) {
      return make_error(errc::invalid_argument,
                        "checkpoint: expected variable '{}' of shape {}, got shape {}; was it saved from another model?",
                        v.name, shape_text(v.shape), shape_text(it->second));
    }
  }
  return ok_status();
}

}  // namespace apiary::core::ps
