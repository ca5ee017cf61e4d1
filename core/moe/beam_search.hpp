#pragma once
/// Beam search over the expert grid (hivemind's MoEBeamSearcher, reference §6.3) as a
/// step machine: the search says which prefixes to look up in the DHT, the host gets
/// them and feeds back what it found (successors_of in dht_layout.hpp reads a found
/// value), and the search ends with the best experts by summed grid score.
///
/// The steps, as hivemind takes them:
/// 1. Initial beam: the first dimension's prefixes "<uid_prefix><i>." from the best score
///    down, up to `initial_workers` lookups at once, answers taken in score order, until
///    `beam_size` prefixes with experts are found or the dimension is exhausted.
/// 2. For each middle dimension: the experts attached to the beam's successors join the
///    running top-k; the beam's successors, scored prefix score + this dimension's
///    score, are cut to the best `beam_size`, and those prefixes are looked up at once.
/// 3. The experts under the final beam join the top-k; the result is best first.
/// Prefixes a lookup did not find are cached as empty for `cache_expiration` (the
/// NegativeCache, shared by the searches of one client), so later searches skip them.
/// Pure: time comes in as `now`.
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/moe/dht_layout.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::core::moe {

/// Per dimension of the grid, a score for every coordinate.
using GridScores = std::vector<std::vector<double>>;

/// What a client searches (hivemind's MoEBeamSearcher arguments).
struct BeamSearchConfig {
  std::string uid_prefix;              ///< a valid prefix without coordinates, "expert."
  std::vector<std::size_t> grid_size;  ///< coordinates per dimension (each >= 1)
  bool negative_caching = true;        ///< remember prefixes that had no experts
  /// How long they are remembered (hivemind's default: 300 s; a new expert under such a
  /// prefix stays unseen that long).
  Duration cache_expiration = std::chrono::seconds(300);
  std::size_t initial_workers = 0;     ///< initial-beam lookups at once (0: beam_size)

  /// Errors: errc::invalid_argument naming the first bad setting.
  [[nodiscard]] Status validate() const;
};

/// Prefixes known to hold no experts, each until its expiry.
class NegativeCache {
 public:
  /// Remembers `prefix` as empty until now + `expiration`.
  void add(TimePoint now, const std::string& prefix, Duration expiration);
  /// Whether `prefix` is remembered as empty at `now` (an entry lives while now <= its
  /// expiry, as DHT values do).
  [[nodiscard]] bool contains(TimePoint now, const std::string& prefix) const;
  /// Forgets entries expired at `now`.
  void purge(TimePoint now);
  [[nodiscard]] std::size_t size() const { return expiry_.size(); }

 private:
  std::map<std::string, TimePoint> expiry_;
};

/// An expert a search found, with its score: the sum over dimensions of the grid score
/// of its coordinate.
struct ScoredExpert {
  double score = 0;
  ExpertInfo expert;
};

/// A prefix of the beam with its score and its populated successors.
struct BeamEntry {
  double score = 0;
  std::string prefix;
  Successors successors;
};

/// What the host does after a step.
struct SearchStep {
  std::vector<std::string> lookups;    ///< prefixes to get from the DHT, each to be fed back
  std::vector<std::string> cancelled;  ///< lookups no longer needed (their answers are ignored)
  /// Prefixes just cached as empty (a host may also store negative_cache_item for them
  /// in its DHT node's cache, as hivemind does).
  std::vector<std::string> found_empty;
};

/// One search for one row of grid scores.
class BeamSearch {
 public:
  /// A search for the best `beam_size` experts. Errors: errc::invalid_argument for a
  /// config validate() rejects, beam_size 0, or scores whose shape is not the grid's or
  /// that are not finite.
  [[nodiscard]] static Result<BeamSearch> create(const BeamSearchConfig& config, GridScores scores,
                                                 std::size_t beam_size);
  /// A search that stops after the initial beam (hivemind's get_initial_beam): `scores`
  /// of the first coordinates of the first dimension (those past them are not looked
  /// up); beam() then holds it.
  [[nodiscard]] static Result<BeamSearch> initial_beam(const BeamSearchConfig& config, std::vector<double> scores,
                                                       std::size_t beam_size);

  /// Starts: the first lookups.
  [[nodiscard]] SearchStep begin(TimePoint now, NegativeCache& cache);
  /// What the lookup of `prefix` found: its successors, or nullopt when the DHT had no
  /// value (cached as empty). Answers to prefixes not asked for, or asked for and
  /// cancelled, are ignored.
  [[nodiscard]] SearchStep on_found(TimePoint now, const std::string& prefix, std::optional<Successors> found,
                                    NegativeCache& cache);

  /// Whether the search has finished.
  [[nodiscard]] bool done() const { return phase_ == Phase::done; }
  /// The best experts found, best first (ties: smaller uid first), at most beam_size;
  /// complete once done().
  [[nodiscard]] std::vector<ScoredExpert> experts() const;
  /// The current beam, best first.
  [[nodiscard]] const std::vector<BeamEntry>& beam() const { return beam_; }
  /// Lookups asked for and not answered yet.
  [[nodiscard]] std::size_t pending() const;

 private:
  enum class Phase { initial, middle, done };
  struct Pending {
    double score = 0;
    std::string prefix;
    bool answered = false;
    Successors successors;
  };

  BeamSearch(const BeamSearchConfig& config, GridScores scores, std::size_t beam_size, bool initial_only);
  /// Dispatches and consumes initial-beam lookups as far as answers allow.
  void advance_initial(TimePoint now, NegativeCache& cache, SearchStep& step);
  /// Joins the beam's experts to the top-k, then forms the next beam's lookups (or ends).
  void next_dimension(TimePoint now, NegativeCache& cache, SearchStep& step);
  /// Takes the answered middle-dimension lookups as the new beam once all are in.
  void advance_middle(TimePoint now, NegativeCache& cache, SearchStep& step);
  /// Queues the lookup of `prefix`, answered at once when the cache knows it empty.
  void ask(TimePoint now, NegativeCache& cache, double score, std::string prefix, SearchStep& step);
  /// Records the answer for a pending prefix (and caches an absent one).
  void answer(TimePoint now, NegativeCache& cache, Pending& p, std::optional<Successors> found, SearchStep& step);
  /// Adds the experts attached to the beam's successors to the top-k.
  void collect_experts();
  /// The full score of `uid` when it is an expert of this grid under the search prefix.
  [[nodiscard]] std::optional<double> score_of(const std::string& uid) const;

  BeamSearchConfig config_;
  GridScores scores_;
  std::size_t beam_size_;
  bool initial_only_;
  Phase phase_ = Phase::initial;
  std::size_t depth_ = 1;                    ///< coordinates in the prefixes looked up now
  std::vector<std::int64_t> initial_order_;  ///< first-dimension coordinates, best first
  std::size_t next_initial_ = 0;             ///< the next of them to look up
  std::deque<Pending> pending_;              ///< lookups of this step, best first
  std::vector<BeamEntry> beam_;
  std::map<std::string, ScoredExpert> best_;  ///< uid -> expert, every one seen
};

}  // namespace apiary::core::moe
