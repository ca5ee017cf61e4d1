#pragma once
/// The rows of a batch (dimension 0 of every tensor): checking a request's tensors
/// against an expert's schema, joining tasks' rows into one batch, and splitting a
/// batch's output rows back per task.
#include <cstddef>
#include <string_view>
#include <vector>

#include "core/moe/expert_schema.hpp"
#include "messages/result.hpp"

namespace apiary::core::moe {

/// Checks `tensors` against `schema` (same count, dtype and extents after dimension 0,
/// at least one dimension, one batch size for all) and returns that batch size (rows).
/// `what` names the call in errors ("expert 'ffn.0' forward"). Errors:
/// errc::invalid_argument saying what was expected and what came.
[[nodiscard]] Result<std::size_t> check_batch(const std::vector<TensorSchema>& schema,
                                              const std::vector<Tensor>& tensors, std::string_view what);

/// The rows of a backward call of an expert of `schema`: `inputs` as forward's, one
/// gradient per output, as many gradient rows as input rows. `name` names the expert
/// class in errors. Errors: errc::invalid_argument saying what did not match.
[[nodiscard]] Result<std::size_t> check_backward(const ExpertSchema& schema, const std::vector<Tensor>& inputs,
                                                 const std::vector<Tensor>& grad_outputs, std::string_view name);

/// The tensors of several tasks joined along dimension 0: out[i] holds the rows of every
/// part's tensor i, in the order of `parts`. All parts must share dtypes and instance
/// shapes (check_batch). A single part is returned as it is (no copy).
[[nodiscard]] Result<std::vector<Tensor>> concat_rows(const std::vector<const std::vector<Tensor>*>& parts);

/// Rows [offset, offset + rows) of every tensor of `batch` (copies of the bytes).
[[nodiscard]] Result<std::vector<Tensor>> slice_rows(const std::vector<Tensor>& batch, std::size_t offset,
                                                     std::size_t rows);

}  // namespace apiary::core::moe
