#pragma once
/// `apiary ps --save / --restore` (apps/README.md): the checkpoint files of every kind of
/// job (PS, all-reduce, mixed), around core/ps/checkpoint.hpp.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/ps/checkpoint.hpp"
#include "core/ps/plan.hpp"
#include "messages/result.hpp"

namespace apiary::apps {

/// The variables of the logistic-regression model of `features` features, whole.
std::vector<core::ps::VariablePlan> model_variables(std::size_t features);

/// The checkpoint at `path`, checked against `variables`. Errors: not_found when the
/// file cannot be opened, malformed or invalid_argument (core::ps::decode_checkpoint,
/// check_checkpoint) naming the file.
Result<std::shared_ptr<const core::ps::Checkpoint>> read_checkpoint(const std::string& path,
                                                                    const std::vector<core::ps::VariablePlan>& variables);

/// Writes the checkpoint of `params` and their optimizer `states` (of an optimizer of
/// `kind`) after `step` steps to `path`, whole or not at all (into a file beside it, then
/// renamed over it), and prints "checkpoint PATH step N". Errors: invalid_argument for
/// parameters or states that do not fit `variables`, io when the file cannot be written.
Status save_checkpoint(const std::string& path, std::int64_t step, const std::vector<core::ps::VariablePlan>& variables,
                       const std::map<std::string, std::vector<float>>& params, core::ps::OptimizerKind kind,
                       const std::map<std::string, core::ps::Optimizer::State>& states);

/// The --save path for `step`: `pattern` with "{step}" replaced by the step number.
std::string checkpoint_path(const std::string& pattern, std::int64_t step);
/// Whether the chief writes a periodic checkpoint (--save-every `every`) at the start of
/// its step `step` of the job (`global`: steps behind it in all, the checkpoint's too).
inline bool periodic_checkpoint(std::int64_t every, std::int64_t step, std::int64_t global) {
  return every > 0 && step > 0 && global % every == 0;
}

/// Whether the optimizer state in `checkpoint` is for an optimizer of `kind` (else a
/// restored job starts its optimizer afresh).
bool restores_optimizer(const core::ps::Checkpoint& checkpoint, core::ps::OptimizerKind kind);
/// Prints, once, that the checkpoint's optimizer state is not restored when it is for
/// another kind of optimizer than `kind`.
void note_optimizer_change(const core::ps::Checkpoint& checkpoint, core::ps::OptimizerKind kind);

}  // namespace apiary::apps
