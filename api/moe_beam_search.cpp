#include "api/moe_beam_search.hpp"

#include <utility>

#include "api/dht.hpp"
#include "api/runtime.hpp"

namespace apiary {
namespace {

namespace moe = core::moe;
using Clock = std::chrono::steady_clock;

/// `scores` in the core's precision.
moe::GridScores widen(const ExpertGridScores& scores) {
  moe::GridScores out;
  out.reserve(scores.size());
  for (const auto& row : scores) out.emplace_back(row.begin(), row.end());
  return out;
}

/// How many coordinates `prefix` has past `uid_prefix` (the dimension of its successors).
std::size_t depth_of(const std::string& uid_prefix, const std::string& prefix) {
  std::size_t depth = 0;
  for (std::size_t i = uid_prefix.size(); i < prefix.size(); ++i) depth += prefix[i] == moe::k_uid_delimiter;
  return depth;
}

}  // namespace

MoEBeamSearcher::MoEBeamSearcher(Dht& dht, std::string uid_prefix, std::vector<std::size_t> grid_size,
                                 bool negative_caching, std::chrono::milliseconds cache_expiration,
                                 std::chrono::milliseconds timeout)
    : dht_(&dht), timeout_(timeout) {
  config_.uid_prefix = std::move(uid_prefix);
  config_.grid_size = std::move(grid_size);
  config_.negative_caching = negative_caching;
  config_.cache_expiration = cache_expiration;
}

Result<std::vector<FoundExpert>> MoEBeamSearcher::find_best_experts(const ExpertGridScores& grid_scores,
                                                                    std::size_t beam_size) {
  auto found = batch_find_best_experts({grid_scores}, beam_size);
  if (!found) return found.error();
  return std::move(found->front());
}

Result<std::vector<std::vector<FoundExpert>>> MoEBeamSearcher::batch_find_best_experts(
    const std::vector<ExpertGridScores>& batch, std::size_t beam_size) {
  std::vector<moe::BeamSearch> searches;
  searches.reserve(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    auto search = moe::BeamSearch::create(config_, widen(batch[i]), beam_size);
    if (!search) return make_error(search.error().code, "sample {}: {}", i, search.error().message);
    searches.push_back(std::move(*search));
  }
  if (Status ran = run(searches); !ran) return ran.error();
  std::vector<std::vector<FoundExpert>> out;
  out.reserve(searches.size());
  for (const auto& search : searches) out.push_back(found_of(search.experts()));
  return out;
}

Result<std::vector<moe::BeamEntry>> MoEBeamSearcher::get_initial_beam(const std::vector<float>& scores,
                                                                      std::size_t beam_size) {
  auto search = moe::BeamSearch::initial_beam(config_, std::vector<double>(scores.begin(), scores.end()), beam_size);
  if (!search) return search.error();
  std::vector<moe::BeamSearch> searches{std::move(*search)};
  if (Status ran = run(searches); !ran) return ran.error();
  return searches.front().beam();
}

Result<std::map<std::string, moe::Successors>> MoEBeamSearcher::get_active_successors(
    const std::vector<std::string>& prefixes, std::optional<std::size_t> grid_size) {
  auto found = fetch(prefixes, Clock::now() + timeout_);
  if (!found) return found.error();
  std::map<std::string, moe::Successors> out;
  for (std::size_t i = 0; i < prefixes.size(); ++i) {
    const std::size_t depth = depth_of(config_.uid_prefix, prefixes[i]);
    const std::size_t size =
        grid_size ? *grid_size : depth < config_.grid_size.size() ? config_.grid_size[depth] : 0;
    moe::Successors& kept = out[prefixes[i]];
    auto successors = moe::successors_of((*found)[i]);
    if (!successors) continue;
    for (auto& [c, expert] : *successors) {
      if (c >= 0 && static_cast<std::size_t>(c) < size) kept.emplace(c, std::move(expert));
    }
  }
  return out;
}

std::size_t MoEBeamSearcher::negative_cache_size() {
  std::lock_guard<std::mutex> lock(mutex_);
  cache_.purge(dht_->runtime().now());
  return cache_.size();
}

std::size_t MoEBeamSearcher::lookups() {
  std::lock_guard<std::mutex> lock(mutex_);
  return lookups_;
}

Status MoEBeamSearcher::run(std::vector<moe::BeamSearch>& searches) {
  const auto deadline = Clock::now() + timeout_;
  std::map<std::string, std::vector<std::size_t>> wanted;  // prefix -> the searches that asked for it
  std::vector<std::string> empty;                          // prefixes just found empty
  auto take = [&](std::size_t s, moe::SearchStep step) {
    for (auto& prefix : step.lookups) wanted[prefix].push_back(s);
    for (auto& prefix : step.found_empty) empty.push_back(std::move(prefix));
  };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const core::TimePoint now = dht_->runtime().now();
    for (std::size_t s = 0; s < searches.size(); ++s) take(s, searches[s].begin(now, cache_));
  }
  while (!wanted.empty()) {
    // One get_many for what every search asked; their answers may ask for more.
    auto asked = std::exchange(wanted, {});
    std::vector<std::string> keys;
    keys.reserve(asked.size());
    for (const auto& entry : asked) keys.push_back(entry.first);
    auto found = fetch(keys, deadline);
    if (!found) return found.error();
    std::lock_guard<std::mutex> lock(mutex_);
    lookups_ += keys.size();
    const core::TimePoint now = dht_->runtime().now();
    for (std::size_t k = 0; k < keys.size(); ++k) {
      const auto successors = moe::successors_of((*found)[k]);
      for (std::size_t s : asked[keys[k]]) take(s, searches[s].on_found(now, keys[k], successors, cache_));
    }
  }
  store_empty(empty);
  for (std::size_t s = 0; s < searches.size(); ++s) {
    if (!searches[s].done()) {
      return make_error(errc::internal, "beam search {} stopped with no lookups left and {} pending", s,
                        searches[s].pending());
    }
  }
  return ok_status();
}

Result<std::vector<std::optional<core::dht::FoundValue>>> MoEBeamSearcher::fetch(const std::vector<std::string>& keys,
                                                                                Clock::time_point deadline) {
  std::vector<DhtKey> dht_keys;
  dht_keys.reserve(keys.size());
  for (const auto& key : keys) dht_keys.push_back(DhtKey::str(key));
  auto got = dht_->get_many(dht_keys);
  if (got.wait_until(deadline) != std::future_status::ready) {
    return make_error(errc::deadline_exceeded,
                      "beam search: the DHT did not find {} prefixes ({}...) within the timeout of {} ms; raise "
                      "the timeout or check the DHT's peers",
                      keys.size(), keys.empty() ? "" : keys.front(), timeout_.count());
  }
  auto found = got.get();
  if (!found) return make_error(found.error().code, "beam search: {}", found.error().message);
  if (found->size() != keys.size()) {
    return make_error(errc::internal, "beam search: get_many answered {} of {} keys", found->size(), keys.size());
  }
  return found;
}

void MoEBeamSearcher::store_empty(const std::vector<std::string>& prefixes) {
  if (prefixes.empty()) return;
  const double expiration = dht_->runtime().dht_time() + core::to_seconds(config_.cache_expiration);
  std::vector<core::dht::StoreItem> records;
  records.reserve(prefixes.size());
  for (const auto& prefix : prefixes) records.push_back(moe::negative_cache_item(prefix, expiration));
  // Not waited for: a search does not depend on it, as in hivemind.
  (void)dht_->store_records(std::move(records));
}

std::vector<FoundExpert> MoEBeamSearcher::found_of(const std::vector<moe::ScoredExpert>& experts) {
  std::vector<FoundExpert> out;
  out.reserve(experts.size());
  for (const auto& scored : experts) {
    // apiary servers declare their multiaddr; a bare PeerID cannot be dialed here.
    auto server = core::PeerAddr::parse(scored.expert.peer_id);
    if (server) out.push_back(FoundExpert{scored.expert.uid, std::move(*server), scored.score});
  }
  return out;
}

}  // namespace apiary
