// store_many: find each key's nearest nodes, then keep num_replicas of them holding it.
#include <algorithm>

#include "core/dht/msgpack_value.hpp"
#include "core/dht/node.hpp"
#include "core/dht/node_internal.hpp"

namespace apiary::core::dht {

std::size_t queries_per_call_for(std::size_t queries, std::size_t cap);

Effects Node::store(TimePoint now, OpId op_id, std::vector<StoreItem> items, bool exclude_self) {
  last_now_ = now;
  Op& o = add_op(op_id);
  o.kind = OpKind::store;
  o.result.stored.assign(items.size(), false);
  o.result.replicas.assign(items.size(), 0);
  o.exclude_self = exclude_self || config_.protocol.client_mode;
  std::vector<NodeId> keys;
  for (std::size_t i = 0; i < items.size(); ++i) {
    StoreKey& sk = o.store_keys[items[i].key];
    if (sk.items.empty()) keys.push_back(items[i].key);
    sk.items.push_back(i);
  }
  o.items = std::move(items);
  o.remaining = keys.size();
  if (keys.empty()) {
    end_op(o);
    return finish_input(now);
  }
  const std::size_t wide = config_.store_beam_size == 0 ? config_.protocol.bucket_size : config_.store_beam_size;
  const std::size_t beam = std::max(config_.protocol.num_replicas, wide);
  const std::uint64_t s = start_search(now, keys, beam, queries_per_call_for(keys.size(), keys.size()), op_id,
                                       static_cast<int>(Purpose::store));
  pump(now, s);
  return finish_input(now);
}

void Node::on_store_found(TimePoint now, Op& op, const NodeId& key, std::vector<Contact> nearest) {
  auto it = op.store_keys.find(key);
  if (it == op.store_keys.end() || it->second.found) return;
  StoreKey& sk = it->second;
  sk.found = true;
  if (!op.exclude_self) nearest.push_back(Contact{id_self(), self_addr()});
  std::sort(nearest.begin(), nearest.end(),
            [&](const Contact& a, const Contact& b) { return a.id.distance(key) < b.id.distance(key); });
  sk.candidates = std::move(nearest);
  // Sign each value once; a value that cannot be signed is stored nowhere.
  for (std::size_t i : sk.items) {
    const StoreItem& item = op.items[i];
    std::string value = item.value;
    if (validator_) {
      auto signed_value = validator_->sign_value(DhtRecord{key.to_bytes(), item.subkey, item.value, item.expiration});
      value = signed_value ? std::move(*signed_value) : std::string{};
      if (!signed_value) op.result.status = signed_value.error();
    }
    sk.values.push_back(std::move(value));
  }
  store_next(now, op, key);
}

void Node::store_next(TimePoint now, Op& op, const NodeId& key) {
  StoreKey& sk = op.store_keys[key];
  const std::size_t want = config_.protocol.num_replicas;
  while (sk.successes + sk.in_flight < want && sk.next < sk.candidates.size()) {
    const Contact c = sk.candidates[sk.next++];
    pb::StoreRequest req;
    *req.mutable_peer() = own_info();
    for (std::size_t j = 0; j < sk.items.size(); ++j) {
      const StoreItem& item = op.items[sk.items[j]];
      req.add_keys(key.to_bytes());
      req.add_subkeys(item.subkey);
      req.add_values(sk.values[j]);
      req.add_expiration_time(item.expiration);
      req.add_in_cache(false);
    }
    if (c.id == id_self()) {
      // This node is a replica: its own validator and storage decide, as for a peer.
      req.clear_peer();
      auto local = validator_ ? serve_store(dht_time(now), PeerAddr{}, req.SerializeAsString())
                              : protocol_.handle(dht_time(now), k_store_handle, PeerAddr{}, req.SerializeAsString());
      pb::StoreResponse r;
      if (local && r.ParseFromString(*local)) {
        ++sk.successes;
        for (int j = 0; j < r.store_ok_size() && static_cast<std::size_t>(j) < sk.items.size(); ++j) {
          if (r.store_ok(j)) ++op.result.replicas[sk.items[static_cast<std::size_t>(j)]];
        }
      }
      continue;
    }
    const CallId id = call(c.peer, k_store_handle, req.SerializeAsString(), op.id, static_cast<int>(CallKind::store));
    calls_[id]->node = c.id;
    calls_[id]->key = key;
    ++sk.in_flight;
  }
  if (sk.in_flight > 0 || sk.done) return;
  sk.done = true;
  if (config_.cache_on_store) {
    // Accepted regular values and subkeys also go to the own cache, so this node's next get
    // of the key is answered locally.
    const DhtTime t = dht_time(now);
    for (std::size_t j = 0; j < sk.items.size(); ++j) {
      const StoreItem& item = op.items[sk.items[j]];
      if (op.result.replicas[sk.items[j]] == 0 || sk.values[j].empty()) continue;
      if (item.subkey == k_subkey_regular) {
        protocol_.cache().store(t, key, sk.values[j], item.expiration);
      } else if (item.subkey != k_subkey_dictionary) {
        protocol_.cache().store_subkey(t, key, item.subkey, sk.values[j], item.expiration);
      }
    }
  }
  maybe_finish_store(op);
}

void Node::on_store_response(TimePoint now, PendingCall& pc, const Result<std::string>& response) {
  auto it = ops_.find(pc.op);
  if (it == ops_.end()) return;
  Op& op = *it->second;
  StoreKey& sk = op.store_keys[pc.key];
  --sk.in_flight;
  pb::StoreResponse r;
  if (response && r.ParseFromString(*response) && static_cast<std::size_t>(r.store_ok_size()) == sk.items.size()) {
    note_sender(now, r.peer(), pc.peer);
    ++sk.successes;
    for (std::size_t j = 0; j < sk.items.size(); ++j) {
      if (r.store_ok(static_cast<int>(j))) ++op.result.replicas[sk.items[j]];
    }
  }
  store_next(now, op, pc.key);
}

void Node::maybe_finish_store(Op& op) {
  if (--op.remaining != 0) return;
  for (std::size_t i = 0; i < op.items.size(); ++i) op.result.stored[i] = op.result.replicas[i] > 0;
  end_op(op);
}

}  // namespace apiary::core::dht
