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

}  // namespace

Result<std::string> encode_checkpoint(std::int64_t step, const std::vector<VariablePlan>& variables,
                                      const std::map<std::string, std::vector<float>>& values) {
  pb::PsCheckpoint m;
  m.set_step(step);
  for (const auto& v : variables) {
    auto it = values.find(v.name);
    const auto want = elements(v.shape);
    if (it == values.end() || static_cast<std::int64_t>(it->second.size()) != want) {
      return make_error(errc::invalid_argument, "checkpoint: expected {} values of {} for shape {}, got {}", want,
                        v.name, shape_text(v.shape), it == values.end() ? 0 : it->second.size());
    }
    auto* out = m.add_variables();
    out->set_name(v.name);
    out->mutable_shape()->Add(v.shape.begin(), v.shape.end());
    out->mutable_values()->Add(it->second.begin(), it->second.end());
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
  Checkpoint c;
  c.step = m.step();
  for (const auto& v : m.variables()) {
    std::vector<std::int64_t> shape(v.shape().begin(), v.shape().end());
    if (elements(shape) != v.values_size()) {
      return make_error(errc::malformed, "checkpoint: variable '{}' of shape {} expected {} values, got {}", v.name(),
                        shape_text(shape), elements(shape), v.values_size());
    }
    if (!c.values.emplace(v.name(), std::vector<float>(v.values().begin(), v.values().end())).second) {
      return make_error(errc::malformed, "checkpoint: variable '{}' appears twice", v.name());
    }
    c.shapes.emplace(v.name(), std::move(shape));
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
