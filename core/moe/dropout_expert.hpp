#pragma once
/// hivemind's `det_dropout` expert in C++: Linear(h, h), then dropout by a mask the
/// caller sends (1 keeps a value, 0 drops it), kept values scaled by 1 / (1 - drop_prob).
/// The same inputs and mask give the same bits, so training through it is reproducible.
#include <vector>

#include "core/moe/expert_backend.hpp"

namespace apiary::core::moe {

class DetDropoutExpert final : public ExpertBackend {
 public:
  /// Parameters from `config` (seed, uniform in torch's nn.Linear bounds); backward steps
  /// them by plain SGD with config.learning_rate. `drop_prob` in [0, 1).
  DetDropoutExpert(const FfnConfig& config, float drop_prob = 0.1f);

  /// Inputs: x [batch, h] float32 and mask [batch, h] int64; output [batch, h] float32.
  [[nodiscard]] const ExpertSchema& info() const override { return schema_; }
  [[nodiscard]] Result<std::vector<Tensor>> forward(const std::vector<Tensor>& inputs) override;
  /// The gradient of x (the mask's is zeros), and one SGD step.
  [[nodiscard]] Result<std::vector<Tensor>> backward(const std::vector<Tensor>& inputs,
                                                     const std::vector<Tensor>& grad_outputs) override;
  [[nodiscard]] Result<std::string> state() const override;
  [[nodiscard]] Status load_state(std::string_view state) override;

 private:
  /// z = W x + b for `rows` rows.
  void linear(const float* x, std::size_t rows, float* z) const;

  std::uint32_t h_;
  float lr_;
  float keep_;
  ExpertSchema schema_;
  std::vector<float> w_;  ///< [h, h]
  std::vector<float> b_;  ///< [h]
};

}  // namespace apiary::core::moe
