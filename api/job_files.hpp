#pragma once
/// The files a training job reads and writes: the strategy and resource spec it runs
/// (AutoDist's), and its checkpoints (`apiary ps --save / --restore`, apps/README.md):
/// every kind of job's (PS, all-reduce, mixed), around core/ps/checkpoint.hpp.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strategy.pb.h"
#include "core/ps/checkpoint.hpp"
#include "core/ps/plan.hpp"
#include "core/strategy/resource_spec.hpp"
#include "messages/result.hpp"

namespace apiary {

/// The contents of the `what` file at `path` (e.g. "strategy"). Errors: not_found
/// naming it when it cannot be opened.
[[nodiscard]] Result<std::string> read_file(const std::string& path, const char* what);

/// The strategy at `path` (protobuf text when `text`, else binary). Errors: not_found
/// when the file cannot be opened, the parser's naming the file.
[[nodiscard]] Result<pb::autodist::Strategy> load_strategy(const std::string& path, bool text);
/// The resource spec at `path`. Errors: not_found when the file cannot be opened, the
/// parser's naming the file.
[[nodiscard]] Result<core::strategy::ResourceSpec> load_resource_spec(const std::string& path);

/// Writes `strategy` to `path` (protobuf text when `text`, else binary), naming its file
/// in it first as AutoDist does (strategy.path: `path` made absolute where it can be).
/// Errors: core::strategy::serialize_strategy's; io when the file cannot be written.
[[nodiscard]] Status save_strategy(pb::autodist::Strategy& strategy, const std::string& path, bool text);

/// The checkpoint at `path`, checked against `variables`. Errors: not_found when the
/// file cannot be opened, malformed or invalid_argument (core::ps::decode_checkpoint,
/// check_checkpoint) naming the file.
[[nodiscard]] Result<std::shared_ptr<const core::ps::Checkpoint>> read_checkpoint(
    const std::string& path, const std::vector<core::ps::VariablePlan>& variables);

/// Writes the checkpoint of `params` and their optimizer `states` (of an optimizer of
/// `kind`) after `step` steps to `path`, whole or not at all (into a file beside it, then
/// renamed over it). Errors: invalid_argument for parameters or states that do not fit
/// `variables`, io when the file cannot be written.
[[nodiscard]] Status save_checkpoint(const std::string& path, std::int64_t step,
                                     const std::vector<core::ps::VariablePlan>& variables,
                                     const std::map<std::string, std::vector<float>>& params,
                                     core::ps::OptimizerKind kind,
                                     const std::map<std::string, core::ps::Optimizer::State>& states);

/// The --save path for `step`: `pattern` with "{step}" replaced by the step number.
[[nodiscard]] std::string checkpoint_path(const std::string& pattern, std::int64_t step);
/// The latest checkpoint --save `pattern` names that exists: `pattern` itself without
/// "{step}", else the file of its folder whose step is the largest (files being written,
/// beside it, do not match); nullopt when there is none. Errors: invalid_argument for
/// "{step}" in a folder's name, io when the folder cannot be read.
[[nodiscard]] Result<std::optional<std::string>> latest_checkpoint(const std::string& pattern);
/// Whether the chief writes a periodic checkpoint (--save-every `every`) at the start of
/// its step `step` of the job (`global`: steps behind it in all, the checkpoint's too).
inline bool periodic_checkpoint(std::int64_t every, std::int64_t step, std::int64_t global) {
  return every > 0 && step > 0 && global % every == 0;
}

/// Whether the optimizer state in `checkpoint` is for an optimizer of `kind` (else a
/// restored job starts its optimizer afresh).
[[nodiscard]] bool restores_optimizer(const core::ps::Checkpoint& checkpoint, core::ps::OptimizerKind kind);

}  // namespace apiary
