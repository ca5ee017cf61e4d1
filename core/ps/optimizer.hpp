#pragma once
/// Optimizers a parameter-server shard applies to its float32 values: SGD, momentum and
/// Adam, on a dense gradient (one value per parameter) or on a sparse one (whole rows,
/// given by row index, never densified).
///
/// Sparse semantics: the gradient's rows are first merged (a row listed twice counts
/// as the sum of its values, as TensorFlow's IndexedSlices do); then only those rows
/// of the parameters and of the optimizer state change.
/// - SGD and momentum: identical to TensorFlow's sparse kernels (SparseApplyMomentum
///   also leaves untouched rows' accumulators alone).
/// - Adam: this is "lazy" Adam. TensorFlow's AdamOptimizer, on an IndexedSlices
///   gradient, decays m and v of *every* row and moves every row whose m is non-zero;
///   here m, v and the parameters of untouched rows stay as they are (the behaviour of
///   tf.contrib.opt.LazyAdamOptimizer). The bias correction uses the shard's count of
///   applied updates, as TensorFlow's beta-power accumulators do, so a row touched for
///   the first time at update t gets the correction of t, not of 1.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "messages/result.hpp"

namespace apiary::core::ps {

/// Which update rule.
enum class OptimizerKind { sgd, momentum, adam };

/// "sgd", "momentum", "adam".
const char* to_string(OptimizerKind kind);

/// Hyper-parameters (TensorFlow's defaults where it has them).
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::sgd;
  float learning_rate = 0.01F;  ///< step size (parameter units per gradient unit)
  float momentum = 0.9F;        ///< momentum: decay of the accumulator
  bool nesterov = false;        ///< momentum: Nesterov's look-ahead form
  float beta1 = 0.9F;           ///< Adam: decay of the first moment
  float beta2 = 0.999F;         ///< Adam: decay of the second moment
  float epsilon = 1e-7F;        ///< Adam: added to sqrt(v) (TF 2 Keras default)
};

/// Checks the hyper-parameters (positive rate, decays in [0, 1), epsilon >= 0).
/// Errors: invalid_argument.
[[nodiscard]] Status validate(const OptimizerConfig& config);

/// A sparse gradient: `rows.size()` rows of `row_width` values each, row-major in
/// `values` (values.size() == rows.size() * row_width). Rows index the parameters'
/// first axis; they may repeat and need not be sorted.
struct SparseGradient {
  std::vector<std::int64_t> rows;  ///< row indices into axis 0
  std::vector<float> values;       ///< rows.size() * row_width values
};

/// Merges repeated rows by summing them; rows come out sorted ascending. Errors:
/// invalid_argument when values.size() is not rows.size() * row_width or a row is
/// outside [0, num_rows).
[[nodiscard]] Result<SparseGradient> merge_rows(const SparseGradient& g, std::size_t row_width,
                                                std::int64_t num_rows);

/// One optimizer instance with its state (slots) for one shard of `size` parameters
/// laid out as rows of `row_width` values (row_width 1 for a vector or a scalar).
class Optimizer {
 public:
  /// `size` must be a multiple of `row_width` (row_width >= 1).
  Optimizer(OptimizerConfig config, std::size_t size, std::size_t row_width);

  /// params -= update(grad), over every parameter. Errors: invalid_argument on a size
  /// mismatch (nothing changes then).
  [[nodiscard]] Status apply_dense(std::vector<float>& params, const std::vector<float>& grad);

  /// apply_dense() of the gradient `scale * grad`, without forming it: each element is
  /// scaled (rounded to float, as `grad[i] * scale` would be) inside the update's one
  /// pass. Errors: as apply_dense().
  [[nodiscard]] Status apply_dense_scaled(std::vector<float>& params, const std::vector<float>& grad, float scale);

  /// A gradient handed over block by block: `block(at, n)` returns its values
  /// [at, at + n), valid until the next call.
  using GradientBlocks = std::function<const float*(std::size_t at, std::size_t n)>;
  /// apply_dense_scaled() of a gradient that is formed block by block (so it need never
  /// lie whole in memory): blocks of `block_size` values in order, each applied as soon
  /// as it is formed. The same bits as apply_dense_scaled() of the whole gradient.
  /// Errors: invalid_argument on a size mismatch of params (nothing changes then).
  [[nodiscard]] Status apply_dense_blocks(std::vector<float>& params, float scale, std::size_t block_size,
                                          const GradientBlocks& block);

  /// Applies `g` to its rows only (see the file comment). Errors: invalid_argument on a
  /// bad row or size (nothing changes then).
  [[nodiscard]] Status apply_sparse(std::vector<float>& params, const SparseGradient& g);

  /// The step size of the updates from now on (a learning-rate schedule's), leaving the
  /// slots as they are. Errors: invalid_argument unless finite and > 0 (nothing changes).
  [[nodiscard]] Status set_learning_rate(float learning_rate);

  /// Number of updates applied so far (Adam's t).
  [[nodiscard]] std::int64_t updates() const { return updates_; }

  /// What an optimizer carries from one update to the next (a checkpoint's part).
  struct State {
    std::int64_t updates = 0;  ///< updates applied
    std::vector<float> m;      ///< momentum accumulator or Adam's m; empty for SGD
    std::vector<float> v;      ///< Adam's v; empty otherwise
  };
  /// The current state.
  [[nodiscard]] State state() const { return State{updates_, m_, v_}; }
  /// Continues from `state`. Errors: invalid_argument when a slot is not of this kind's
  /// size (size() values for the slots it has, none for the others) or updates < 0
  /// (nothing changes then).
  [[nodiscard]] Status restore(State state);
  /// The first slot (momentum accumulator or Adam m); empty for SGD.
  [[nodiscard]] const std::vector<float>& slot_m() const { return m_; }
  /// Adam's second moment v; empty otherwise.
  [[nodiscard]] const std::vector<float>& slot_v() const { return v_; }
  /// The configuration.
  [[nodiscard]] const OptimizerConfig& config() const { return config_; }

 private:
  /// Updates parameters [begin, begin + n) from grad[0, n) * scale, with Adam's step
  /// size lr_t.
  void update_range(float* params, const float* grad, std::size_t begin, std::size_t n, float lr_t,
                    float scale = 1.0F);

  OptimizerConfig config_;
  std::size_t size_;
  std::size_t row_width_;
  std::int64_t updates_ = 0;
  std::vector<float> m_;
  std::vector<float> v_;
};

}  // namespace apiary::core::ps
