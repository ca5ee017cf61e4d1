#pragma once
/// Choosing a compression per tensor, as hivemind's adaptive compressions do: by size, by
/// the role of the tensor, or by its key. Each is a small value type whose choose() maps
/// a TensorInfo to a pb::CompressionType; decoding needs no choice (messages are
/// self-describing).
#include <cstddef>
#include <map>
#include <string>
#include <utility>

#include "runtime.pb.h"

namespace apiary::messages {

/// What a tensor is for in training.
enum class tensor_role { activation, parameter, gradient, optimizer, unspecified };

/// What the selectors look at.
struct TensorInfo {
  std::string key;                          ///< name of the tensor (PerTensor)
  std::size_t numel = 0;                    ///< elements of the WHOLE tensor, not of a part
  tensor_role role = tensor_role::unspecified;  ///< (RoleAdaptive)
};

/// `less` below `threshold` elements, `greater_equal` from there on.
struct SizeAdaptive {
  std::size_t threshold = 0;                    ///< in elements
  pb::CompressionType less = pb::NONE;           ///< for numel < threshold
  pb::CompressionType greater_equal = pb::NONE;  ///< for numel >= threshold

  /// The compression for `info`.
  [[nodiscard]] pb::CompressionType choose(const TensorInfo& info) const {
    return info.numel >= threshold ? greater_equal : less;
  }
};

/// One compression per role; `fallback` for tensor_role::unspecified.
struct RoleAdaptive {
  pb::CompressionType activation = pb::NONE;  ///< activations (MoE calls)
  pb::CompressionType parameter = pb::NONE;   ///< model parameters (state, averaging)
  pb::CompressionType gradient = pb::NONE;    ///< gradients
  pb::CompressionType optimizer = pb::NONE;   ///< optimizer statistics
  pb::CompressionType fallback = pb::NONE;    ///< unspecified role

  /// The compression for `info`.
  [[nodiscard]] pb::CompressionType choose(const TensorInfo& info) const {
    switch (info.role) {
      case tensor_role::activation: return activation;
      case tensor_role::parameter: return parameter;
      case tensor_role::gradient: return gradient;
      case tensor_role::optimizer: return optimizer;
      default: return fallback;
    }
  }
};

/// One compression per tensor key; `fallback` for keys not listed.
struct PerTensor {
  std::map<std::string, pb::CompressionType> by_key;  ///< key -> compression
  pb::CompressionType fallback = pb::NONE;            ///< keys not in by_key

  /// The compression for `info`.
  [[nodiscard]] pb::CompressionType choose(const TensorInfo& info) const {
    const auto it = by_key.find(info.key);
    return it == by_key.end() ? fallback : it->second;
  }
};

}  // namespace apiary::messages
