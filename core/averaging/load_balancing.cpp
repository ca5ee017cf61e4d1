#include "core/averaging/load_balancing.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace apiary::core::averaging {
namespace {

/// Checks one declared bandwidth: finite and >= 0.
Status check_bandwidth(std::size_t index, double b) {
  if (!std::isfinite(b) || b < 0.0) {
    return make_error(errc::invalid_argument,
                      "load balancing: bandwidth of peer {} must be a finite number >= 0, got {}; "
                      "declare 0 for a peer that must not reduce, or leave it unset",
                      index, b);
  }
  return ok_status();
}

/// x rounded to `decimals` decimals, halves to even (as numpy's round).
double round_decimals(double x, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::nearbyint(x * scale) / scale;
}

}  // namespace

Result<LpSolution> optimize_parts_lp(const std::vector<double>& bandwidths) {
  const std::size_t n = bandwidths.size();
  if (n == 0) {
    return make_error(errc::invalid_argument,
                      "load balancing: expected at least one peer, got an empty bandwidth list");
  }
  // The peers that can reduce: their count, total and smallest bandwidth.
  std::size_t num_positive = 0;
  double total = 0.0;
  double slowest = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < n; ++i) {
    if (auto st = check_bandwidth(i, bandwidths[i]); !st) return st.error();
    if (bandwidths[i] > 0.0) {
      ++num_positive;
      total += bandwidths[i];
      slowest = std::min(slowest, bandwidths[i]);
    }
  }
  if (num_positive == 0) {
    return make_error(errc::invalid_argument,
                      "load balancing: expected at least one peer with bandwidth > 0, got {} "
                      "peers all with bandwidth 0; at least one peer must be able to reduce",
                      n);
  }

  LpSolution solution;
  solution.fractions.assign(n, 0.0);
  if (n == 1) {
    // (1 - w) / b <= xi with w <= 1: the only peer reduces everything and xi* = 0.
    solution.fractions[0] = 1.0;
    solution.xi = 0.0;
    return solution;
  }

  // Lower bound from the peers that take part even with w_i = 0: xi >= 1 / b_i.
  const double floor_xi = 1.0 / slowest;
  // u_i: the largest share peer i can take while its time stays <= xi*.
  std::vector<double> headroom(n, 0.0);
  if (n == 2) {
    // The constraints on xi do not involve w: xi* = 1 / min b, any feasible w is optimal.
    solution.xi = floor_xi;
    for (std::size_t i = 0; i < n; ++i) headroom[i] = bandwidths[i] > 0.0 ? 1.0 : 0.0;
  } else {
    const double c = static_cast<double>(n - 2);
    // Sum constraint: sum_i (xi b_i - 1) / c = 1 over the K reducing peers.
    const double sum_xi = (c + static_cast<double>(num_positive)) / total;
    solution.xi = std::max(floor_xi, sum_xi);
    for (std::size_t i = 0; i < n; ++i) {
      if (bandwidths[i] <= 0.0) continue;
      headroom[i] = std::clamp((solution.xi * bandwidths[i] - 1.0) / c, 0.0, 1.0);
    }
  }

  // Scale the headroom to sum 1: optimal, since no peer exceeds its headroom.
  double headroom_sum = 0.0;
  for (double u : headroom) headroom_sum += u;
  if (!(headroom_sum > 0.0) || !std::isfinite(headroom_sum)) {
    return make_error(errc::internal,
                      "load balancing: the program over {} peers gave total headroom {}; "
                      "expected a positive finite number; report these bandwidths",
                      n, headroom_sum);
  }
  for (std::size_t i = 0; i < n; ++i) solution.fractions[i] = headroom[i] / headroom_sum;
  return solution;
}

Result<std::vector<std::int64_t>> hagenbach_bischoff(std::int64_t vector_size,
                                                     const std::vector<double>& scores) {
  if (vector_size < 0) {
    return make_error(errc::invalid_argument,
                      "hagenbach_bischoff: expected vector_size >= 0, got {}", vector_size);
  }
  double total = 0.0;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    if (!std::isfinite(scores[i]) || scores[i] < 0.0) {
      return make_error(errc::invalid_argument,
                        "hagenbach_bischoff: score {} must be finite and >= 0, got {}", i,
                        scores[i]);
    }
    total += scores[i];
  }
  if (!(total > 0.0)) {
    return make_error(errc::invalid_argument,
                      "hagenbach_bischoff: expected scores with a positive sum, got {} scores "
                      "summing to {}; give at least one peer a positive score",
                      scores.size(), total);
  }

  // Quotas rounded down.
  std::vector<std::int64_t> allocated(scores.size(), 0);
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    const double quota = static_cast<double>(vector_size) * scores[i] / total;
    allocated[i] = static_cast<std::int64_t>(std::floor(quota));
    sum += allocated[i];
  }
  // Remaining elements, one at a time, to the largest s_i / (alloc_i + 1).
  while (sum < vector_size) {
    std::size_t best = 0;
    double best_quotient = -1.0;
    for (std::size_t i = 0; i < scores.size(); ++i) {
      const double q = scores[i] / static_cast<double>(allocated[i] + 1);
      if (q > best_quotient) {
        best_quotient = q;
        best = i;
      }
    }
    ++allocated[best];
    ++sum;
  }
  // Rounding of the quotas can overshoot by an element on huge vectors; take it back
  // from the peer whose last element is the least deserved.
  while (sum > vector_size) {
    std::size_t worst = scores.size();
    double worst_quotient = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < scores.size(); ++i) {
      if (allocated[i] == 0) continue;
      const double q = scores[i] / static_cast<double>(allocated[i]);
      if (q < worst_quotient) {
        worst_quotient = q;
        worst = i;
      }
    }
    --allocated[worst];
    --sum;
  }
  return allocated;
}

Result<std::vector<std::int64_t>> load_balance_peers(
    std::int64_t vector_size, const std::vector<std::optional<double>>& bandwidths,
    std::int64_t min_size) {
  if (vector_size < 0) {
    return make_error(errc::invalid_argument,
                      "load balancing: expected vector_size >= 0 elements, got {}", vector_size);
  }
  if (min_size < 0) {
    return make_error(errc::invalid_argument,
                      "load balancing: expected min_size >= 0 elements, got {}", min_size);
  }
  if (bandwidths.empty()) {
    return make_error(errc::invalid_argument,
                      "load balancing: expected at least one peer, got an empty bandwidth list");
  }
  // Mean of the positive declared bandwidths, the stand-in for undeclared ones.
  double positive_sum = 0.0;
  std::size_t positive_count = 0;
  for (std::size_t i = 0; i < bandwidths.size(); ++i) {
    if (!bandwidths[i]) continue;
    if (auto st = check_bandwidth(i, *bandwidths[i]); !st) return st.error();
    if (*bandwidths[i] > 0.0) {
      positive_sum += *bandwidths[i];
      ++positive_count;
    }
  }

  std::vector<double> scores(bandwidths.size(), 0.0);
  if (positive_count > 0) {
    const double mean = positive_sum / static_cast<double>(positive_count);
    std::vector<double> resolved(bandwidths.size());
    for (std::size_t i = 0; i < bandwidths.size(); ++i) {
      resolved[i] = bandwidths[i] ? *bandwidths[i] : mean;
    }
    auto lp = optimize_parts_lp(resolved);
    if (!lp) return lp.error();
    scores = std::move(lp->fractions);
    if (vector_size == 0) return std::vector<std::int64_t>(bandwidths.size(), 0);
    // Peers that would reduce fewer than min_size elements hand their share to the rest.
    const double min_fraction =
        static_cast<double>(min_size) / static_cast<double>(vector_size);
    if (*std::max_element(scores.begin(), scores.end()) >= min_fraction) {
      for (double& s : scores) {
        if (s < min_fraction) s = 0.0;
      }
    }
    for (double& s : scores) s = round_decimals(s, k_load_balancing_decimals);
  } else {
    // No usable bandwidth: undeclared peers share equally, zero-bandwidth peers get none.
    bool any_undeclared = false;
    for (std::size_t i = 0; i < bandwidths.size(); ++i) {
      if (!bandwidths[i]) {
        scores[i] = 1.0;
        any_undeclared = true;
      }
    }
    if (!any_undeclared) {
      return make_error(errc::invalid_argument,
                        "load balancing: all {} peers declared bandwidth 0, so none can reduce; "
                        "expected at least one peer with bandwidth > 0 or undeclared",
                        bandwidths.size());
    }
  }
  return hagenbach_bischoff(vector_size, scores);
}

}  // namespace apiary::core::averaging
