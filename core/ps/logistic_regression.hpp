#pragma once
/// A small deterministic training workload for the parameter-server path: binary
/// logistic regression on synthetic data. Used by `apiary ps` (the demo) and by the
/// tests that compare distributed training with single-process SGD.
///
/// Data: `samples` points x in [-1, 1)^features drawn from a SplitMix64 stream of
/// `seed`; label y = 1 when w*.x + b* + 0.1 n > 0 (w*, b*, n from the same stream).
/// With a density below 1 each point has k = logistic_nonzeros(features, density)
/// values other than zero, at k distinct columns drawn uniformly (a wide model's hashed
/// features: w is then an embedding of which a batch touches a few rows), held as
/// compressed rows; its loss and gradient read only those (the gradient still comes as a
/// dense w, zero outside the batch's columns, whose touched rows a sparse variable sends).
/// Model: p = sigmoid(w.x + b); loss = mean binary cross-entropy.
/// Batches: replica r of R at step s takes the B samples starting at (s R + r) B
/// (wrapping around), so the R batches of a step are one batch of R B samples cut in
/// R consecutive parts: synchronous PS training over R replicas equals one process
/// taking the whole batch.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/strategy/graph_item.hpp"
#include "messages/result.hpp"

namespace apiary::core::ps {

/// Variable names of the model.
inline constexpr const char* k_logreg_weights = "logreg/w:0";
inline constexpr const char* k_logreg_bias = "logreg/b:0";

/// Synthetic data set: dense and row-major, or (density below 1) compressed rows.
struct LogisticData {
  std::size_t features = 0;  ///< values per sample
  std::vector<float> x;      ///< dense: samples * features inputs; empty when sparse
  std::vector<float> y;      ///< samples labels, 0 or 1
  /// Sparse: sample i's values other than zero are values[row_start[i] .. row_start[i + 1])
  /// at columns[...] (ascending); row_start has samples + 1 entries.
  std::vector<std::size_t> row_start;
  std::vector<std::uint32_t> columns;
  std::vector<float> values;
  /// Number of samples.
  [[nodiscard]] std::size_t samples() const { return y.size(); }
  /// Whether it is held as compressed rows.
  [[nodiscard]] bool sparse() const { return !row_start.empty(); }
};

/// Values other than zero per sample at `density` (0 < density <= 1): round(density x
/// features), at least 1.
[[nodiscard]] std::size_t logistic_nonzeros(std::size_t features, double density);

/// The data set of `samples` points of `features` values from `seed`, `density` of them
/// other than zero (1: dense, the same data as ever; below 1: compressed rows).
[[nodiscard]] LogisticData make_logistic_data(std::size_t samples, std::size_t features, std::uint64_t seed,
                                              double density = 1.0);

/// Most values a data set may hold (samples x features; 4 GiB): every replica holds it
/// whole. A sparse one's nonzero counts twice (its value and its column).
inline constexpr std::size_t k_max_logistic_data_values = std::size_t{1} << 30;
/// Whether `samples` x `features` at `density` fits k_max_logistic_data_values, or an
/// invalid_argument naming them; a density outside (0, 1] or a sparse data set of more
/// than 2^32 - 1 features is one too.
[[nodiscard]] Status check_logistic_data_size(std::size_t samples, std::size_t features, double density = 1.0);

/// The model's variables (w of shape [features], b of shape [1], dense gradients) as a
/// graph item, for `apiary strategy build` and for checking a strategy.
[[nodiscard]] strategy::GraphItem logistic_graph_item(std::size_t features);

/// Initial parameters: all zeros, by variable name.
[[nodiscard]] std::map<std::string, std::vector<float>> logistic_initial(std::size_t features);

/// Indices of replica `replica`'s batch of `batch` samples at step `step` with
/// `replicas` replicas (see the file comment).
[[nodiscard]] std::vector<std::size_t> logistic_batch(const LogisticData& data, std::size_t replicas,
                                                      std::size_t replica, std::int64_t step, std::size_t batch);

/// Mean loss over `indices` at `params` (by variable name); when `gradients` is not
/// null it receives the mean gradient of each variable. Computed in double.
double logistic_loss(const LogisticData& data, const std::vector<std::size_t>& indices,
                     const std::map<std::string, std::vector<float>>& params,
                     std::map<std::string, std::vector<float>>* gradients);

/// Mean loss over the whole data set.
double logistic_full_loss(const LogisticData& data, const std::map<std::string, std::vector<float>>& params);

}  // namespace apiary::core::ps
