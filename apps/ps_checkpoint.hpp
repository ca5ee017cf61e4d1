#pragma once
/// `apiary ps --save / --restore` (apps/README.md): the checkpoint files of every kind of
/// job (PS, all-reduce, mixed), around core/ps/checkpoint.hpp.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/ps/checkpoint.hpp"
#include "messages/result.hpp"

namespace apiary::apps {

/// The variables of the logistic-regression model of `features` features, whole.
std::vector<core::ps::VariablePlan> model_variables(std::size_t features);

/// The checkpoint at `path`, checked against `variables`. Errors: not_found when the
/// file cannot be opened, malformed or invalid_argument (core::ps::decode_checkpoint,
/// check_checkpoint) naming the file.
Result<std::shared_ptr<const core::ps::Checkpoint>> read_checkpoint(const std::string& path,
                                                                    const std::vector<core::ps::VariablePlan>& variables);

/// Writes the checkpoint of `params` after `step` steps to `path`, whole or not at all
/// (into a file beside it, then renamed over it), and prints "checkpoint PATH step N".
/// Errors: invalid_argument for parameters that do not fit `variables`, io when the file
/// cannot be written.
Status save_checkpoint(const std::string& path, std::int64_t step, const std::vector<core::ps::VariablePlan>& variables,
                       const std::map<std::string, std::vector<float>>& params);

}  // namespace apiary::apps
