#include "api/dht.hpp"

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
  caf::actor dht;
};

const caf::actor& Dht::actor() const { return impl_->dht; }

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
std::future<Result<T>> run_op(const caf::actor& dht, StartFn start, Convert convert) {
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
  auto listen = messages::Multiaddr::parse(options.listen);
  if (!listen) return make_error(errc::invalid_argument, "--listen: {}", listen.error().message);
  std::vector<core::PeerAddr> initial_peers;
  for (const auto& p : options.initial_peers) {
    auto m = messages::Multiaddr::parse(p);
    if (!m) return make_error(errc::invalid_argument, "initial peer '{}': {}", p, m.error().message);
    initial_peers.push_back(m->to_string());
  }
  core::dht::NodeConfig node_config = options.node;
  node_config.protocol.client_mode = node_config.protocol.client_mode || options.client_mode;
  if (auto ok = core::dht::validate(node_config); !ok) {
    return make_error(errc::invalid_argument, "DHT node config: {}", ok.error().message);
  }
  auto key = api::load_identity(options.identity_file);
  if (!key) return key.error();

  std::unique_ptr<Dht> dht(new Dht());
  dht->client_ = node_config.protocol.client_mode;
  dht->peer_id_ = messages::PeerId::from_public_key(key->public_key());
  if (options.system != nullptr) {
    dht->system_ = options.system;
  } else {
    dht->config_ = api::node_actor_system_config(options.threads);
    dht->own_system_ = std::make_unique<caf::actor_system>(*dht->config_);
    dht->system_ = dht->own_system_.get();
  }

  if (options.gateway) {
    dht->gateway_ = options.gateway;
    dht->shared_gateway_ = true;
  } else {
    actors::GatewayConfig gc;
    gc.transport.mode = options.mode;
    gc.transport.busy_poll = options.busy_poll;
    gc.transport.peer_id = dht->peer_id_.bytes();
    gc.host = listen->host;
    gc.port = listen->port;
    auto gw = actors::Gateway::start(*dht->system_, gc);
    if (!gw) return gw.error();
    dht->gateway_ = *gw;
  }
  const auto& bound_text = dht->gateway_->address();
  const auto colon = bound_text.rfind(':');
  const auto port = static_cast<std::uint16_t>(std::stoi(bound_text.substr(colon + 1)));
  std::string bound_host = bound_text.substr(0, colon);
  if (bound_host.size() >= 2 && bound_host.front() == '[') bound_host = bound_host.substr(1, bound_host.size() - 2);
  auto bound = messages::Multiaddr::from_ip(bound_host, port, dht->peer_id_);
  if (!bound) return bound.error();
  dht->address_ = *bound;

  // A random DHT id, as hivemind's DHTID.generate(); the core never draws randomness itself.
  std::random_device entropy;
  std::mt19937_64 rng((std::uint64_t{entropy()} << 32) ^ entropy());
  dht->node_id_ = core::dht::NodeId::random(rng);

  actors::DhtActorConfig ac;
  ac.id = dht->node_id_;
  ac.self_addr = dht->client_ ? core::PeerAddr{} : dht->address_.to_string();
  ac.node = node_config;
  ac.validator = options.validator;
  ac.authorizer = options.authorizer;
  ac.peer_id = dht->peer_id_;
  ac.shared_gateway = dht->shared_gateway_;
  dht->impl_ = std::make_unique<Impl>();
  dht->impl_->dht = actors::spawn_dht_actor(*dht->system_, dht->gateway_, std::move(ac));

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
    return result.status.error();
  }
  return dht;
}

Dht::~Dht() { stop(); }

std::future<Result<bool>> Dht::store(const DhtKey& key, std::string value, double expiration,
                                     std::optional<DhtKey> subkey) {
  std::vector<core::dht::StoreItem> items{item_of(key, std::move(value), expiration, subkey)};
  return run_op<bool>(
      impl_ ? impl_->dht : caf::actor{},
      [items = std::move(items)](Node& n, core::TimePoint now, OpId op) { return n.store(now, op, items); },
      [](OpResult r) -> Result<bool> { return !r.stored.empty() && r.stored.front(); });
}

std::future<Result<std::vector<DhtStored>>> Dht::store_many(std::vector<DhtStoreItem> items) {
  std::vector<core::dht::StoreItem> records;
  records.reserve(items.size());
  for (auto& i : items) records.push_back(item_of(i.key, std::move(i.value), i.expiration, i.subkey));
  return run_op<std::vector<DhtStored>>(
      impl_ ? impl_->dht : caf::actor{},
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
      impl_ ? impl_->dht : caf::actor{},
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
      impl_ ? impl_->dht : caf::actor{},
      [ids = std::move(ids), latest](Node& n, core::TimePoint now, OpId op) { return n.get(now, op, ids, latest); },
      [](OpResult r) -> Result<std::vector<std::optional<FoundValue>>> { return std::move(r.found); });
}

std::future<Result<std::vector<core::dht::Contact>>> Dht::find_nearest(const core::dht::NodeId& id, std::size_t k,
                                                                       bool exclude_self) {
  return run_op<std::vector<core::dht::Contact>>(
      impl_ ? impl_->dht : caf::actor{},
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
  return {address_.to_string()};
}

double Dht::now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Result<DhtStats> Dht::stats() {
  if (!impl_ || !impl_->dht) return make_error(errc::cancelled, "the DHT node is stopped");
  return actors::look_at_dht<DhtStats>(impl_->dht, [](Node& n, core::TimePoint now) {
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
  if (!impl_ || !impl_->dht) return make_error(errc::cancelled, "the DHT node is stopped");
  const auto id = key.id();
  return actors::look_at_dht<bool>(
      impl_->dht, [id](Node& n, core::TimePoint now) { return n.protocol().storage().contains(n.dht_time(now), id); });
}

Result<std::size_t> Dht::blacklist_failures(const std::string& peer) {
  if (!impl_ || !impl_->dht) return make_error(errc::cancelled, "the DHT node is stopped");
  return actors::look_at_dht<std::size_t>(impl_->dht,
                                          [peer](Node& n, core::TimePoint) { return n.blacklist().failures(peer); });
}

void Dht::stop() {
  if (impl_ && impl_->dht) {
    actors::stop_dht_actor(*gateway_, impl_->dht, peer_id_, shared_gateway_);
    impl_->dht = caf::actor{};
  }
  if (gateway_ && !shared_gateway_) gateway_->stop();
}

}  // namespace apiary
