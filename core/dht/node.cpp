#include "core/dht/node.hpp"

#include "core/rng.hpp"

#include <algorithm>

#include "core/dht/msgpack_value.hpp"
#include "core/dht/node_internal.hpp"

namespace apiary::core::dht {

/// Largest gap between a peer's clock and ours a validating ping accepts (seconds).
constexpr double k_max_clock_discrepancy = 3.0;

Status validate(const NodeConfig& c) {
  if (auto st = validate(c.protocol); !st) return st;
  if (c.num_workers == 0) return make_error(errc::invalid_argument, "NodeConfig.num_workers is 0; use 1 or more");
  if (c.chunk_size == 0) return make_error(errc::invalid_argument, "NodeConfig.chunk_size is 0; use 1 or more");
  if (c.wait_timeout <= Duration::zero()) {
    return make_error(errc::invalid_argument, "NodeConfig.wait_timeout must be > 0");
  }
  if (!(c.blacklist_time > 0) || !(c.backoff_rate >= 1)) {
    return make_error(errc::invalid_argument,
                      "NodeConfig: blacklist_time must be > 0 and backoff_rate >= 1, got {} and {}",
                      c.blacklist_time, c.backoff_rate);
  }
  if (c.refresh_timeout && *c.refresh_timeout <= Duration::zero()) {
    return make_error(errc::invalid_argument, "NodeConfig.refresh_timeout must be > 0 when given");
  }
  return ok_status();
}

Node::Node(NodeId id, PeerAddr self_addr, NodeConfig config, std::shared_ptr<RecordValidator> validator,
           double dht_epoch)
    : config_(std::move(config)),
      validator_(std::move(validator)),
      dht_epoch_(dht_epoch),
      protocol_(id, config_.protocol.client_mode ? PeerAddr{} : std::move(self_addr), config_.protocol),
      blacklist_(config_.blacklist_time, config_.backoff_rate),
      rng_state_(config_.seed),
      address_book_(config_.address_book ? config_.address_book : std::make_shared<messages::AddressBook>()) {}

Node::~Node() = default;

Effects Node::flush() {
  Effects out;
  out.swap(fx_);
  return out;
}

namespace {

/// A validator the node shares with whoever gave it (it cannot be taken apart to merge).
class SharedValidator final : public RecordValidator {
 public:
  explicit SharedValidator(std::shared_ptr<RecordValidator> held) : held_(std::move(held)) {}
  [[nodiscard]] bool validate(const DhtRecord& r) const override { return held_->validate(r); }
  [[nodiscard]] Result<std::string> sign_value(const DhtRecord& r) const override { return held_->sign_value(r); }
  [[nodiscard]] std::string strip_value(const DhtRecord& r) const override { return held_->strip_value(r); }
  [[nodiscard]] int priority() const override { return held_->priority(); }

 private:
  std::shared_ptr<RecordValidator> held_;
};

}  // namespace

void Node::add_validator(std::unique_ptr<RecordValidator> validator) {
  if (!validator) return;
  auto composite = std::dynamic_pointer_cast<CompositeValidator>(validator_);
  if (!composite) {
    composite = std::make_shared<CompositeValidator>();
    if (validator_) composite->extend(std::make_unique<SharedValidator>(std::move(validator_)));
    validator_ = composite;
  }
  composite->extend(std::move(validator));
}

std::vector<OpResult> Node::take_completed() {
  std::vector<OpResult> out;
  out.swap(completed_);
  return out;
}

pb::NodeInfo Node::own_info() const { return protocol_.node_info(); }

CallId Node::call(const PeerAddr& peer, const char* handle, const std::string& request, OpId op, int kind) {
  const CallId id = next_call_++;
  auto pc = std::make_unique<PendingCall>();
  pc->kind = static_cast<CallKind>(kind);
  pc->peer = peer;
  pc->op = op;
  pc->handle = handle;
  calls_[id] = std::move(pc);
  fx_.push_back(unary_call(id, peer, handle, request, config_.wait_timeout));
  ++stats_.calls;
  if (auto it = ops_.find(op); it != ops_.end()) ++it->second->result.requests;
  return id;
}

void Node::complete(OpResult result) { completed_.push_back(std::move(result)); }

Node::Op& Node::add_op(OpId id) {
  auto op = std::make_unique<Op>();
  op->id = id;
  op->result.op = id;
  Op& o = *op;
  ops_[id] = std::move(op);
  return o;
}

void Node::end_op(Op& op) {
  if (!op.internal) complete(std::move(op.result));
  ops_.erase(op.id);
}

// ---- routing-table upkeep -------------------------------------------------------------

void Node::note_sender(TimePoint now, const pb::NodeInfo& info, const PeerAddr& peer) {
  auto id = NodeId::from_bytes(info.node_id());
  if (!id || peer.empty() || *id == id_self()) return;
  blacklist_.clear(peer);
  if (!routing_table().contains(*id)) replicate_to(now, Contact{*id, peer});
  if (auto evict = routing_table().add_or_update(from_seconds(dht_time(now)), *id, peer)) {
    pb::PingRequest ping;
    *ping.mutable_peer() = own_info();
    const CallId c = call(evict->peer, k_ping_handle, ping.SerializeAsString(), 0,
                          static_cast<int>(CallKind::evict_ping));
    calls_[c]->node = evict->id;
  }
}

void Node::handle_routing_events(TimePoint now) {
  RoutingEvents events = protocol_.take_routing_events();
  for (const Contact& c : events.joined) replicate_to(now, c);
  for (const Contact& c : events.to_ping) {
    pb::PingRequest ping;
    *ping.mutable_peer() = own_info();
    const CallId id = call(c.peer, k_ping_handle, ping.SerializeAsString(), 0, static_cast<int>(CallKind::evict_ping));
    calls_[id]->node = c.id;
  }
}

void Node::replicate_to(TimePoint now, const Contact& newcomer) {
  // Kademlia's join rule (hivemind's update_routing_table): push a stored key to a new node
  // nearer to it than our num_replicas-th neighbor, while we are nearer than our nearest.
  const DhtTime t = dht_time(now);
  pb::StoreRequest req;
  protocol_.storage().for_each(t, [&](const NodeId& key, ValueWithExpiration<StoredValue>& stored) {
    auto neighbors = routing_table().nearest(key, config_.protocol.num_replicas, newcomer.id);
    bool push = neighbors.empty();
    if (!push) {
      const NodeId nearest = neighbors.front().id.distance(key);
      const NodeId farthest = neighbors.back().id.distance(key);
      push = newcomer.id.distance(key) < farthest && id_self().distance(key) < nearest;
    }
    if (!push) return;
    req.add_keys(key.to_bytes());
    if (auto* regular = std::get_if<std::string>(&stored.value)) {
      req.add_subkeys(k_subkey_regular);
      req.add_values(*regular);
    } else {
      req.add_subkeys(k_subkey_dictionary);
      req.add_values(pack_dictionary(t, std::get<DictionaryValue>(stored.value)));
    }
    req.add_expiration_time(stored.expiration_time);
    req.add_in_cache(false);
  });
  if (req.keys_size() == 0) return;
  *req.mutable_peer() = own_info();
  call(newcomer.peer, k_store_handle, req.SerializeAsString(), 0, static_cast<int>(CallKind::push));
  ++stats_.replications;
}

// ---- serving ---------------------------------------------------------------------------

Effects Node::on_request(TimePoint now, RequestId id, const std::string& handle, const PeerAddr& from,
                         const std::string& body) {
  last_now_ = now;
  const DhtTime t = dht_time(now);
  ++stats_.requests_served;
  pb::PingRequest ping;
  if (handle == k_ping_handle && !from.empty() && !config_.protocol.client_mode && ping.ParseFromString(body) &&
      ping.validate()) {
    if (auto sender = NodeId::from_bytes(ping.peer().node_id())) {
      // Call the sender back before answering: `available` says whether that worked.
      pb::PingRequest back;
      *back.mutable_peer() = own_info();
      const CallId c = call(from, k_ping_handle, back.SerializeAsString(), 0, static_cast<int>(CallKind::validate_ping));
      calls_[c]->held_request = id;
      calls_[c]->sender = *sender;
      held_pings_[id] = std::make_pair(from, body);
      return finish_input(now);
    }
  }
  fx_.push_back(Reply{id, serve(t, handle, from, body)});
  return finish_input(now);
}

Result<std::string> Node::serve(DhtTime t, const std::string& handle, const PeerAddr& from, const std::string& body) {
  if (handle == k_store_handle && validator_) return serve_store(t, from, body);
  return protocol_.handle(t, handle, from, body);
}

Effects Node::finish_input(TimePoint now) {
  handle_routing_events(now);
  return flush();
}

bool Node::valid_record(DhtTime t, const DhtRecord& record) const {
  if (!validator_) return true;
  if (record.subkey != k_subkey_dictionary) return validator_->validate(record);
  // A whole dictionary is valid when each entry is, as its own record (hivemind's
  // _validate_dictionary): signatures and schemas are per subkey.
  auto dict = unpack_dictionary(record.value);
  if (!dict) return false;
  for (const auto& [subkey, entry] : dict->items(t)) {
    if (!validator_->validate(DhtRecord{record.key, subkey, entry.value, entry.expiration_time})) return false;
  }
  return true;
}

Result<std::string> Node::serve_store(DhtTime t, const PeerAddr& from, const std::string& body) {
  pb::StoreRequest req;
  if (!req.ParseFromString(body)) {
    return make_error(errc::malformed, "StoreRequest: {} bytes that do not parse; send a serialized "
                                       "apiary.pb.StoreRequest", body.size());
  }
  const int n = req.keys_size();
  if (req.subkeys_size() != n || req.values_size() != n || req.expiration_time_size() != n ||
      req.in_cache_size() != n) {
    return protocol_.handle(t, k_store_handle, from, body);  // the servicer names the mismatch
  }
  // Records the validator rejects are answered false and never reach the storage.
  pb::StoreRequest accepted;
  *accepted.mutable_peer() = req.peer();
  std::vector<int> position(static_cast<std::size_t>(n), -1);
  for (int i = 0; i < n; ++i) {
    if (!valid_record(t, DhtRecord{req.keys(i), req.subkeys(i), req.values(i), req.expiration_time(i)})) continue;
    position[static_cast<std::size_t>(i)] = accepted.keys_size();
    accepted.add_keys(req.keys(i));
    accepted.add_subkeys(req.subkeys(i));
    accepted.add_values(req.values(i));
    accepted.add_expiration_time(req.expiration_time(i));
    accepted.add_in_cache(req.in_cache(i));
  }
  auto served = protocol_.store(t, from, accepted);
  if (!served) return served.error();
  pb::StoreResponse response;
  *response.mutable_peer() = served->peer();
  for (int i = 0; i < n; ++i) {
    const int p = position[static_cast<std::size_t>(i)];
    response.add_store_ok(p >= 0 && served->store_ok(p));
  }
  return response.SerializeAsString();
}

// ---- outcomes of calls ---------------------------------------------------------------------

Effects Node::on_response(TimePoint now, CallId id, const Result<std::string>& raw) {
  last_now_ = now;
  auto it = calls_.find(id);
  if (it == calls_.end()) return flush();
  std::unique_ptr<PendingCall> pc = std::move(it->second);
  calls_.erase(it);
  const Result<std::string>& response = raw;
  if (!response) {
    ++stats_.failed_calls;
    // A peer that does not answer leaves the routing table (hivemind does the same).
    if (pc->node) routing_table().remove(*pc->node);
    else if (auto known = routing_table().node_of(pc->peer)) routing_table().remove(*known);
  }
  switch (pc->kind) {
    case CallKind::bootstrap_ping:
    case CallKind::evict_ping:
    case CallKind::validate_ping:
      on_ping_response(now, *pc, response);
      break;
    case CallKind::find:
      on_find_response(now, *pc, response);
      break;
    case CallKind::store:
      on_store_response(now, *pc, response);
      break;
    case CallKind::push:
      if (response) {
        pb::StoreResponse r;
        if (r.ParseFromString(*response)) note_sender(now, r.peer(), pc->peer);
      }
      break;
  }
  return finish_input(now);
}

void Node::on_ping_response(TimePoint now, PendingCall& pc, const Result<std::string>& response) {
  pb::PingResponse r;
  const bool parsed = response && r.ParseFromString(*response);
  if (parsed) note_sender(now, r.peer(), pc.peer);
  if (pc.kind == CallKind::validate_ping) {
    auto held = held_pings_.find(pc.held_request);
    if (held == held_pings_.end()) return;
    auto [from, body] = std::move(held->second);
    held_pings_.erase(held);
    pb::PingRequest ping;
    ping.ParseFromString(body);
    auto answer = protocol_.ping(dht_time(now), from, ping);
    if (!answer) {
      fx_.push_back(Reply{pc.held_request, answer.error()});
    } else {
      answer->set_available(parsed && r.peer().node_id() == pc.sender.to_bytes());
      fx_.push_back(Reply{pc.held_request, answer->SerializeAsString()});
    }
    return;
  }
  if (pc.kind != CallKind::bootstrap_ping) return;
  auto op_it = ops_.find(pc.op);
  if (op_it == ops_.end()) return;
  Op& op = *op_it->second;
  std::string why;
  if (!response) {
    why = response.error().message;
  } else if (!parsed) {
    why = "its answer is not a PingResponse";
  } else if (r.dht_time() != 0 && (r.dht_time() < pc.sent_at - k_max_clock_discrepancy ||
                                   r.dht_time() > dht_time(now) + k_max_clock_discrepancy)) {
    why = fmt::format("its clock is {:.1f} s off ours (at most {} s allowed); synchronize the clocks",
                      r.dht_time() - dht_time(now), k_max_clock_discrepancy);
  } else if (!config_.protocol.client_mode && !r.available()) {
    why = "it could not call us back; check that our listen address is reachable from it, or reach it through "
          "a relay (--auto-relay)";
    ++op.result.not_called_back;
  } else if (NodeId::from_bytes(r.peer().node_id())) {
    ++op.answered;
  } else {
    why = "it runs in client mode and serves nothing";
  }
  if (!why.empty()) op.failures += fmt::format("{}{}: {}", op.failures.empty() ? "" : "; ", pc.peer, why);
  if (--op.remaining == 0) bootstrap_pinged(now, op);
}

// ---- bootstrap --------------------------------------------------------------------------

Effects Node::start(TimePoint now, OpId op_id, const std::vector<PeerAddr>& initial_peers) {
  last_now_ = now;
  Op& o = add_op(op_id);
  o.kind = OpKind::bootstrap;
  o.initial = initial_peers;
  if (config_.refresh_timeout) fx_.push_back(SetTimer{k_bucket_refresh_timer, now + *config_.refresh_timeout});
  if (initial_peers.empty()) {
    end_op(o);
    return flush();
  }
  o.remaining = initial_peers.size();
  for (const PeerAddr& peer : initial_peers) {
    pb::PingRequest ping;
    *ping.mutable_peer() = own_info();
    ping.set_validate(true);
    const CallId c = call(peer, k_ping_handle, ping.SerializeAsString(), op_id,
                          static_cast<int>(CallKind::bootstrap_ping));
    if (auto it = calls_.find(c); it != calls_.end()) it->second->sent_at = dht_time(now);
  }
  return finish_input(now);
}

void Node::bootstrap_pinged(TimePoint now, Op& op) {
  if (op.answered == 0 && config_.ensure_bootstrap_success) {
    op.result.status = make_error(errc::unavailable,
                                  "DHT bootstrap failed: none of the {} initial peers answered a ping ({}); "
                                  "check that they run and are reachable",
                                  op.initial.size(), op.failures);
    end_op(op);
    return;
  }
  // Look ourselves up: fills the routing table, and closer nodes push us their keys.
  op.remaining = 1;
  pump(now, start_search(now, {id_self()}, config_.protocol.bucket_size, 1, op.id,
                         static_cast<int>(Purpose::bootstrap)));
}

// ---- timers ---------------------------------------------------------------------------------

Effects Node::on_timer(TimePoint now, TimerId id) {
  last_now_ = now;
  if (id == k_cache_refresh_timer) run_refresh(now);
  if (id == k_bucket_refresh_timer) refresh_buckets(now);
  return finish_input(now);
}

void Node::refresh_buckets(TimePoint now) {
  const Duration every = *config_.refresh_timeout;
  std::vector<NodeId> queries;
  for (std::size_t b : routing_table().buckets_updated_before(from_seconds(dht_time(now)) - every)) {
    queries.push_back(routing_table().buckets()[b].random_id([this] { return next_random(); }));
  }
  if (!queries.empty()) {
    const OpId op = next_internal_op_++;
    start_find(now, op, queries, config_.protocol.bucket_size, true, true);
  }
  fx_.push_back(SetTimer{k_bucket_refresh_timer, now + every});
}

std::uint64_t Node::next_random() {
  // splitmix64: small, seedable, and enough for picking ids in a bucket.
  return splitmix64_next(rng_state_);
}

}  // namespace apiary::core::dht
