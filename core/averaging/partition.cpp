#include "core/averaging/partition.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace apiary::core::averaging {
namespace {

/// Largest element count accepted for one tensor or for all of them (2^62).
constexpr std::int64_t k_max_elements = std::int64_t{1} << 62;

/// Validates the peer fractions: at least one peer, each finite and >= 0, positive sum.
Status check_fractions(const std::vector<double>& fractions) {
  if (fractions.empty()) {
    return make_error(errc::invalid_argument,
                      "partition: expected at least one peer fraction, got none");
  }
  double sum = 0.0;
  for (std::size_t i = 0; i < fractions.size(); ++i) {
    if (!std::isfinite(fractions[i]) || fractions[i] < 0.0) {
      return make_error(errc::invalid_argument,
                        "partition: fraction of peer {} must be finite and >= 0, got {}", i,
                        fractions[i]);
    }
    sum += fractions[i];
  }
  if (!(sum > 0.0)) {
    return make_error(errc::invalid_argument,
                      "partition: peer fractions sum to {} over {} peers; expected a positive "
                      "sum (at least one peer must reduce)",
                      sum, fractions.size());
  }
  return ok_status();
}

/// The pivots: peer k owns [pivots[k-1], pivots[k]) of the concatenated vector.
std::vector<std::int64_t> compute_pivots(const std::vector<double>& fractions,
                                         std::int64_t total) {
  std::vector<double> cumsum(fractions.size());
  double running = 0.0;
  for (std::size_t k = 0; k < fractions.size(); ++k) cumsum[k] = running += fractions[k];

  // Element counts that add up to the total (load_balance_peers' output) are the
  // pivots' differences exactly; no floating-point division can move an element.
  bool counts = running == static_cast<double>(total);
  for (double f : fractions) counts = counts && f == std::floor(f);

  std::vector<std::int64_t> pivots(fractions.size());
  for (std::size_t k = 0; k < fractions.size(); ++k) {
    const double at = counts ? cumsum[k] : cumsum[k] / running * static_cast<double>(total);
    pivots[k] = std::clamp(static_cast<std::int64_t>(std::floor(at)), std::int64_t{0}, total);
  }
  pivots.back() = total;
  return pivots;
}

}  // namespace

Result<std::int64_t> part_size_values(const TensorLayout& tensor, std::int64_t part_size_bytes) {
  if (part_size_bytes <= 0) {
    return make_error(errc::invalid_argument,
                      "partition: expected part_size_bytes > 0, got {}; hivemind uses 524288",
                      part_size_bytes);
  }
  if (tensor.element_size == 0) {
    return make_error(errc::invalid_argument,
                      "partition: expected element_size >= 1 byte, got 0 (4 for float32)");
  }
  if (!std::isfinite(tensor.compression_ratio) || !(tensor.compression_ratio > 0.0)) {
    return make_error(errc::invalid_argument,
                      "partition: expected a compression ratio in (0, inf), got {}; use 1 for "
                      "no compression",
                      tensor.compression_ratio);
  }
  const double values = static_cast<double>(part_size_bytes) /
                        (static_cast<double>(tensor.element_size) * tensor.compression_ratio);
  if (!(values < static_cast<double>(k_max_elements))) return k_max_elements;
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(values)));
}

Result<Partition> partition_tensors(const std::vector<TensorLayout>& tensors,
                                    const std::vector<double>& peer_fractions,
                                    std::int64_t part_size_bytes) {
  if (auto st = check_fractions(peer_fractions); !st) return st.error();
  Partition out;
  std::vector<std::int64_t> part_values(tensors.size());
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    if (tensors[t].num_elements < 0 || tensors[t].num_elements > k_max_elements - out.total_size) {
      return make_error(errc::invalid_argument,
                        "partition: tensor {} has {} elements; expected >= 0 and at most 2^62 "
                        "elements in all tensors together",
                        t, tensors[t].num_elements);
    }
    out.total_size += tensors[t].num_elements;
    auto values = part_size_values(tensors[t], part_size_bytes);
    if (!values) return values.error();
    part_values[t] = *values;
  }

  const std::size_t num_peers = peer_fractions.size();
  out.pivots = compute_pivots(peer_fractions, out.total_size);
  out.num_parts_by_tensor.assign(tensors.size(), 0);
  out.num_parts_by_peer.assign(num_peers, 0);
  out.parts_by_peer.assign(num_peers, {});

  std::int64_t position = 0;  // start of the next part in the concatenated vector
  std::size_t peer = 0;       // the peer whose range holds `position` (or ends at it)
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const std::int64_t size = tensors[t].num_elements;
    for (std::int64_t offset = 0; offset < size; offset += part_values[t]) {
      const std::int64_t length = std::min(part_values[t], size - offset);
      const std::int64_t end = position + length;
      std::size_t owner = peer;
      if (end > out.pivots[peer]) {
        // The part straddles pivots: walk the peers it touches, keep the largest overlap.
        std::int64_t best_overlap = out.pivots[peer] - position;
        while (end > out.pivots[peer]) {
          ++peer;
          const std::int64_t overlap = std::min(end, out.pivots[peer]) - out.pivots[peer - 1];
          if (overlap > best_overlap) {
            best_overlap = overlap;
            owner = peer;
          }
        }
      }
      Part part;
      part.tensor_index = t;
      part.offset = offset;
      part.length = length;
      part.peer = owner;
      part.index_in_peer = out.num_parts_by_peer[owner]++;
      out.parts_by_peer[owner].push_back(out.parts.size());
      out.parts.push_back(part);
      ++out.num_parts_by_tensor[t];
      position = end;
    }
  }
  return out;
}

}  // namespace apiary::core::averaging
