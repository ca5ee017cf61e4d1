#include "core/moe/beam_search.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace apiary::core::moe {
namespace {

/// `prefix` followed by coordinate `c` and the delimiter: the prefix one level down.
std::string child_prefix(const std::string& prefix, std::int64_t c) {
  return prefix + std::to_string(c) + k_uid_delimiter;
}

/// Orders scored candidates best first; equal scores by the smaller text.
template <class T>
bool better(double score_a, const T& a, double score_b, const T& b) {
  if (score_a != score_b) return score_a > score_b;
  return a < b;
}

}  // namespace

Status BeamSearchConfig::validate() const {
  if (!is_valid_prefix(uid_prefix)) {
    return make_error(errc::invalid_argument,
                      "beam search: uid_prefix '{}' is not a prefix; expected <root>.[<coordinate>.]... ending in "
                      "'.', e.g. \"expert.\"",
                      uid_prefix);
  }
  if (grid_size.empty()) {
    return make_error(errc::invalid_argument, "beam search: grid_size is empty; give the size of every dimension");
  }
  for (std::size_t d = 0; d < grid_size.size(); ++d) {
    if (grid_size[d] == 0) {
      return make_error(errc::invalid_argument, "beam search: dimension {} of grid_size is 0; each must be >= 1", d);
    }
  }
  if (cache_expiration.count() < 0) {
    return make_error(errc::invalid_argument, "beam search: cache_expiration is negative ({} ns)",
                      cache_expiration.count());
  }
  return ok_status();
}

void NegativeCache::add(TimePoint now, const std::string& prefix, Duration expiration) {
  TimePoint& expiry = expiry_[prefix];
  expiry = std::max(expiry, now + expiration);
}

bool NegativeCache::contains(TimePoint now, const std::string& prefix) const {
  auto it = expiry_.find(prefix);
  return it != expiry_.end() && now <= it->second;
}

void NegativeCache::purge(TimePoint now) {
  for (auto it = expiry_.begin(); it != expiry_.end();) {
    it = now > it->second ? expiry_.erase(it) : std::next(it);
  }
}

BeamSearch::BeamSearch(const BeamSearchConfig& config, GridScores scores, std::size_t beam_size, bool initial_only)
    : config_(config), scores_(std::move(scores)), beam_size_(beam_size), initial_only_(initial_only) {}

Result<BeamSearch> BeamSearch::create(const BeamSearchConfig& config, GridScores scores, std::size_t beam_size) {
  if (Status valid = config.validate(); !valid) return valid.error();
  if (beam_size == 0) return make_error(errc::invalid_argument, "beam search: beam_size is 0; ask for at least 1 expert");
  if (scores.size() != config.grid_size.size()) {
    return make_error(errc::invalid_argument, "beam search: {} rows of grid scores for a grid of {} dimensions",
                      scores.size(), config.grid_size.size());
  }
  for (std::size_t d = 0; d < scores.size(); ++d) {
    if (scores[d].size() != config.grid_size[d]) {
      return make_error(errc::invalid_argument, "beam search: dimension {} has {} scores, the grid {} coordinates", d,
                        scores[d].size(), config.grid_size[d]);
    }
    for (double s : scores[d]) {
      if (!std::isfinite(s)) {
        return make_error(errc::invalid_argument, "beam search: dimension {} has a score that is not finite ({})", d,
                          s);
      }
    }
  }
  return BeamSearch(config, std::move(scores), beam_size, false);
}

Result<BeamSearch> BeamSearch::initial_beam(const BeamSearchConfig& config, std::vector<double> scores,
                                            std::size_t beam_size) {
  if (Status valid = config.validate(); !valid) return valid.error();
  if (scores.size() > config.grid_size[0]) {
    return make_error(errc::invalid_argument, "beam search: {} scores for a first dimension of {} coordinates",
                      scores.size(), config.grid_size[0]);
  }
  // Coordinates past the scores given are not looked up.
  BeamSearchConfig first = config;
  first.grid_size = {scores.size()};
  auto search = create(first, GridScores{std::move(scores)}, beam_size);
  if (!search) return search.error();
  // Successors of the first dimension's prefixes lie in the second dimension, if any.
  search->config_.grid_size = config.grid_size;
  search->initial_only_ = true;
  return search;
}

SearchStep BeamSearch::begin(TimePoint now, NegativeCache& cache) {
  SearchStep step;
  if (phase_ != Phase::initial || !initial_order_.empty()) return step;
  // First-dimension coordinates from the best score down.
  initial_order_.resize(scores_[0].size());
  std::iota(initial_order_.begin(), initial_order_.end(), 0);
  std::stable_sort(initial_order_.begin(), initial_order_.end(),
                   [&](std::int64_t a, std::int64_t b) { return scores_[0][a] > scores_[0][b]; });
  advance_initial(now, cache, step);
  return step;
}

SearchStep BeamSearch::on_found(TimePoint now, const std::string& prefix, std::optional<Successors> found,
                                NegativeCache& cache) {
  SearchStep step;
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [&](const Pending& p) { return !p.answered && p.prefix == prefix; });
  if (phase_ == Phase::done || it == pending_.end()) return step;
  answer(now, cache, *it, std::move(found), step);
  if (phase_ == Phase::initial) {
    advance_initial(now, cache, step);
  } else {
    advance_middle(now, cache, step);
  }
  return step;
}

std::vector<ScoredExpert> BeamSearch::experts() const {
  std::vector<ScoredExpert> all;
  all.reserve(best_.size());
  for (const auto& entry : best_) all.push_back(entry.second);
  std::sort(all.begin(), all.end(), [](const ScoredExpert& a, const ScoredExpert& b) {
    return better(a.score, a.expert.uid, b.score, b.expert.uid);
  });
  if (all.size() > beam_size_) all.resize(beam_size_);
  return all;
}

std::size_t BeamSearch::pending() const {
  return static_cast<std::size_t>(
      std::count_if(pending_.begin(), pending_.end(), [](const Pending& p) { return !p.answered; }));
}

void BeamSearch::advance_initial(TimePoint now, NegativeCache& cache, SearchStep& step) {
  const std::size_t workers = config_.initial_workers == 0 ? beam_size_ : config_.initial_workers;
  bool progressed = true;
  while (progressed && beam_.size() < beam_size_) {
    // Dispatch the best coordinates not tried yet, up to `workers` lookups at once.
    while (next_initial_ < initial_order_.size() && pending_.size() < workers) {
      const std::int64_t c = initial_order_[next_initial_++];
      ask(now, cache, scores_[0][c], child_prefix(config_.uid_prefix, c), step);
    }
    // Take the answers in score order: a better prefix is decided before a worse one.
    progressed = false;
    while (!pending_.empty() && pending_.front().answered && beam_.size() < beam_size_) {
      Pending p = std::move(pending_.front());
      pending_.pop_front();
      if (!p.successors.empty()) beam_.push_back(BeamEntry{p.score, std::move(p.prefix), std::move(p.successors)});
      progressed = true;
    }
  }
  const bool exhausted = next_initial_ == initial_order_.size() && pending_.empty();
  if (beam_.size() < beam_size_ && !exhausted) return;
  // The beam is full (or no prefix is left): the lookups still out are not needed.
  for (const Pending& p : pending_) {
    if (!p.answered) step.cancelled.push_back(p.prefix);
  }
  pending_.clear();
  if (initial_only_) {
    phase_ = Phase::done;
    return;
  }
  next_dimension(now, cache, step);
}

void BeamSearch::next_dimension(TimePoint now, NegativeCache& cache, SearchStep& step) {
  collect_experts();
  const std::size_t dims = config_.grid_size.size();
  // The beam's successors are the experts themselves (the last dimension, or flat).
  if (beam_.empty() || depth_ + 1 >= dims) {
    phase_ = Phase::done;
    return;
  }
  // Score the beam's successors in this dimension and keep the best beam_size of them.
  struct Candidate {
    double score;
    std::string prefix;
  };
  std::vector<Candidate> candidates;
  for (const BeamEntry& entry : beam_) {
    for (const auto& successor : entry.successors) {
      const std::int64_t c = successor.first;
      candidates.push_back(Candidate{entry.score + scores_[depth_][c], child_prefix(entry.prefix, c)});
    }
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return better(a.score, a.prefix, b.score, b.prefix); });
  if (candidates.size() > beam_size_) candidates.resize(beam_size_);
  // Look them all up at once; their successors lie one dimension further.
  phase_ = Phase::middle;
  ++depth_;
  beam_.clear();
  for (Candidate& c : candidates) ask(now, cache, c.score, std::move(c.prefix), step);
  advance_middle(now, cache, step);
}

void BeamSearch::advance_middle(TimePoint now, NegativeCache& cache, SearchStep& step) {
  if (pending() > 0) return;
  // Every lookup is in: the prefixes with successors form the new beam, best first.
  for (Pending& p : pending_) {
    if (!p.successors.empty()) beam_.push_back(BeamEntry{p.score, std::move(p.prefix), std::move(p.successors)});
  }
  pending_.clear();
  next_dimension(now, cache, step);
}

void BeamSearch::ask(TimePoint now, NegativeCache& cache, double score, std::string prefix, SearchStep& step) {
  Pending p{score, std::move(prefix), false, {}};
  if (config_.negative_caching && cache.contains(now, p.prefix)) {
    p.answered = true;  // known empty: no lookup
  } else {
    step.lookups.push_back(p.prefix);
  }
  pending_.push_back(std::move(p));
}

void BeamSearch::answer(TimePoint now, NegativeCache& cache, Pending& p, std::optional<Successors> found,
                        SearchStep& step) {
  p.answered = true;
  if (!found) {
    if (config_.negative_caching) {
      cache.add(now, p.prefix, config_.cache_expiration);
      step.found_empty.push_back(p.prefix);
    }
    return;
  }
  // Keep the successors in this grid: coordinates of dimension depth_, or the flat
  // expert when the grid has one dimension.
  const std::size_t dims = config_.grid_size.size();
  for (auto& [c, expert] : *found) {
    const bool inside = depth_ < dims ? c >= 0 && static_cast<std::size_t>(c) < config_.grid_size[depth_]
                                      : c == k_flat_expert;
    if (inside) p.successors.emplace(c, std::move(expert));
  }
}

void BeamSearch::collect_experts() {
  for (const BeamEntry& entry : beam_) {
    for (const auto& [c, expert] : entry.successors) {
      // An expert attached to this successor: the successor itself, or a uid below it.
      const std::string& uid = expert.uid;
      const std::string under = c == k_flat_expert ? entry.prefix.substr(0, entry.prefix.size() - 1)
                                                   : entry.prefix + std::to_string(c);
      const bool attached = uid.compare(0, under.size(), under) == 0 &&
                            (uid.size() == under.size() || uid[under.size()] == k_uid_delimiter);
      if (!attached || best_.count(uid) != 0) continue;
      if (auto score = score_of(uid)) best_.emplace(uid, ScoredExpert{*score, expert});
    }
  }
}

std::optional<double> BeamSearch::score_of(const std::string& uid) const {
  if (uid.compare(0, config_.uid_prefix.size(), config_.uid_prefix) != 0) return std::nullopt;
  auto parts = parse_uid("x" + uid.substr(config_.uid_prefix.size() - 1));
  if (!parts || parts->coordinates.size() != scores_.size()) return std::nullopt;
  double score = 0;
  for (std::size_t d = 0; d < scores_.size(); ++d) {
    const std::int64_t c = parts->coordinates[d];
    if (c < 0 || static_cast<std::size_t>(c) >= scores_[d].size()) return std::nullopt;
    score += scores_[d][c];
  }
  return score;
}

}  // namespace apiary::core::moe
