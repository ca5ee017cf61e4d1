#pragma once
/// PowerSGD gradient averaging (reference §3.7, hivemind's PowerSGDGradientAverager; Vogels
/// et al., "PowerSGD: Practical Low-Rank Gradient Compression"): a gradient seen as an
/// m x n matrix M is averaged as two rank-r factors instead of m * n values. Per round, on
/// one group:
///   1. M = error feedback + local gradient; P = M Q (m x r), Q warm-started from the last
///      round (at first: the same seeded values on every peer);
///   2. phase P: P averaged by the group; orthogonalized (Gram-Schmidt over its columns);
///   3. Q = M^T P (n x r); phase Q: Q averaged, with the tensors that are not compressed;
///   4. the averaged gradient is P Q^T; the error feedback keeps M - P Q^T.
/// Tensors with one dimension, or whose factors would not save at least
/// `min_compression_ratio` of the elements, are averaged plainly in phase Q (the caller
/// decides: Matrix{0, 0}).
///
/// Here the arithmetic (pure, float32, row-major); the rounds are AveragerRole's.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "messages/result.hpp"

namespace apiary::core::averaging {

/// How one tensor is averaged: as a rows x cols matrix (rows * cols = its elements), or
/// plainly when rows == 0.
struct PowerSgdMatrix {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  [[nodiscard]] bool compressed() const { return rows > 0; }
};

/// PowerSGD's settings; every member of a swarm must use the same.
struct PowerSgdConfig {
  /// The factors' rank r (>= 1).
  std::size_t rank = 1;
  /// One per averaged tensor, in order.
  std::vector<PowerSgdMatrix> matrices;
  /// Seeds the first Q of every tensor (the same on every peer, so a swarm starts from
  /// one subspace).
  std::uint64_t seed = 0;
};

/// Checks `config` against the tensors' element counts. Errors (invalid_argument) name
/// the tensor and what is wrong.
[[nodiscard]] Status validate(const PowerSgdConfig& config, const std::vector<std::int64_t>& tensor_sizes);

/// hivemind's get_flatten_greedy_dims(max_ndim = 2): a shape folded to two dimensions by
/// repeatedly merging the adjacent pair with the smallest product (a 0-d or 1-d shape is
/// returned as it is).
[[nodiscard]] std::vector<std::int64_t> flatten_greedy_dims(std::vector<std::int64_t> shape);

/// The matrix a tensor of `shape` is averaged as with rank `rank`: compressed when it has
/// two dimensions or more and 1 - rank * (rows + cols) / (rows * cols) >=
/// min_compression_ratio (rows, cols from flatten_greedy_dims), else plain.
[[nodiscard]] PowerSgdMatrix powersgd_matrix(const std::vector<std::int64_t>& shape, std::size_t rank,
                                             double min_compression_ratio = 0.5);

/// The first Q (cols x rank) of tensor `index`: uniform in [0, 1) from (seed, index).
[[nodiscard]] std::vector<float> powersgd_initial_q(std::uint64_t seed, std::size_t index, std::int64_t cols,
                                                    std::size_t rank);

/// out (rows x rank) = m (rows x cols) * q (cols x rank).
void powersgd_project(const float* m, const float* q, std::int64_t rows, std::int64_t cols, std::size_t rank,
                      float* out);
/// out (cols x rank) = m^T (cols x rows) * p (rows x rank).
void powersgd_back_project(const float* m, const float* p, std::int64_t rows, std::int64_t cols, std::size_t rank,
                           float* out);
/// out (rows x cols) = p (rows x rank) * q^T (rank x cols).
void powersgd_reconstruct(const float* p, const float* q, std::int64_t rows, std::int64_t cols, std::size_t rank,
                          float* out);
/// Gram-Schmidt over the columns of p (rows x rank), in place, as hivemind's
/// orthogonalize_: each column divided by max(its norm, eps), then removed from the
/// columns after it.
void powersgd_orthogonalize(float* p, std::int64_t rows, std::size_t rank, float eps = 1e-8F);

/// One averager's PowerSGD state between rounds: the error feedback per compressed
/// tensor and the warm-started Q.
struct PowerSgdState {
  PowerSgdConfig config;
  std::vector<std::vector<float>> errors;  ///< per tensor (empty for plain ones): M - P Q^T
  std::vector<std::vector<float>> qs;      ///< per tensor (empty for plain ones): cols x rank

  /// Zero errors and the seeded first Qs.
  explicit PowerSgdState(PowerSgdConfig cfg);
};

}  // namespace apiary::core::averaging
