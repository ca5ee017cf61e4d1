// get_many: local storage and cache first, then one search for the keys still missing,
// shared with concurrent gets of the same keys; found values are cached as hivemind does.
#include <algorithm>
#include <limits>

#include "core/dht/msgpack_value.hpp"
#include "core/dht/node.hpp"
#include "core/dht/node_internal.hpp"

namespace apiary::core::dht {

std::size_t queries_per_call_for(std::size_t queries, std::size_t cap);

namespace {

constexpr DhtTime k_infinity = std::numeric_limits<DhtTime>::infinity();

/// When a timer for DHT time `t` fires, on a clock whose DHT time is `epoch` at its zero:
/// saturated to what a TimePoint holds (about 292 years), since `t` comes from a peer's
/// expiration and may be any double (from_seconds of one beyond it is undefined).
TimePoint timer_at(DhtTime t, double epoch) {
  constexpr double k_limit = 9.2e9;  // seconds; TimePoint::max() is 9.22e9 s
  const double s = t - epoch;
  if (!(s < k_limit)) return TimePoint::max();  // NaN too: never
  if (s <= -k_limit) return TimePoint::min();
  return from_seconds(s);
}

/// Folds `incoming` into `best` (hivemind's _SearchState.add_candidate): two dictionaries
/// merge subkey by subkey (newest wins per subkey); otherwise the later expiration wins.
void fold(DhtTime now, std::optional<Candidate>& best, Candidate incoming) {
  if (best) {
    auto* mine = std::get_if<DictionaryValue>(&best->value);
    auto* theirs = std::get_if<DictionaryValue>(&incoming.value);
    if (mine != nullptr && theirs != nullptr) {
      for (auto& [subkey, v] : theirs->items(now)) mine->store(now, subkey, v.value, v.expiration_time);
      if (incoming.expiration > best->expiration) {
        best->expiration = incoming.expiration;
        best->source = incoming.source;
        best->hops = incoming.hops;
      }
      return;
    }
    if (incoming.expiration <= best->expiration) return;
  }
  best = std::move(incoming);
}

}  // namespace

std::optional<FoundValue> Node::local_lookup(TimePoint now, const NodeId& key, bool* from_cache) {
  const DhtTime t = dht_time(now);
  auto stored = protocol_.storage().get(t, key);
  auto cached = protocol_.cache().get(t, key);
  *from_cache = cached && (!stored || cached->expiration_time > stored->expiration_time);
  if (*from_cache) stored = std::move(cached);
  if (!stored) return std::nullopt;
  Candidate c{std::move(stored->value), stored->expiration_time, std::nullopt, 0};
  return to_found(t, key, c);
}

std::optional<FoundValue> Node::to_found(DhtTime t, const NodeId& key, Candidate& c) const {
  FoundValue out;
  out.expiration = c.expiration;
  const std::string key_bytes = key.to_bytes();
  if (auto* regular = std::get_if<std::string>(&c.value)) {
    out.value = validator_ ? validator_->strip_value(DhtRecord{key_bytes, k_subkey_regular, *regular, c.expiration})
                           : *regular;
    return out;
  }
  FoundValue::Dictionary dict;
  for (auto& [subkey, v] : std::get<DictionaryValue>(c.value).items(t)) {
    std::string value = validator_ ? validator_->strip_value(DhtRecord{key_bytes, subkey, v.value, v.expiration_time})
                                   : v.value;
    dict.emplace(subkey, ValueWithExpiration<std::string>{std::move(value), v.expiration_time});
  }
  if (dict.empty()) return std::nullopt;
  out.value = std::move(dict);
  return out;
}

Effects Node::get(TimePoint now, OpId op, const std::vector<NodeId>& keys, bool latest) {
  last_now_ = now;
  start_get(now, op, keys, latest, std::nullopt, false);
  return finish_input(now);
}

void Node::start_get(TimePoint now, OpId op_id, const std::vector<NodeId>& keys, bool latest,
                     std::optional<DhtTime> sufficient, bool internal) {
  const DhtTime t = dht_time(now);
  Op& o = add_op(op_id);
  o.kind = OpKind::get;
  o.result.found.resize(keys.size());
  o.internal = internal;
  const DhtTime enough = sufficient ? *sufficient : (latest ? k_infinity : t);
  std::map<NodeId, GetKey> to_search;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const NodeId& key = keys[i];
    ++o.remaining;
    if (auto pending = to_search.find(key); pending != to_search.end()) {
      pending->second.waiters.emplace_back(op_id, i);
      continue;
    }
    bool from_cache = false;
    auto local = local_lookup(now, key, &from_cache);
    if (local && local->expiration >= enough) {
      if (from_cache) schedule_refresh(now, key, local->expiration);
      o.result.found[i] = std::move(local);
      --o.remaining;
      continue;
    }
    if (config_.reuse_get_requests && !internal) {
      auto shared = searches_.find(key);
      if (shared != searches_.end()) {
        Search& s = *searches_by_id_.at(shared->second);
        GetKey& gk = s.keys.at(key);
        if (gk.sufficient >= enough) {
          gk.waiters.emplace_back(op_id, i);
          continue;
        }
      }
    }
    GetKey gk;
    gk.sufficient = enough;
    if (local) {
      // A local value seeds the search; remote ones must beat it.
      auto stored = protocol_.storage().get(t, key);
      auto cached = protocol_.cache().get(t, key);
      if (cached && (!stored || cached->expiration_time > stored->expiration_time)) stored = std::move(cached);
      if (stored) gk.best = Candidate{std::move(stored->value), stored->expiration_time, std::nullopt, 0};
    }
    gk.waiters.emplace_back(op_id, i);
    to_search.emplace(key, std::move(gk));
  }
  if (!to_search.empty()) {
    std::vector<NodeId> queries;
    for (auto& [key, gk] : to_search) queries.push_back(key);
    const std::size_t qpc = queries_per_call_for(queries.size(), config_.chunk_size);
    const std::uint64_t s = start_search(now, queries, config_.protocol.bucket_size, qpc, op_id,
                                         static_cast<int>(Purpose::get));
    Search& search = *searches_by_id_.at(s);
    search.latest = latest;
    search.keys = std::move(to_search);
    if (config_.reuse_get_requests) {
      for (auto& [key, gk] : search.keys) searches_[key] = s;
    }
    pump(now, s);
    return;
  }
  maybe_finish_get(o);
}

void Node::offer_found(TimePoint now, Search& s, const NodeId& key, const pb::FindResult& r, const Contact& from) {
  if (r.type() != pb::FOUND_REGULAR && r.type() != pb::FOUND_DICTIONARY) return;
  const DhtTime t = dht_time(now);
  GetKey& gk = s.keys.at(key);
  const bool regular = r.type() == pb::FOUND_REGULAR;
  // Records that fail validation are not believed (treated as not found); of a
  // dictionary, only the entries that fail are dropped (a forged entry does not hide the
  // owners' ones).
  const auto met = s.book.find(from.id);
  const std::size_t hops = met != s.book.end() ? met->second.depth : 1;
  if (regular) {
    if (validator_ && !validator_->validate(DhtRecord{key.to_bytes(), k_subkey_regular, r.value(), r.expiration_time()})) {
      return;
    }
    if (r.expiration_time() < t) return;
    fold(t, gk.best, Candidate{r.value(), r.expiration_time(), from.id, hops});
    return;
  }
  auto dict = unpack_dictionary(r.value());
  if (!dict) return;
  if (validator_) {
    DictionaryValue kept;
    kept.raise_latest_expiration_time(dict->latest_expiration_time());
    for (auto& [subkey, entry] : dict->items(t)) {
      if (validator_->validate(DhtRecord{key.to_bytes(), subkey, entry.value, entry.expiration_time})) {
        (void)kept.store(t, subkey, std::move(entry.value), entry.expiration_time);
      }
    }
    dict = std::move(kept);
  }
  if (dict->size(t) == 0) return;
  fold(t, gk.best, Candidate{std::move(*dict), r.expiration_time(), from.id, hops});
}

void Node::on_get_found(TimePoint now, Search& s, const FinishedQuery& q) {
  auto k = s.keys.find(q.query);
  if (k == s.keys.end()) return;
  GetKey& gk = k->second;
  const DhtTime t = dht_time(now);
  std::optional<FoundValue> found;
  if (gk.best) found = to_found(t, q.query, *gk.best);
  if (gk.best && gk.best->source) {
    const Candidate& best = *gk.best;
    // Keep what the network had that we did not, and leave a copy on the nearest node that
    // lacked it (hivemind's cache_locally and cache_nearest).
    pb::StoreRequest push;
    push.add_keys(q.query.to_bytes());
    if (auto* regular = std::get_if<std::string>(&best.value)) {
      if (config_.cache_locally) protocol_.cache().store(t, q.query, *regular, best.expiration);
      push.add_subkeys(k_subkey_regular);
      push.add_values(*regular);
    } else {
      DictionaryValue dict = std::get<DictionaryValue>(best.value);
      if (config_.cache_locally) protocol_.cache().store_dictionary(t, q.query, dict);
      push.add_subkeys(k_subkey_dictionary);
      push.add_values(pack_dictionary(t, dict));
    }
    push.add_expiration_time(best.expiration);
    push.add_in_cache(true);
    *push.mutable_peer() = own_info();
    std::size_t pushed = 0;
    for (const NodeId& n : q.nearest) {
      if (pushed >= config_.cache_nearest) break;
      if (n == *best.source || n == id_self()) continue;
      call(s.book[n].peer, k_store_handle, push.SerializeAsString(), 0, static_cast<int>(CallKind::push));
      ++pushed;
    }
  }
  for (auto& [op_id, pos] : gk.waiters) {
    auto it = ops_.find(op_id);
    if (it == ops_.end()) continue;
    Op& op = *it->second;
    op.result.found[pos] = found;
    if (found && gk.best && gk.best->source) op.result.hops = std::max(op.result.hops, gk.best->hops);
    maybe_finish_get(op);
  }
  gk.waiters.clear();
  if (searches_.count(q.query) && searches_[q.query] == s.id) searches_.erase(q.query);
}

void Node::maybe_finish_get(Op& op) {
  if (op.remaining > 0 && --op.remaining > 0) return;
  end_op(op);
}

// ---- cache refresh ------------------------------------------------------------------------

void Node::schedule_refresh(TimePoint now, const NodeId& key, DhtTime expiration) {
  if (config_.cache_refresh_before_expiry <= 0) return;
  const DhtTime due = expiration - config_.cache_refresh_before_expiry;
  auto [it, fresh] = refresh_queue_.emplace(key, due);
  if (!fresh) return;  // already due earlier or at the same time
  (void)it;
  DhtTime first = k_infinity;
  for (auto& [k, when] : refresh_queue_) first = std::min(first, when);
  fx_.push_back(SetTimer{k_cache_refresh_timer, std::max(now, timer_at(first, dht_epoch_))});
}

void Node::run_refresh(TimePoint now) {
  const DhtTime t = dht_time(now);
  std::vector<NodeId> due;
  DhtTime newest = -k_infinity;
  for (auto it = refresh_queue_.begin(); it != refresh_queue_.end() && due.size() < config_.chunk_size;) {
    if (it->second > t) {
      ++it;
      continue;
    }
    due.push_back(it->first);
    newest = std::max(newest, it->second + config_.cache_refresh_before_expiry);
    it = refresh_queue_.erase(it);
  }
  if (!due.empty()) {
    ++stats_.cache_refreshes;
    // Only a value living longer than the cached one is worth fetching.
    start_get(now, next_internal_op_++, due, false, newest + config_.cache_refresh_before_expiry + 1, true);
  }
  if (!refresh_queue_.empty()) {
    DhtTime first = k_infinity;
    for (auto& [k, when] : refresh_queue_) first = std::min(first, when);
    fx_.push_back(SetTimer{k_cache_refresh_timer, std::max(now, timer_at(first, dht_epoch_))});
  }
}

}  // namespace apiary::core::dht
