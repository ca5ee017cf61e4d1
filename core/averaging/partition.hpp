#pragma once
/// The butterfly split: which contiguous piece ("part") of which tensor each peer of a
/// group reduces. Only the layout; no tensor data. Every peer computes it from the same
/// inputs (tensor shapes, codecs, part size, the group's peer fractions) and so agrees
/// on it without exchanging it.
///
/// Layout: the tensors are flattened and concatenated in order into one vector of
/// total_size elements. Each tensor is cut into parts of part_values elements (the last
/// part of a tensor shorter), where part_values is how many elements fit in
/// part_size_bytes once compressed. The vector is divided between peers at the pivots
/// floor(total_size * (f_0 + ... + f_k) / sum(f)) (the last pivot is total_size); peer k
/// owns [pivot_{k-1}, pivot_k). A part lying inside one peer's range goes to that peer;
/// a part straddling pivots goes to the peer whose range holds most of it (the first
/// such peer on ties).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "messages/result.hpp"

namespace apiary::core::averaging {

/// What the split needs to know about one tensor.
struct TensorLayout {
  /// Elements in the tensor (the product of its shape; 1 for a scalar, 0 if empty).
  std::int64_t num_elements = 0;
  /// Bytes per element before compression (4 for float32).
  std::size_t element_size = 4;
  /// Estimated compressed size / uncompressed size for the tensor's codec, in (0, inf):
  /// 1 for no compression, 0.5 for float16, about 0.25 for the 8-bit codecs.
  double compression_ratio = 1.0;
};

/// One contiguous piece of one tensor, reduced by one peer.
struct Part {
  /// Index of the tensor in the input list.
  std::size_t tensor_index = 0;
  /// First element of the part within the flattened tensor.
  std::int64_t offset = 0;
  /// Elements in the part (>= 1).
  std::int64_t length = 0;
  /// Index of the peer that reduces the part.
  std::size_t peer = 0;
  /// Position of the part in its peer's list (the part index of the reduce stream).
  std::size_t index_in_peer = 0;
};

/// The complete split of a group's tensors.
struct Partition {
  /// Every part, in flattened order (tensor by tensor, offset by offset).
  std::vector<Part> parts;
  /// Parts per tensor (0 for an empty tensor).
  std::vector<std::size_t> num_parts_by_tensor;
  /// Parts per peer; a peer with fraction 0 has none.
  std::vector<std::size_t> num_parts_by_peer;
  /// For each peer, the indices into `parts` of the parts it reduces, in order.
  std::vector<std::vector<std::size_t>> parts_by_peer;
  /// Pivot k: one past the last element of the concatenated vector owned by peer k.
  std::vector<std::int64_t> pivots;
  /// Elements in all tensors together.
  std::int64_t total_size = 0;
};

/// Elements per part for a tensor: floor(part_size_bytes / (element_size *
/// compression_ratio)), at least 1 (a part never splits an element).
[[nodiscard]] Result<std::int64_t> part_size_values(const TensorLayout& tensor,
                                                    std::int64_t part_size_bytes);

/// Splits `tensors` between peers with relative shares `peer_fractions` (each >= 0 and
/// finite, sum > 0; they need not sum to 1) into parts of at most `part_size_bytes`
/// compressed bytes (> 0; hivemind's default is 512 KiB).
///
/// An empty tensor has no parts (the reference emits one empty part per empty tensor,
/// which can land on a peer with fraction 0, a client that never reduces; here such a
/// tensor simply has nothing to average).
///
/// Errors (invalid_argument): no peers; a negative, NaN or infinite fraction; fractions
/// summing to 0; a negative element count; element_size 0; a compression ratio that is
/// not a positive finite number; part_size_bytes <= 0.
[[nodiscard]] Result<Partition> partition_tensors(const std::vector<TensorLayout>& tensors,
                                                  const std::vector<double>& peer_fractions,
                                                  std::int64_t part_size_bytes);

}  // namespace apiary::core::averaging
