#pragma once
/// Groups of AllReduceRunners for the tests: random inputs, configs agreeing on the split
/// (load_balance_peers with bandwidth 0 for clients), and reference weighted means.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/averaging/allreduce.hpp"
#include "core/averaging/load_balancing.hpp"
#include "tests/core/averaging/allreduce_harness.hpp"

namespace apiary::core::averaging::testing {

/// Tensors of one peer, float32 flattened.
using Tensors = std::vector<std::vector<float>>;

/// One group to average.
struct GroupSpec {
  std::vector<AveragingMode> modes;
  std::vector<double> weights;  ///< empty: all 1
  std::vector<std::int64_t> sizes{123, 1000, 3, 1, 0, 517};
  std::int64_t part_size_bytes = 256;
  std::vector<pb::CompressionType> codecs{pb::NONE};
  std::uint64_t seed = 1;
  Duration sender_timeout = 50ms;
  Duration reducer_timeout = 100ms;
  bool deferred = false;  ///< reductions as jobs (AllReduceConfig::deferred_reductions)
  bool in_place = false;  ///< averages instead of deltas (AllReduceConfig::averages_in_place)
  bool splice = false;    ///< parts as views of the tensors (AllReduceConfig::splice_parts)
  /// Per peer: answers with averages (AllReduceConfig::answer_averages); empty: none.
  std::vector<bool> answer_averages;
  bool land = false;  ///< answers land where the runner posted (Net::land_answers)
  bool identical = false;  ///< AllReduceConfig::identical_results on every peer
};

/// Values in [-1, 1) from splitmix64.
inline float next_value(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 11) / 4503599627370496.0 - 1.0);
}

/// A group's inputs and runners.
struct Group {
  GroupSpec spec;
  std::vector<Tensors> inputs;  ///< per peer
  std::vector<AllReduceRunner> runners;
};

inline Group make_group(const GroupSpec& spec) {
  Group g{spec, {}, {}};
  const std::size_t n = spec.modes.size();
  std::uint64_t state = spec.seed;
  std::vector<std::optional<double>> bandwidths;
  for (AveragingMode m : spec.modes) {
    bandwidths.push_back(m == AveragingMode::client ? std::optional<double>(0.0) : std::nullopt);
  }
  const std::int64_t total = std::accumulate(spec.sizes.begin(), spec.sizes.end(), std::int64_t{0});
  auto counts = load_balance_peers(total, bandwidths);
  REQUIRE(counts);
  for (std::size_t p = 0; p < n; ++p) {
    Tensors tensors;
    for (std::int64_t size : spec.sizes) {
      std::vector<float> t(static_cast<std::size_t>(size));
      for (float& v : t) v = next_value(state);
      tensors.push_back(std::move(t));
    }
    AllReduceConfig c;
    c.group_id = "group-" + std::to_string(spec.seed);
    for (std::size_t q = 0; q < n; ++q) c.peers.push_back(test_addr(q));
    c.self = p;
    c.modes = spec.modes;
    c.weight = spec.weights.empty() ? 1.0 : spec.weights[p];
    c.tensor_sizes = spec.sizes;
    c.codecs = spec.codecs;
    c.peer_fractions.assign(counts->begin(), counts->end());
    c.part_size_bytes = spec.part_size_bytes;
    c.sender_timeout = spec.sender_timeout;
    c.reducer_timeout = spec.reducer_timeout;
    c.deferred_reductions = spec.deferred;
    c.averages_in_place = spec.in_place;
    c.splice_parts = spec.splice;
    c.answer_averages = p < spec.answer_averages.size() && spec.answer_averages[p];
    c.identical_results = spec.identical;
    auto runner = AllReduceRunner::create(c, tensors);
    REQUIRE(runner);
    g.runners.push_back(std::move(*runner));
    g.inputs.push_back(std::move(tensors));
  }
  return g;
}

/// sum_{s in senders} w_s x_s / sum w_s, per tensor.
inline Tensors weighted_mean(const Group& g, const std::vector<std::size_t>& senders) {
  Tensors out;
  for (std::size_t t = 0; t < g.spec.sizes.size(); ++t) {
    std::vector<float> m(static_cast<std::size_t>(g.spec.sizes[t]));
    for (std::size_t k = 0; k < m.size(); ++k) {
      double acc = 0, den = 0;
      for (std::size_t s : senders) {
        const double w = g.spec.weights.empty() ? 1.0 : g.spec.weights[s];
        acc += w * g.inputs[s][t][k];
        den += w;
      }
      m[k] = static_cast<float>(acc / den);
    }
    out.push_back(std::move(m));
  }
  return out;
}

/// Peers that send tensors (not aux).
inline std::vector<std::size_t> senders_of(const GroupSpec& spec) {
  std::vector<std::size_t> out;
  for (std::size_t p = 0; p < spec.modes.size(); ++p) {
    if (spec.modes[p] != AveragingMode::aux) out.push_back(p);
  }
  return out;
}

/// local + delta for peer p (averaging_alpha = 1), or its averages in place.
inline Tensors result_of(Net& net, const Group& g, std::size_t p) {
  if (g.spec.in_place) {
    CHECK(net.runner(p).outcome().deltas.empty());
    return net.runner(p).outcome().averages;
  }
  Tensors out = g.inputs[p];
  const auto& deltas = net.runner(p).outcome().deltas;
  for (std::size_t t = 0; t < out.size(); ++t) {
    for (std::size_t k = 0; k < out[t].size(); ++k) out[t][k] += deltas[t][k];
  }
  return out;
}

/// Largest |a - b| over all elements.
inline double max_error(const Tensors& a, const Tensors& b) {
  double worst = 0;
  for (std::size_t t = 0; t < a.size(); ++t) {
    for (std::size_t k = 0; k < a[t].size(); ++k) {
      worst = std::max(worst, std::fabs(static_cast<double>(a[t][k]) - b[t][k]));
    }
  }
  return worst;
}

}  // namespace apiary::core::averaging::testing
