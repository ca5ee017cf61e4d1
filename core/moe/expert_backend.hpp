#pragma once
/// The compute of an expert server (hivemind's ModuleBackend, reference §6.1), behind one
/// interface so that the server does not care what runs a batch: torch modules from
/// Python, or the C++ reference experts here (`FfnExpert`, hivemind's `ffn`, and
/// `NopExpert`, its `nop`). A backend takes whole batches (dimension 0 of every tensor
/// is the batch) and keeps its own parameters and optimizer.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/moe/batch_rows.hpp"
#include "core/moe/expert_schema.hpp"
#include "messages/result.hpp"

namespace apiary::core::moe {

/// An expert's compute. Called by one thread at a time.
class ExpertBackend {
 public:
  virtual ~ExpertBackend() = default;
  /// What forward takes and gives (sent by rpc_info).
  [[nodiscard]] virtual const ExpertSchema& info() const = 0;
  /// The outputs of one batch: `inputs` follow info().forward_inputs(); one tensor per
  /// output, each with the batch's rows. Errors reach every task of the batch.
  [[nodiscard]] virtual Result<std::vector<Tensor>> forward(const std::vector<Tensor>& inputs) = 0;
  /// The gradients of `inputs` (as forward's) given `grad_outputs` (one per output), and
  /// one optimizer step on the parameters' gradients. Re-runs forward on `inputs` (the
  /// server keeps no activations between calls), as hivemind's ModuleBackend does.
  [[nodiscard]] virtual Result<std::vector<Tensor>> backward(const std::vector<Tensor>& inputs,
                                                             const std::vector<Tensor>& grad_outputs) = 0;
  /// The expert's state (its parameters) for a checkpoint; errc::unsupported for an
  /// expert that has none to save.
  [[nodiscard]] virtual Result<std::string> state() const {
    return make_error(errc::unsupported, "this expert has no state to save");
  }
  /// Restores a state() (all or nothing). Errors: errc::malformed for a state that is not
  /// this expert's; errc::unsupported as state().
  [[nodiscard]] virtual Status load_state(std::string_view /*state*/) {
    return make_error(errc::unsupported, "this expert has no state to load");
  }
};

/// How an FfnExpert is made.
struct FfnConfig {
  std::uint32_t hidden_dim = 1024;  ///< h: inputs and outputs are [batch, h] float32
  float learning_rate = 0.01f;      ///< the SGD step of backward (per unit of gradient)
  std::uint64_t seed = 0;           ///< the parameters' initial values come from it alone
  /// How inputs (and their gradients) and outputs travel (the schema's compression).
  pb::CompressionType input_compression = pb::NONE;
  pb::CompressionType output_compression = pb::NONE;
};

/// The parameters of an FfnExpert, row-major as torch's nn.Linear keeps them.
struct FfnParams {
  std::vector<float> w1;  ///< [4h, h]
  std::vector<float> b1;  ///< [4h]
  std::vector<float> w2;  ///< [h, 4h]
  std::vector<float> b2;  ///< [h]
};

/// The reference feed-forward expert: y = W2 relu(W1 x + b1) + b2 (Linear(h, 4h), ReLU,
/// Linear(4h, h)) in float32, plain SGD in backward. Parameters start uniform in
/// [-1/sqrt(fan_in), 1/sqrt(fan_in)) (torch's nn.Linear bounds) drawn from core::Rng
/// seeded with FfnConfig::seed, so equal configs give equal experts. Single-threaded
/// loops in row order: the same inputs give the same bits.
class FfnExpert final : public ExpertBackend {
 public:
  explicit FfnExpert(const FfnConfig& config);

  [[nodiscard]] const ExpertSchema& info() const override { return schema_; }
  [[nodiscard]] Result<std::vector<Tensor>> forward(const std::vector<Tensor>& inputs) override;
  [[nodiscard]] Result<std::vector<Tensor>> backward(const std::vector<Tensor>& inputs,
                                                     const std::vector<Tensor>& grad_outputs) override;

  [[nodiscard]] Result<std::string> state() const override;
  [[nodiscard]] Status load_state(std::string_view state) override;

  /// The current parameters.
  [[nodiscard]] const FfnParams& params() const { return params_; }
  /// Replaces the parameters (sizes must match: errc::invalid_argument otherwise).
  [[nodiscard]] Status set_params(FfnParams params);
  [[nodiscard]] std::uint32_t hidden_dim() const { return h_; }

 private:
  /// Runs the two layers on `rows` rows at `x`: z1 = W1 x + b1 (pre-activation, kept
  /// for backward) and y.
  void run(const float* x, std::size_t rows, std::vector<float>& z1, float* y) const;

  std::uint32_t h_;
  float lr_;
  ExpertSchema schema_;
  FfnParams params_;
};

/// hivemind's `nop`: outputs = inputs ([batch, h] float32), gradients pass through, no
/// parameters.
class NopExpert final : public ExpertBackend {
 public:
  explicit NopExpert(std::uint32_t hidden_dim, pb::CompressionType compression = pb::NONE);

  [[nodiscard]] const ExpertSchema& info() const override { return schema_; }
  [[nodiscard]] Result<std::vector<Tensor>> forward(const std::vector<Tensor>& inputs) override;
  [[nodiscard]] Result<std::vector<Tensor>> backward(const std::vector<Tensor>& inputs,
                                                     const std::vector<Tensor>& grad_outputs) override;

 private:
  ExpertSchema schema_;
};

/// A built-in expert by hivemind's class name: "ffn" (FfnExpert of `config`),
/// "transformer" (transformer_expert.hpp, 128 positions), "nop" or "det_dropout"
/// (dropout_expert.hpp).
/// Errors: errc::not_found naming the known classes.
[[nodiscard]] Result<std::unique_ptr<ExpertBackend>> make_expert(const std::string& expert_cls,
                                                                 const FfnConfig& config);

}  // namespace apiary::core::moe
