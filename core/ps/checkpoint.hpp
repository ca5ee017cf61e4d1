#pragma once
/// A PS job's checkpoint (proto/ps.proto, PsCheckpoint): every variable whole, as one
/// logical tensor even when a strategy partitions it, and the steps behind the values.
/// Written by the chief from the parameters it pulled; read back by any strategy for the
/// same model, whose PS processes cut the values into their own shards (initial_pieces).
/// Bytes in and out only: the shells read and write the files.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/ps/optimizer.hpp"
#include "core/ps/replica.hpp"
#include "messages/result.hpp"

namespace apiary::core::ps {

/// A decoded checkpoint.
struct Checkpoint {
  std::int64_t step = 0;                                  ///< training steps behind the values
  std::map<std::string, std::vector<float>> values;        ///< by variable name, row-major
  std::map<std::string, std::vector<std::int64_t>> shapes;  ///< by variable name
  std::string optimizer;                                   ///< kind behind `states` (optimizer_name)
  std::map<std::string, Optimizer::State> states;          ///< by variable name, slots whole
};

/// "sgd", "momentum" or "adam".
[[nodiscard]] const char* optimizer_name(OptimizerKind kind);

/// The bytes of a checkpoint of `values` (by name) after `step` steps, each variable
/// with its shape from `variables` and its optimizer state (slots whole) from `states`,
/// of an optimizer of `kind`. Errors: invalid_argument when a variable of `variables`
/// has no values or state, or values or slots of another size than its shape.
[[nodiscard]] Result<std::string> encode_checkpoint(std::int64_t step, const std::vector<VariablePlan>& variables,
                                                    const std::map<std::string, std::vector<float>>& values,
                                                    OptimizerKind kind,
                                                    const std::map<std::string, Optimizer::State>& states);

/// A checkpoint from its bytes. Errors: malformed when they are not a PsCheckpoint, or
/// one with a negative step, a repeated variable, values or slots that do not fill a
/// shape, or an unknown optimizer.
[[nodiscard]] Result<Checkpoint> decode_checkpoint(std::string_view bytes);

/// Whether `checkpoint` holds every variable of `variables` with its shape (it may hold
/// more: a mixed strategy's PS processes restore only their own). Errors:
/// invalid_argument naming the first variable missing or of another shape.
[[nodiscard]] Status check_checkpoint(const Checkpoint& checkpoint, const std::vector<VariablePlan>& variables);

}  // namespace apiary::core::ps
