#pragma once
/// Calls to many remote experts at once (hivemind's _RemoteCallMany, reference §6.3):
/// every sample of a batch names the experts it chose and gives its rows; the rows of
/// the samples that chose one expert are joined into one call of that expert, all the
/// calls are sent at once, and their outputs are split back per sample. The wait ends
/// when every call has answered, or `timeout_after_k_min` after every sample has k_min
/// experts answered (or can no longer get them), or at the overall timeout; experts that
/// did not answer by then are masked out. The batch fails only when fewer than k_min
/// (sample, expert) pairs answered in all, naming each expert that failed and why.
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "api/remote_expert.hpp"
#include "messages/result.hpp"

namespace apiary {

/// How many answers a call_many needs and how long it waits (hivemind's
/// RemoteMixtureOfExperts arguments of the same names).
struct MoeCallOptions {
  /// Forward: answers needed; also what every sample waits for before
  /// timeout_after_k_min starts.
  std::size_t k_min = 1;
  /// Backward: the same for call_many_backward.
  std::size_t backward_k_min = 1;
  /// Once every sample has its k_min answers: how much longer to wait for the rest
  /// (none: until every call ends or the overall timeout).
  std::optional<std::chrono::milliseconds> timeout_after_k_min;
  /// Forward / backward: the longest the whole batch waits (none: until every call
  /// ends, which each expert's own timeout bounds).
  std::optional<std::chrono::milliseconds> forward_timeout;
  std::optional<std::chrono::milliseconds> backward_timeout;
  /// Refuse inputs and grad_outputs with values that are not finite (invalid_argument),
  /// and count an expert whose answer has such values as failed (hivemind's
  /// detect_anomalies).
  bool detect_anomalies = false;
};

/// Per sample, the experts it chose (the caller owns them; they need only live through
/// the call: answers that come later are dropped).
using ExpertsPerSample = std::vector<std::vector<RemoteExpert*>>;
/// Per sample, per chosen expert, some tensors: [sample][expert][tensor].
using TensorsPerExpert = std::vector<std::vector<std::vector<ExpertTensor>>>;

/// What a call_many gives back.
struct MoeCallResult {
  /// [sample][j]: what sample's j-th expert gave for the sample's rows (forward: its
  /// outputs; backward: the gradients of the sample's inputs); empty where masked out.
  TensorsPerExpert outputs;
  /// [sample][j]: whether sample's j-th expert answered.
  std::vector<std::vector<bool>> mask;
  /// One line per expert that did not answer: its uid, server and why.
  std::vector<std::string> failures;
};

/// Forward of a batch: `inputs[i]` are sample i's forward inputs (each with the same
/// rows along dimension 0, at least one), sent to every expert of `experts[i]`. Experts
/// are told apart by uid and server: one call per expert per batch. Errors:
/// errc::invalid_argument for shapes that do not fit (sizes of `experts` and `inputs`,
/// rows, a tensor's extents after dimension 0 differing among samples sent to one
/// expert, a null expert, one expert twice in a sample); errc::unavailable when fewer
/// than k_min pairs answered, naming the failed experts and the reasons.
[[nodiscard]] Result<MoeCallResult> call_many_forward(const ExpertsPerSample& experts,
                                                      const std::vector<std::vector<ExpertTensor>>& inputs,
                                                      const MoeCallOptions& options = {});

/// Backward of a batch: for each pair that `mask` (the forward's) marks, the gradients
/// of sample i's `inputs[i]` given `grad_outputs[i][j]` (one per output of expert j);
/// each expert steps its optimizer once for the rows of all its samples. Pairs masked
/// out are not called (mask false in the result). Errors as call_many_forward's, with
/// backward_k_min and backward_timeout, and invalid_argument for a mask or grad_outputs
/// whose shape is not experts'.
[[nodiscard]] Result<MoeCallResult> call_many_backward(const ExpertsPerSample& experts,
                                                       const std::vector<std::vector<ExpertTensor>>& inputs,
                                                       const TensorsPerExpert& grad_outputs,
                                                       const std::vector<std::vector<bool>>& mask,
                                                       const MoeCallOptions& options = {});

}  // namespace apiary
