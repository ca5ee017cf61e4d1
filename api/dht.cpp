#include "api/dht.hpp"

#include <mutex>

#include <chrono>
#include <random>

#include <caf/all.hpp>

#include "actors/dht/dht_actor.hpp"
#include "actors/gateway.hpp"
#include "actors/type_ids.hpp"
#include "api/startup.hpp"
#include "core/dht/msgpack_value.hpp"
#include "messages/identity/key_file.hpp"

namespace apiary {

using core::dht::FoundValue;
using core::dht::Node;
using core::dht::OpId;
using core::dht::OpResult;

// ---- DhtKey ----

DhtKey DhtKey::str(std::string_view text) {
  auto packed = core::dht::pack_str(text);
  const auto id = core::dht::NodeId::of_packed_key(packed);
  return DhtKey(id, std::move(packed));
}

DhtKey DhtKey::bytes(std::string_view raw) {
  return DhtKey(core::dht::NodeId::of_bytes_key(raw), core::dht::pack_bin(raw));
}

Result<DhtKey> DhtKey::packed(std::string packed) {
  if (auto ok = core::dht::check_packed(packed); !ok) {
    return make_error(errc::invalid_argument, "a DHT key must be exactly one msgpack object: {}",
                      ok.error().message);
  }
  const auto id = core::dht::NodeId::of_packed_key(packed);
  return DhtKey(id, std::move(packed));
}

// ---- Dht ----

struct Dht::Impl {
  actors::RoleHost dht;
  /// Guards `dht` against stop() on another thread (operations may come from any thread).
  mutable std::mutex mutex;
  [[nodiscard]] actors::RoleHost current() const {
    std::lock_guard<std::mutex> lock(mutex);
    return dht;
  }
};

const actors::RoleHost& Dht::host() const { return impl_->dht; }

namespace {

using StartFn = std::function<core::Effects(Node&, core::TimePoint, OpId)>;

/// A future that is already ready with `error`.
template <class T>
std::future<Result<T>> failed_future(Error error) {
  std::promise<Result<T>> p;
  p.set_value(std::move(error));
  return p.get_future();
}

/// Starts an operation on `dht`; its OpResult, when ok, becomes a T through `convert`.
template <class T, class Convert>
std::future<Result<T>> run_op(const actors::RoleHost& dht, StartFn start, Convert convert) {
  if (!dht) return failed_future<T>(make_error(errc::cancelled, "the DHT node is stopped; start a new one"));
  auto promise = std::make_shared<std::promise<Result<T>>>();
  auto future = promise->get_future();
  actors::submit_dht_op(dht, std::move(start), [promise, convert = std::move(convert)](OpResult r) {
    if (!r.status) {
      promise->set_value(r.status.error());
    } else {
      promise->set_value(convert(std::move(r)));
    }
  });
  return future;
}

core::dht::StoreItem item_of(const DhtKey& key, std::string value, double expiration,
                             const std::optional<DhtKey>& subkey) {
  return core::dht::StoreItem{key.id(), subkey ? subkey->packed() : core::dht::k_subkey_regular, std::move(value),
                              expiration};
}

}  // namespace

Dht::Dht() = default;

Result<std::unique_ptr<Dht>> Dht::start(const DhtOptions& options) {
  const api::CafThreadRelease released;
  std::unique_ptr<Runtime> runtime;
  if (options.gateway) {
    // Another node's gateway: this node has its own identity and is addressed by it.
    if (options.system == nullptr) {
      return make_error(errc::invalid_argument, "DhtOptions::gateway needs DhtOptions::system, its actor system");
    }
    auto rt = Runtime::attach(*options.system, options.gateway, options.identity_file, options.authorization);
    if (!rt) return rt.error();
    runtime = std::move(*rt);
  } else {
    RuntimeOptions ro = api::runtime_options_of(options);
    ro.system = options.system;
    ro.busy_poll = options.busy_poll;
    ro.relay_service = options.relay_service;
    ro.relay_limits = options.relay_limits;
    auto rt = Runtime::start(ro);
    if (!rt) return rt.error();
    runtime = std::move(*rt);
  }
  auto dht = start(*runtime, options);
  if (!dht) return dht.error();
  (*dht)->own_runtime_ = std::move(runtime);
  return dht;
}

Result<std::unique_ptr<Dht>> Dht::start(Runtime& runtime, const DhtOptions& options) {
  const api::CafThreadRelease released;
  std::vector<core::PeerAddr> initial_peers;
  for (const auto& p : options.initial_peers) {
    auto m = core::PeerAddr::parse(p);
    if (!m) return make_error(errc::invalid_argument, "initial peer '{}': {}", p, m.error().message);
    initial_peers.push_back(std::move(*m));
  }
  core::dht::NodeConfig node_config = options.node;
  node_config.protocol.client_mode = node_config.protocol.client_mode || options.client_mode;
  if (auto ok = core::dht::validate(node_config); !ok) {
    return make_error(errc::invalid_argument, "DHT node config: {}", ok.error().message);
  }

  std::unique_ptr<Dht> dht(new Dht());
  dht->runtime_ = &runtime;
  dht->client_ = node_config.protocol.client_mode;

  // A random DHT id, as hivemind's DHTID.generate(); the core never draws randomness itself.
  std::random_device entropy;
  std::mt19937_64 rng((std::uint64_t{entropy()} << 32) ^ entropy());
  dht->node_id_ = core::dht::NodeId::random(rng);

  actors::DhtActorConfig ac;
  ac.id = dht->node_id_;
  ac.self_addr = dht->client_ ? core::PeerAddr{} : core::PeerAddr(runtime.address());
  ac.node = node_config;
  ac.validator = options.validator;
  ac.peer_id = runtime.peer_id();
  ac.shared_gateway = runtime.shares_gateway();
  ac.dht_epoch = runtime.dht_epoch();
  ac.host = options.host;
  dht->impl_ = std::make_unique<Impl>();
  dht->impl_->dht = actors::spawn_dht_actor(runtime.system(), runtime.gateway(), std::move(ac));

  // Bootstrap: the node pings the initial peers and looks itself up; it ends on its own
  // (every call has a deadline), the wait below only guards against a stuck actor.
  auto boot = actors::submit_dht_op(dht->impl_->dht, [initial_peers](Node& n, core::TimePoint now, OpId op) {
    return n.start(now, op, initial_peers);
  });
  const auto patience = std::chrono::duration_cast<std::chrono::milliseconds>(node_config.wait_timeout) * 20 +
                        std::chrono::seconds(10);
  if (boot.wait_for(patience) != std::future_status::ready) {
    dht->stop();
    return make_error(errc::deadline_exceeded, "DHT bootstrap from {} did not finish within {} ms",
                      fmt::join(options.initial_peers, ", "), patience.count());
  }
  auto result = boot.get();
  if (!result.status) {
    dht->stop();
    if (options.auto_relay && !dht->client_ && result.not_called_back > 0) {
      return start_relayed(runtime, options, initial_peers, result.status.error());
    }
    return result.status.error();
  }
  return dht;
}

Result<std::unique_ptr<Dht>> Dht::start_relayed(Runtime& runtime, const DhtOptions& options,
                                                const std::vector<core::PeerAddr>& relays, const Error& unreachable) {
  // Behind NAT: the initial peers answered but could not call this node back. Reached
  // through the first of them that keeps a slot for it, it bootstraps again.
  std::string refusals;
  for (const core::PeerAddr& relay : relays) {
    auto st = runtime.reach_through(relay.parts(), std::chrono::seconds(10));
    if (st) {
      DhtOptions again = options;
      again.auto_relay = false;
      return start(runtime, again);
    }
    refusals += fmt::format("{}{}: {}", refusals.empty() ? "" : "; ", relay, st.error().message);
  }
  return make_error(errc::unavailable, "{}; and no initial peer keeps a relay slot for this node ({}): start one "
                    "of them with --relay-service", unreachable.message, refusals);
}

Dht::~Dht() { stop(); }

std::future<Result<bool>> Dht::store(const DhtKey& key, std::string value, double expiration,
                                     std::optional<DhtKey> subkey) {
  std::vector<core::dht::StoreItem> items{item_of(key, std::move(value), expiration, subkey)};
  return run_op<bool>(
      impl_ ? impl_->current() : actors::RoleHost{},
      [items = std::move(items)](Node& n, core::TimePoint now, OpId op) { return n.store(now, op, items); },
      [](OpResult r) -> Result<bool> { return !r.stored.empty() && r.stored.front(); });
}

std::future<Result<std::vector<DhtStored>>> Dht::store_many(std::vector<DhtStoreItem> items) {
  std::vector<core::dht::StoreItem> records;
  records.reserve(items.size());
  for (auto& i : items) records.push_back(item_of(i.key, std::move(i.value), i.expiration, i.subkey));
  return store_records(std::move(records));
}

std::future<Result<std::vector<DhtStored>>> Dht::store_records(std::vector<core::dht::StoreItem> records) {
  return run_op<std::vector<DhtStored>>(
      impl_ ? impl_->current() : actors::RoleHost{},
      [records = std::move(records)](Node& n, core::TimePoint now, OpId op) { return n.store(now, op, records); },
      [](OpResult r) -> Result<std::vector<DhtStored>> {
        std::vector<DhtStored> out(r.stored.size());
        for (std::size_t i = 0; i < out.size(); ++i) {
          out[i].ok = r.stored[i];
          out[i].replicas = i < r.replicas.size() ? r.replicas[i] : 0;
        }
        return out;
      });
}

std::future<Result<std::optional<FoundValue>>> Dht::get(const DhtKey& key, bool latest) {
  std::vector<core::dht::NodeId> keys{key.id()};
  return run_op<std::optional<FoundValue>>(
      impl_ ? impl_->current() : actors::RoleHost{},
      [keys, latest](Node& n, core::TimePoint now, OpId op) { return n.get(now, op, keys, latest); },
      [](OpResult r) -> Result<std::optional<FoundValue>> {
        if (r.found.empty()) return std::optional<FoundValue>{};
        return std::move(r.found.front());
      });
}

std::future<Result<std::vector<std::optional<FoundValue>>>> Dht::get_many(const std::vector<DhtKey>& keys,
                                                                          bool latest) {
  std::vector<core::dht::NodeId> ids;
  ids.reserve(keys.size());
  for (const auto& k : keys) ids.push_back(k.id());
  return run_op<std::vector<std::optional<FoundValue>>>(
      impl_ ? impl_->current() : actors::RoleHost{},
      [ids = std::move(ids), latest](Node& n, core::TimePoint now, OpId op) { return n.get(now, op, ids, latest); },
      [](OpResult r) -> Result<std::vector<std::optional<FoundValue>>> { return std::move(r.found); });
}

std::future<Result<std::vector<core::dht::Contact>>> Dht::find_nearest(const core::dht::NodeId& id, std::size_t k,
                                                                       bool exclude_self) {
  return run_op<std::vector<core::dht::Contact>>(
      impl_ ? impl_->current() : actors::RoleHost{},
      [id, k, exclude_self](Node& n, core::TimePoint now, OpId op) {
        return n.find_nearest(now, op, {id}, k, exclude_self);
      },
      [](OpResult r) -> Result<std::vector<core::dht::Contact>> {
        if (r.nearest.empty()) return std::vector<core::dht::Contact>{};
        return std::move(r.nearest.front());
      });
}

std::vector<std::string> Dht::visible_addrs() const {
  if (client_) return {};
  return {runtime_->address().to_string()};
}

double Dht::now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Result<DhtStats> Dht::stats() {
  const actors::RoleHost node = impl_ ? impl_->current() : actors::RoleHost{};
  if (!node) return make_error(errc::cancelled, "the DHT node is stopped");
  return actors::look_at_dht<DhtStats>(node, [](Node& n, core::TimePoint now) {
    DhtStats s;
    const double t = n.dht_time(now);
    s.node = n.stats();
    s.routing_table = n.routing_table().size();
    s.stored_keys = n.protocol().storage().size(t);
    s.cached_keys = n.protocol().cache().size(t);
    s.blacklisted = n.blacklist().size();
    s.pending_ops = n.pending_ops();
    return s;
  });
}

Result<bool> Dht::stores_locally(const DhtKey& key) {
  const actors::RoleHost node = impl_ ? impl_->current() : actors::RoleHost{};
  if (!node) return make_error(errc::cancelled, "the DHT node is stopped");
  const auto id = key.id();
  return actors::look_at_dht<bool>(
      node, [id](Node& n, core::TimePoint now) { return n.protocol().storage().contains(n.dht_time(now), id); });
}

Status Dht::add_validators(std::vector<std::unique_ptr<core::dht::RecordValidator>> validators) {
  const actors::RoleHost node = impl_ ? impl_->current() : actors::RoleHost{};
  if (!node) return make_error(errc::cancelled, "the DHT node is stopped");
  auto held = std::make_shared<std::vector<std::unique_ptr<core::dht::RecordValidator>>>(std::move(validators));
  auto added = actors::look_at_dht<bool>(node, [held](Node& n, core::TimePoint) {
    for (auto& v : *held) n.add_validator(std::move(v));
    return true;
  });
  if (!added) return added.error();
  return ok_status();
}

Result<std::size_t> Dht::blacklist_failures(const std::string& peer) {
  const actors::RoleHost node = impl_ ? impl_->current() : actors::RoleHost{};
  if (!node) return make_error(errc::cancelled, "the DHT node is stopped");
  auto addr = core::PeerAddr::parse(peer);
  if (!addr) return make_error(errc::invalid_argument, "blacklist_failures: {}", addr.error().message);
  return actors::look_at_dht<std::size_t>(
      node, [a = std::move(*addr)](Node& n, core::TimePoint) { return n.blacklist().failures(a); });
}

void Dht::stop() {
  actors::RoleHost node;
  if (impl_) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    std::swap(node, impl_->dht);
  }
  if (node) actors::stop_dht_actor(*runtime_->gateway(), node, runtime_->peer_id(), runtime_->shares_gateway());
  if (own_runtime_) own_runtime_->stop();
}

}  // namespace apiary
