#pragma once
/// hivemind's `transformer` expert in C++: one post-norm transformer encoder layer over
/// x [batch, seq, h] float32 with a key padding mask [batch, seq] bool (true: a padding
/// position no query attends to), as torch's nn.TransformerEncoderLayer(h, heads,
/// dim_feedforward=4h, dropout=0, activation="gelu", batch_first=True) computes it:
///
///   a  = MultiHeadSelfAttention(x, mask)    heads = gcd(h, 16), softmax(q k^T / sqrt(d)) v
///   x1 = LayerNorm1(x + a)
///   y  = LayerNorm2(x1 + W2 gelu(W1 x1 + b1) + b2)
///
/// (the exact erf GELU, LayerNorm eps 1e-5). A sample whose positions are all padding
/// attends to nothing (its attention output is zero) where torch would give NaN.
/// backward computes every gradient by hand and steps the parameters by plain SGD.
/// Single-threaded loops in a fixed order: the same inputs give the same bits.
#include <cstdint>
#include <vector>

#include "core/moe/expert_backend.hpp"

namespace apiary::core::moe {

/// The parameters of a TransformerExpert, row-major as torch keeps them.
struct TransformerParams {
  std::vector<float> in_w;   ///< [3h, h]: the q, k and v projections stacked
  std::vector<float> in_b;   ///< [3h]
  std::vector<float> out_w;  ///< [h, h]
  std::vector<float> out_b;  ///< [h]
  std::vector<float> ln1_g;  ///< [h]
  std::vector<float> ln1_b;  ///< [h]
  std::vector<float> w1;     ///< [4h, h]
  std::vector<float> b1;     ///< [4h]
  std::vector<float> w2;     ///< [h, 4h]
  std::vector<float> b2;     ///< [h]
  std::vector<float> ln2_g;  ///< [h]
  std::vector<float> ln2_b;  ///< [h]

  /// Every tensor, in the order above (for the optimizer step and checkpoints).
  [[nodiscard]] std::vector<std::vector<float>*> all();
  [[nodiscard]] std::vector<const std::vector<float>*> all() const;
};

class TransformerExpert final : public ExpertBackend {
 public:
  /// hivemind's sample input has 128 positions.
  static constexpr std::uint32_t k_default_seq_len = 128;

  /// Parameters from config.seed: projections and linears uniform in torch's bounds
  /// (xavier for the stacked q/k/v projection, nn.Linear's for the others), their
  /// attention biases zero, LayerNorms ones and zeros. hidden_dim >= 1, seq_len >= 1.
  explicit TransformerExpert(const FfnConfig& config, std::uint32_t seq_len = k_default_seq_len);

  /// Inputs: x [batch, seq, h] float32 and the mask [batch, seq] bool; output [batch,
  /// seq, h] float32.
  [[nodiscard]] const ExpertSchema& info() const override { return schema_; }
  [[nodiscard]] Result<std::vector<Tensor>> forward(const std::vector<Tensor>& inputs) override;
  /// The gradient of x (the mask's is false everywhere), and one SGD step.
  [[nodiscard]] Result<std::vector<Tensor>> backward(const std::vector<Tensor>& inputs,
                                                     const std::vector<Tensor>& grad_outputs) override;
  [[nodiscard]] Result<std::string> state() const override;
  [[nodiscard]] Status load_state(std::string_view state) override;

  [[nodiscard]] const TransformerParams& params() const { return params_; }
  /// Replaces the parameters (sizes must match: errc::invalid_argument otherwise).
  [[nodiscard]] Status set_params(TransformerParams params);
  [[nodiscard]] std::uint32_t heads() const { return heads_; }

  /// What forward keeps of one sample for backward.
  struct Cache;

 private:
  /// Positions S, hidden h, feed-forward f = 4h, heads H of d values, 1 / sqrt(d).
  struct Dims {
    std::size_t S, h, f, H, d;
    float scale;
  };
  [[nodiscard]] Dims dims() const;
  /// One sample: x [seq, h], mask [seq] -> y [seq, h]; fills `cache` when given.
  void forward_sample(const float* x, const std::uint8_t* mask, float* y, Cache* cache) const;
  /// One sample's gradients: accumulates the parameters' into `grad`, writes gx.
  void backward_sample(const Cache& cache, const std::uint8_t* mask, const float* gy, TransformerParams& grad,
                       float* gx) const;

  std::uint32_t h_;
  std::uint32_t seq_;
  std::uint32_t heads_;
  float lr_;
  ExpertSchema schema_;
  TransformerParams params_;
};

}  // namespace apiary::core::moe
