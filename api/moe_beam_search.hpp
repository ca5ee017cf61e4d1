#pragma once
/// apiary::MoEBeamSearcher: hivemind's MoEBeamSearcher (reference §6.3) over a Dht. It
/// hosts core::moe::BeamSearch: each step's prefixes (of every sample of a batch at
/// once) are fetched with one Dht::get_many, and what was found is fed back until every
/// search is done. Prefixes found empty are remembered (core::moe::NegativeCache, shared
/// by the searches of one searcher) and stored in the DHT as hivemind does
/// (`prefix`[-1] -> None for cache_expiration), so later searches skip them.
#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/effects.hpp"
#include "core/moe/beam_search.hpp"
#include "messages/result.hpp"

namespace apiary {

class Dht;

/// An expert a search found: its uid, its server (as get_experts gives it) and its
/// score (the sum over dimensions of the grid score of its coordinate).
struct FoundExpert {
  std::string uid;
  core::PeerAddr server;
  double score = 0;
};

/// Per dimension of the grid, a score for every coordinate.
using ExpertGridScores = std::vector<std::vector<float>>;

class MoEBeamSearcher {
 public:
  /// Searches the experts "<uid_prefix><c1>.<c2>..." of a grid of `grid_size` declared in
  /// `dht` (which must outlive the searcher). Each search gives up after `timeout`.
  /// A bad prefix or grid is reported by the searches (errc::invalid_argument).
  MoEBeamSearcher(Dht& dht, std::string uid_prefix, std::vector<std::size_t> grid_size, bool negative_caching = true,
                  std::chrono::milliseconds cache_expiration = std::chrono::seconds(300),
                  std::chrono::milliseconds timeout = std::chrono::seconds(30));

  /// The best `beam_size` experts for `grid_scores` (one row per dimension, one score
  /// per coordinate), best first; experts whose record names no address apiary can call
  /// are left out. Errors: invalid_argument (scores not of the grid's shape or not
  /// finite, beam_size 0), the DHT's, deadline_exceeded past the timeout.
  [[nodiscard]] Result<std::vector<FoundExpert>> find_best_experts(const ExpertGridScores& grid_scores,
                                                                   std::size_t beam_size);
  /// find_best_experts for every sample of a batch, the lookups of all samples in one
  /// get_many per step; per sample, in order. Errors as find_best_experts'.
  [[nodiscard]] Result<std::vector<std::vector<FoundExpert>>> batch_find_best_experts(
      const std::vector<ExpertGridScores>& batch, std::size_t beam_size);
  /// The first beam (hivemind's get_initial_beam): up to `beam_size` prefixes
  /// "<uid_prefix><i>." with experts, by the score `scores[i]` of their first
  /// coordinate, best first, with their populated successors.
  [[nodiscard]] Result<std::vector<core::moe::BeamEntry>> get_initial_beam(const std::vector<float>& scores,
                                                                           std::size_t beam_size);
  /// The populated successors of each prefix (empty when none), coordinates inside the
  /// grid (`grid_size`: at most that many coordinates; none: the grid's own size at the
  /// prefix's dimension). Errors: the DHT's, deadline_exceeded.
  [[nodiscard]] Result<std::map<std::string, core::moe::Successors>> get_active_successors(
      const std::vector<std::string>& prefixes, std::optional<std::size_t> grid_size = std::nullopt);

  /// Prefixes remembered as empty now.
  [[nodiscard]] std::size_t negative_cache_size();
  /// Prefixes fetched from the DHT so far (every get_many key counts).
  [[nodiscard]] std::size_t lookups();

 private:
  /// Runs `searches` to their end, every step's lookups in one get_many.
  Status run(std::vector<core::moe::BeamSearch>& searches);
  /// get_many of `keys` within the deadline.
  Result<std::vector<std::optional<core::dht::FoundValue>>> fetch(const std::vector<std::string>& keys,
                                                                   std::chrono::steady_clock::time_point deadline);
  /// Stores the negative-cache record of each prefix in the DHT (not waited for).
  void store_empty(const std::vector<std::string>& prefixes);
  /// `experts` with a callable server.
  [[nodiscard]] static std::vector<FoundExpert> found_of(const std::vector<core::moe::ScoredExpert>& experts);

  Dht* dht_;
  core::moe::BeamSearchConfig config_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  core::moe::NegativeCache cache_;  ///< guarded by mutex_
  std::size_t lookups_ = 0;         ///< guarded by mutex_
};

}  // namespace apiary
