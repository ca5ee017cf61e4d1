#include "api/moe_call_many.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "api/moe_call_rows.hpp"
#include "messages/tensor/tensor.hpp"

namespace apiary {
namespace {

using Clock = std::chrono::steady_clock;
using Outputs = std::vector<ExpertTensor>;
using moe_rows::Group;
using moe_rows::Pair;
using moe_rows::group_calls;
using moe_rows::join_rows;
using moe_rows::sample_rows_of;
using moe_rows::split_rows;

/// How much longer than its experts' own deadlines (rpc_info, then the call) a batch
/// with no overall timeout waits before it gives up on an answer that never came.
constexpr auto k_grace = std::chrono::seconds(2);

/// Whether every value of `tensors` is finite.
bool all_finite(const Outputs& tensors) {
  for (const ExpertTensor& t : tensors) {
    for (float v : t.values) {
      if (!std::isfinite(v)) return false;
    }
  }
  return true;
}

/// Refuses tensors that are not finite (detect_anomalies), naming the sample.
Status check_finite(const std::vector<Outputs>& per_sample, const char* what) {
  for (std::size_t i = 0; i < per_sample.size(); ++i) {
    if (!all_finite(per_sample[i])) {
      return make_error(errc::invalid_argument, "sample {}: its {} have values that are not finite", i, what);
    }
  }
  return ok_status();
}

/// Answers as they come, per group; shared with the callbacks, which may outlive the wait.
struct Board {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::optional<Result<Outputs>>> answers;
};

/// The groups' answers when the wait ended, and why calls still out were not waited for.
struct Collected {
  std::vector<std::optional<Result<Outputs>>> answers;
  std::string why;
};

/// Waits for the groups' answers as the options say.
Collected collect(Board& board, const std::vector<Group>& groups, std::size_t samples, std::size_t k_min,
                  Clock::time_point deadline, std::optional<std::chrono::milliseconds> after_k_min) {
  const auto start = Clock::now();
  const char* limit = "the timeout";
  bool cut_after = after_k_min.has_value();  // timeout_after_k_min still to apply
  const auto after = after_k_min.value_or(std::chrono::milliseconds(0));
  std::unique_lock<std::mutex> lock(board.mutex);
  for (;;) {
    // Tally answered and pending pairs, per sample and in all.
    std::vector<std::size_t> ok(samples), pending(samples);
    std::size_t ok_all = 0, pending_all = 0;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const auto& answer = board.answers[g];
      for (const Pair& p : groups[g].members) {
        if (!answer) ++pending[p.first], ++pending_all;
        if (answer && answer->ok()) ++ok[p.first], ++ok_all;
      }
    }
    // Done: every call ended, or k_min pairs can no longer answer.
    if (pending_all == 0) return {board.answers, {}};
    if (ok_all + pending_all < k_min) {
      return {board.answers, fmt::format("not waited for: fewer than k_min ({}) pairs could still answer", k_min)};
    }
    // Every sample has k_min answers (or cannot get them): the rest get timeout_after_k_min.
    bool settled = true;
    for (std::size_t i = 0; i < samples; ++i) settled = settled && (ok[i] >= k_min || ok[i] + pending[i] < k_min);
    if (settled && cut_after && Clock::now() + after < deadline) {
      deadline = Clock::now() + after;
      limit = "timeout_after_k_min";
      cut_after = false;
    }
    if (board.changed.wait_until(lock, deadline) == std::cv_status::timeout) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
      return {board.answers, fmt::format("no answer within {} ms ({})", waited.count(), limit)};
    }
  }
}

/// Every group's request: its members' tensors (`tensors_of`) joined along dimension 0.
template <class TensorsOf>
Result<std::vector<Outputs>> join_requests(const std::vector<Group>& groups, TensorsOf tensors_of) {
  std::vector<Outputs> requests;
  for (const Group& g : groups) {
    std::vector<const Outputs*> parts;
    for (const Pair& p : g.members) parts.push_back(&tensors_of(p));
    auto joined = join_rows(parts, g.expert->uid());
    if (!joined) return joined.error();
    requests.push_back(std::move(*joined));
  }
  return requests;
}

/// What group `g` gave, per member, or why not.
Result<std::vector<Outputs>> outcome_of(const char* what, const Group& g,
                                        const std::optional<Result<Outputs>>& answer,
                                        const std::vector<std::uint32_t>& sample_rows, const std::string& why) {
  if (!answer) {
    return make_error(errc::deadline_exceeded, "expert '{}' at {}: {}: {}", g.expert->uid(),
                      g.expert->server().multiaddr(), what, why);
  }
  if (!answer->ok()) return answer->error();
  std::vector<std::uint32_t> rows;
  for (const Pair& p : g.members) rows.push_back(sample_rows[p.first]);
  auto split = split_rows(**answer, rows);
  if (!split) {
    return make_error(split.error().code, "expert '{}' at {}: {}: {}", g.expert->uid(),
                      g.expert->server().multiaddr(), what, split.error().message);
  }
  return split;
}

/// The answers in `experts`' shape: outputs and mask per pair, failures per group.
/// Errors: fewer than k_min pairs answered.
Result<MoeCallResult> assemble(const char* what, const ExpertsPerSample& experts, const std::vector<Group>& groups,
                               const Collected& collected, const std::vector<std::uint32_t>& sample_rows,
                               std::size_t k_min) {
  MoeCallResult result;
  result.outputs.resize(experts.size());
  result.mask.resize(experts.size());
  for (std::size_t i = 0; i < experts.size(); ++i) {
    result.outputs[i].resize(experts[i].size());
    result.mask[i].assign(experts[i].size(), false);
  }
  std::size_t answered = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    auto split = outcome_of(what, groups[g], collected.answers[g], sample_rows, collected.why);
    if (!split) {
      result.failures.push_back(split.error().what());
      continue;
    }
    for (std::size_t m = 0; m < groups[g].members.size(); ++m) {
      const auto [i, j] = groups[g].members[m];
      result.outputs[i][j] = std::move((*split)[m]);
      result.mask[i][j] = true;
      ++answered;
    }
  }
  if (answered < k_min) {
    return make_error(errc::unavailable, "call_many {}: {} (sample, expert) pairs answered, k_min is {}; failed: {}",
                      what, answered, k_min, fmt::join(result.failures, "; "));
  }
  return result;
}

/// Sends every group's request at once (`send` starts one expert's call) and collects
/// the answers as `k_min`, `timeout` and the options' timeout_after_k_min and
/// detect_anomalies say.
template <class Send>
Result<MoeCallResult> run_calls(const char* what, const ExpertsPerSample& experts, const std::vector<Group>& groups,
                                std::vector<Outputs> requests, const std::vector<std::uint32_t>& sample_rows,
                                Send send, std::size_t k_min, std::optional<std::chrono::milliseconds> timeout,
                                const MoeCallOptions& options) {
  auto board = std::make_shared<Board>();
  board->answers.resize(groups.size());
  auto limit = std::chrono::milliseconds(0);
  const auto start = Clock::now();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    limit = std::max(limit, 2 * groups[g].expert->timeout());  // rpc_info, then the call
    const bool anomalies = options.detect_anomalies;
    const RemoteExpert& e = *groups[g].expert;
    std::string who = fmt::format("expert '{}' at {}: {}", e.uid(), e.server().multiaddr(), what);
    send(*groups[g].expert, std::move(requests[g]), [board, g, anomalies, who](Result<Outputs> answer) {
      if (anomalies && answer.ok() && !all_finite(*answer)) {
        answer = make_error(errc::malformed, "{}: values that are not finite in the answer (detect_anomalies)", who);
      }
      std::lock_guard<std::mutex> lock(board->mutex);
      board->answers[g] = std::move(answer);
      board->changed.notify_all();
    });
  }
  const auto deadline = start + (timeout ? *timeout : limit + k_grace);
  auto collected = collect(*board, groups, experts.size(), k_min, deadline, options.timeout_after_k_min);
  return assemble(what, experts, groups, collected, sample_rows, k_min);
}

/// Whether `mask` and `grad_outputs` have `experts`' shape, and each gradient the rows of
/// its sample. Errors: invalid_argument naming the first sample that does not fit.
Status check_backward_shape(const ExpertsPerSample& experts, const std::vector<std::uint32_t>& rows,
                            const TensorsPerExpert& grad_outputs, const std::vector<std::vector<bool>>& mask) {
  if (mask.size() != experts.size() || grad_outputs.size() != experts.size()) {
    return make_error(errc::invalid_argument, "{} samples of experts, {} of mask, {} of grad_outputs; expected one each",
                      experts.size(), mask.size(), grad_outputs.size());
  }
  for (std::size_t i = 0; i < experts.size(); ++i) {
    if (mask[i].size() != experts[i].size() || grad_outputs[i].size() != experts[i].size()) {
      return make_error(errc::invalid_argument,
                        "sample {}: the mask and grad_outputs need one entry per expert ({}) of the sample", i,
                        experts[i].size());
    }
    for (std::size_t j = 0; j < experts[i].size(); ++j) {
      for (const ExpertTensor& g : grad_outputs[i][j]) {
        if (mask[i][j] && (g.shape.empty() || g.shape[0] != rows[i])) {
          return make_error(errc::invalid_argument, "sample {} expert {}: a grad_output of shape [{}]; expected {} rows",
                            i, j, messages::format_shape(g.shape), rows[i]);
        }
      }
    }
  }
  return ok_status();
}

}  // namespace

Result<MoeCallResult> call_many_forward(const ExpertsPerSample& experts,
                                        const std::vector<std::vector<ExpertTensor>>& inputs,
                                        const MoeCallOptions& options) {
  auto rows = sample_rows_of(experts, inputs);
  if (!rows) return rows.error();
  if (options.detect_anomalies) {
    if (Status finite = check_finite(inputs, "inputs"); !finite) return finite.error();
  }
  auto groups = group_calls(experts, nullptr);
  if (!groups) return groups.error();
  auto requests = join_requests(*groups, [&](const Pair& p) -> const Outputs& { return inputs[p.first]; });
  if (!requests) return requests.error();
  auto send = [](RemoteExpert& e, Outputs request, ExpertDone done) {
    e.forward_async(std::move(request), std::move(done));
  };
  return run_calls("forward", experts, *groups, std::move(*requests), *rows, send, options.k_min,
                   options.forward_timeout, options);
}

Result<MoeCallResult> call_many_backward(const ExpertsPerSample& experts,
                                         const std::vector<std::vector<ExpertTensor>>& inputs,
                                         const TensorsPerExpert& grad_outputs,
                                         const std::vector<std::vector<bool>>& mask, const MoeCallOptions& options) {
  auto rows = sample_rows_of(experts, inputs);
  if (!rows) return rows.error();
  if (Status shaped = check_backward_shape(experts, *rows, grad_outputs, mask); !shaped) return shaped.error();
  if (options.detect_anomalies) {
    if (Status finite = check_finite(inputs, "inputs"); !finite) return finite.error();
    for (std::size_t i = 0; i < grad_outputs.size(); ++i) {
      for (std::size_t j = 0; j < grad_outputs[i].size(); ++j) {
        if (mask[i][j] && !all_finite(grad_outputs[i][j])) {
          return make_error(errc::invalid_argument, "sample {} expert {}: grad_outputs have values that are not finite",
                            i, j);
        }
      }
    }
  }
  auto groups = group_calls(experts, &mask);
  if (!groups) return groups.error();
  // A member's tensors: the sample's inputs, then its grad_outputs for that expert.
  std::map<Pair, Outputs> joined;
  for (const Group& g : *groups) {
    for (const Pair& p : g.members) {
      Outputs& t = joined[p];
      t = inputs[p.first];
      const Outputs& grads = grad_outputs[p.first][p.second];
      t.insert(t.end(), grads.begin(), grads.end());
    }
  }
  auto requests = join_requests(*groups, [&](const Pair& p) -> const Outputs& { return joined.at(p); });
  if (!requests) return requests.error();
  auto send = [](RemoteExpert& e, Outputs request, ExpertDone done) {
    e.backward_async(std::move(request), {}, std::move(done));
  };
  return run_calls("backward", experts, *groups, std::move(*requests), *rows, send, options.backward_k_min,
                   options.backward_timeout, options);
}

}  // namespace apiary
