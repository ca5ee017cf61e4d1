#pragma once
/// Load balancing for butterfly all-reduce: how many of a vector's elements each peer of a
/// group reduces, given the bandwidth each peer declared.
///
/// Time model: in a group of N peers, peer i sends the (1 - f_i) of the vector it does not
/// reduce and receives (N - 1) f_i from the others, so its traffic is V (1 + (N - 2) f_i)
/// elements and its time V (1 + (N - 2) f_i) / b_i. The round takes as long as its slowest
/// peer. The fractions minimise that maximum; this is the linear program
///
///     minimise xi  s.t.  w >= 0,  sum(w) >= 1,  w_i <= 1,
///                        (1 + (N - 2) w_i) / b_i <= xi   for every peer with b_i > 0,
///                        w_i = 0                          for every peer with b_i = 0,
///
/// solved here in closed form (no generic LP solver; see optimize_parts_lp).
#include <cstdint>
#include <optional>
#include <vector>

#include "messages/result.hpp"

namespace apiary::core::averaging {

/// Fractions are rounded to this many decimals before the integer split, so that peers
/// whose floating-point results differ in the last bits still agree on the split.
inline constexpr int k_load_balancing_decimals = 9;

/// An optimal point of the load-balancing program.
struct LpSolution {
  /// w_i: the fraction of the vector peer i reduces; sums to 1; 0 for zero bandwidth.
  std::vector<double> fractions;
  /// The optimal objective: the slowest peer's traffic per vector element divided by its
  /// bandwidth, i.e. the round time of a 1-element vector in the bandwidths' time unit
  /// (the round of a V-element vector takes V * xi).
  double xi = 0.0;
};

/// Solves the program above exactly for `bandwidths` (any consistent unit, e.g. MB/s;
/// each >= 0 and finite, at least one > 0).
///
/// Every peer with b_i > 0 takes part in the round even when it reduces nothing, so
/// xi >= 1 / b_i for each of them, and with the sum constraint
/// xi* = max(1 / min b_i, (N - 2 + K) / B) for N > 2 (K peers with b_i > 0, B the sum of
/// their bandwidths), xi* = 1 / min b_i for N = 2 and 0 for N = 1.
///
/// When the slowest peer sets xi* (and always for N = 2) many w reach it. This function
/// then gives each peer a share proportional to the most it could take without
/// exceeding xi*, u_i = min(1, (xi* b_i - 1) / (N - 2)) (u_i = 1 when N <= 2), scaled
/// to sum 1. Where the optimum is unique (xi* from the sum constraint) sum(u) = 1 and
/// this is that optimum. The reference solves the same program with an interior-point
/// method, whose answer on a degenerate optimum lies inside the optimal face; the
/// proportional choice is also inside it, treats peers of equal bandwidth equally, and
/// reproduces the reference's published splits (e.g. 2 elements over bandwidths
/// [.55, .2, .44] -> [1, 0, 1]). For N = 2 it is an equal split between the peers with
/// b_i > 0, as the reference gives.
[[nodiscard]] Result<LpSolution> optimize_parts_lp(const std::vector<double>& bandwidths);

/// Splits `vector_size` elements in proportion to `scores` (each >= 0, finite, sum > 0)
/// by the Hagenbach-Bischoff method: floor(V s_i / sum(s)) each, then one more element at
/// a time to the peer with the largest s_i / (alloc_i + 1) (first such peer on ties),
/// until the split sums to V.
[[nodiscard]] Result<std::vector<std::int64_t>> hagenbach_bischoff(
    std::int64_t vector_size, const std::vector<double>& scores);

/// How many of `vector_size` elements each peer reduces.
///
/// `bandwidths[i]`: peer i's declared bandwidth (any consistent unit), 0 for a peer that
/// must not reduce (client mode), nullopt when not declared. If some bandwidth is > 0,
/// undeclared ones become the mean of the positive ones and the program above is solved;
/// then, if the largest fraction is at least min_size / vector_size, every fraction
/// below that is set to 0 (its elements go to the others); fractions are rounded to
/// k_load_balancing_decimals. If no bandwidth is > 0, every undeclared peer gets an
/// equal share and zero-bandwidth peers none. The result sums to `vector_size`, has one
/// entry per peer and gives nothing to a zero-bandwidth peer.
///
/// Errors (invalid_argument): negative vector_size or min_size; a negative, NaN or
/// infinite bandwidth; no peers; every peer with bandwidth 0 (nobody could reduce).
/// vector_size 0 gives all zeros.
[[nodiscard]] Result<std::vector<std::int64_t>> load_balance_peers(
    std::int64_t vector_size, const std::vector<std::optional<double>>& bandwidths,
    std::int64_t min_size = 0);

}  // namespace apiary::core::averaging
