#pragma once
/// AutoDist's gradient compressors (shared/reference/autodist.md section 3.6), with the
/// arithmetic the reference leaves out done for real:
///  - NoneCompressor: the tensor travels as it is.
///  - HorovodCompressor: float32 travels as float16 (half the bytes) and comes back as
///    float32; other dtypes pass through unchanged.
///  - HorovodCompressorEF: float16 with error feedback: what rounding lost at one step is
///    added to the next step's input of the same tensor (keyed by name), so the sum of
///    what was sent tracks the sum of the inputs instead of drifting.
/// The wire form of a compressed tensor is a Tensor of dtype float16 with the input's
/// shape; encode it with any codec of codec.hpp (NONE keeps the bytes as they are).
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "messages/result.hpp"
#include "messages/tensor/tensor.hpp"

namespace apiary::messages {

/// Something that turns a tensor into its wire form before an exchange and back after.
class Compressor {
 public:
  virtual ~Compressor() = default;
  /// The wire form of `tensor`, the gradient named `key` (keys matter only to stateful
  /// compressors). Errors: errc::unsupported for a dtype the compressor cannot take.
  virtual Result<Tensor> compress(const std::string& key, const Tensor& tensor) = 0;
  /// The tensor back from its wire form (after the exchange, e.g. an average of wire forms).
  virtual Result<Tensor> decompress(const Tensor& wire) = 0;
  /// Forgets any state kept for every key (a new training run, a changed model).
  virtual void reset() {}
};

/// The identity: compress and decompress return their argument (sharing its bytes).
class NoneCompressor final : public Compressor {
 public:
  /// `tensor` unchanged.
  Result<Tensor> compress(const std::string& key, const Tensor& tensor) override;
  /// `wire` unchanged.
  Result<Tensor> decompress(const Tensor& wire) override;
};

/// float32 -> float16 on the wire (round to nearest even, clamped to +-65504, NaN kept),
/// float16 -> float32 back (exact). A float16 wire tensor stays float16 on compress; every
/// other dtype passes through both ways unchanged, as AutoDist's compressor does.
class HorovodCompressor final : public Compressor {
 public:
  /// The float16 form of a float32 `tensor`; any other dtype unchanged.
  Result<Tensor> compress(const std::string& key, const Tensor& tensor) override;
  /// The float32 form of a float16 `wire`; any other dtype unchanged.
  Result<Tensor> decompress(const Tensor& wire) override;
};

/// HorovodCompressor with a persistent per-key error-feedback residual r (float32, the
/// tensor's shape, zero at first): compress(key, x) sends s = fp16(x + r) and sets
/// r = (x + r) - fp32(s). Only float32 input is accepted (errc::unsupported otherwise,
/// since the residual is float32), and a key's shape may not change without reset(key)
/// (errc::invalid_argument). Not thread-safe: one owner (e.g. one actor) per instance.
class HorovodCompressorEF final : public Compressor {
 public:
  /// fp16(tensor + residual[key]); updates residual[key] to what rounding lost.
  Result<Tensor> compress(const std::string& key, const Tensor& tensor) override;
  /// The float32 form of a float16 `wire` (the residual stays on the sender).
  Result<Tensor> decompress(const Tensor& wire) override;
  /// compress() then decompress() over `n` float32 values in place, a block at a time and
  /// no tensor made: x becomes fp16(x + residual[key]) as float32 (the same bits) and the
  /// residual what rounding lost. Error: invalid_argument when the residual of `key`
  /// holds another count (call reset(key) when the tensor changes size).
  Status round_in_place(const std::string& key, float* x, std::size_t n);
  /// Forgets every residual.
  void reset() override { residuals_.clear(); }
  /// Forgets the residual of `key` (no-op for an unknown key).
  void reset(const std::string& key) { residuals_.erase(key); }
  /// The residual of `key`, float32 values; empty if none is kept.
  [[nodiscard]] const std::vector<float>& residual(const std::string& key) const;
  /// Number of keys with a residual.
  [[nodiscard]] std::size_t size() const { return residuals_.size(); }

 private:
  struct Residual {
    Shape shape;
    std::vector<float> values;
  };
  std::unordered_map<std::string, Residual> residuals_;
};

/// `n` float32 values as float16 bits, as HorovodCompressor does it (clamp to +-65504,
/// round to nearest even, NaN kept).
void compress_f16(std::uint16_t* dst, const float* src, std::size_t n);

}  // namespace apiary::messages
