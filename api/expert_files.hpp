#pragma once
/// What an ExpertServer makes of its options besides the role: the uids
/// (expert_uids_of, declared in api/expert_server.hpp), the built-in experts by class
/// name (core/moe's, and `nop_delay`, a nop that takes a while per batch), and
/// checkpoints of the experts' states in a folder (`<dir>/<uid>/checkpoint_last.bin`,
/// written whole then renamed into place, so a crash mid-write keeps the last one).
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "core/moe/expert_backend.hpp"
#include "messages/result.hpp"

namespace apiary {

/// A built-in expert: "nop_delay" (outputs its inputs after sleeping `delay` per batch,
/// forward and backward) or any class core::moe::make_expert knows. Errors:
/// errc::not_found naming the known classes.
[[nodiscard]] Result<std::unique_ptr<core::moe::ExpertBackend>> make_builtin_expert(
    const std::string& expert_cls, const core::moe::FfnConfig& config, std::chrono::milliseconds delay);

/// Where the checkpoint of expert `uid` lies under `dir`.
[[nodiscard]] std::string checkpoint_path(const std::string& dir, const std::string& uid);

/// Loads `uid`'s checkpoint under `dir` into `expert` when there is one (none: nothing
/// changes). Errors: errc::io naming the file that cannot be read, or the expert's
/// load_state error (a checkpoint of another expert class or size) with the file's name.
[[nodiscard]] Status load_checkpoint(const std::string& dir, const std::string& uid, core::moe::ExpertBackend& expert);

/// Writes each uid's state to its checkpoint under `dir` (folders made as needed).
/// Errors: errc::io naming the first file that could not be written (the others are
/// still written).
[[nodiscard]] Status save_checkpoints(const std::string& dir, const std::map<std::string, std::string>& states);

}  // namespace apiary
