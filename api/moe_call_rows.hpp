#pragma once
/// How call_many (api/moe_call_many.hpp) shapes a batch: which expert serves which
/// (sample, expert) pairs, and the pairs' rows joined into one request per expert and
/// an answer split back per pair. Internal to call_many; no network.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "api/moe_call_many.hpp"
#include "messages/result.hpp"

namespace apiary::moe_rows {

/// A (sample, index among the sample's experts) pair.
using Pair = std::pair<std::size_t, std::size_t>;

/// One expert's call: the pairs it serves, in sample order.
struct Group {
  RemoteExpert* expert = nullptr;
  std::vector<Pair> members;
};

/// The calls to make: one per distinct expert (uid and server) of the pairs `mask` keeps
/// (all when null). Errors (invalid_argument): a null expert, one expert twice in a sample.
[[nodiscard]] Result<std::vector<Group>> group_calls(const ExpertsPerSample& experts,
                                                     const std::vector<std::vector<bool>>* mask);

/// The rows of `parts` (per member, its tensors) joined along dimension 0, per tensor.
/// Errors (invalid_argument): members with different tensor counts or extents after
/// dimension 0, naming expert `uid`.
[[nodiscard]] Result<std::vector<ExpertTensor>> join_rows(const std::vector<const std::vector<ExpertTensor>*>& parts,
                                                          const std::string& uid);

/// `outputs` split back into `rows` per member. Errors (protocol): an output without
/// the sum of those rows along dimension 0.
[[nodiscard]] Result<std::vector<std::vector<ExpertTensor>>> split_rows(const std::vector<ExpertTensor>& outputs,
                                                                        const std::vector<std::uint32_t>& rows);

/// Rows per sample of `inputs` (each sample's tensors share them, at least one), checked
/// against `experts`' shape. Errors (invalid_argument) name the sample.
[[nodiscard]] Result<std::vector<std::uint32_t>> sample_rows_of(const ExpertsPerSample& experts,
                                                                const std::vector<std::vector<ExpertTensor>>& inputs);

}  // namespace apiary::moe_rows
