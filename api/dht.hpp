#pragma once
/// apiary::Dht: the embedding API of a Kademlia DHT node (hivemind's DHT). A Dht is a
/// gateway on a listen address, an identity, and one DHT actor around core::dht::Node.
/// Keys and subkeys are named like hivemind's (DhtKey); values are msgpack bytes the
/// caller packs (core/dht/msgpack_value.hpp: pack_str, pack_bin, pack_float,
/// pack_tuple; or msgpack-c directly). Expirations are absolute DHT seconds (Unix time,
/// Dht::now()). Many Dht may share one actor system (DhtOptions::system).
#include <cstddef>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/fwd.hpp"
#include "api/runtime.hpp"
#include "core/dht/node.hpp"
#include "core/role.hpp"
#include "messages/identity/multiaddr.hpp"
#include "messages/identity/peer_id.hpp"
#include "messages/result.hpp"
#include "transport/transport.hpp"

namespace apiary {

/// How to start a DHT node.
struct DhtOptions {
  /// Listen multiaddr; port 0 picks a free port. A client listens too (for answers).
  std::string listen = "/ip4/127.0.0.1/tcp/0";
  /// Ed25519 key file (libp2p format); empty = a fresh key for this run only.
  std::string identity_file;
  /// Multiaddrs of nodes to bootstrap from, e.g. /ip4/127.0.0.1/tcp/4100/p2p/12D3KooW...
  std::vector<std::string> initial_peers;
  /// A client: serves nothing, is never added to routing tables, can store and get.
  bool client_mode = false;
  /// UCX lanes between same-host peers.
  transport::Mode mode = transport::Mode::tcp;
  /// Plaintext connections (`--insecure`), which every peer must choose too; encrypted
  /// and authenticated by default.
  bool insecure = false;
  /// Which host runs the node: its own actor, or the transport thread (no thread
  /// hand-off per request; the node's work per message is short).
  core::HostKind host = core::HostKind::actor;
  /// The transport thread spins this long after each event before it sleeps (0: sleeps
  /// at once): lower latency for small messages at the price of a busy core meanwhile.
  std::chrono::microseconds busy_poll{0};
  /// Node tuning (hivemind's defaults); client_mode above is or-ed into node.protocol.
  core::dht::NodeConfig node;
  /// Record validator, e.g. core::dht::OwnershipValidator (null: every record is valid).
  std::shared_ptr<core::dht::RecordValidator> validator;
  /// Authorization of every call of the runtime this Dht brings up (its own, or attached
  /// to `gateway`): requests without a valid token and signature are refused, and answers
  /// from non-members are not believed. With Dht::start(Runtime&, ...) the runtime's own
  /// authorization applies and this is ignored.
  Authorization authorization;
  /// CAF scheduler threads of an own actor system (0 = CAF's default, one per core).
  std::size_t threads = 0;
  /// An actor system to share among many Dht in one process (it must outlive them);
  /// null = this Dht makes its own.
  caf::actor_system* system = nullptr;
  /// Serve as a relay for peers behind NAT (transport/README.md "Relays"): they reserve a
  /// slot here and are dialled through this node.
  bool relay_service = false;
  /// What the relay grants each peer (with relay_service).
  transport::RelayLimits relay_limits;
  /// hivemind's use_auto_relay: when the initial peers answer but cannot call this node
  /// back (it is behind NAT), reserve a slot at the first of them that serves as a relay,
  /// take the relayed address as this node's, and bootstrap again, reached through it.
  bool auto_relay = false;
  /// A gateway (on `system`) to share among many Dht in one process: one transport, one
  /// progress thread and one connection per pair of processes for all of them; each node
  /// is still addressed by its own PeerID (`listen` is then ignored). Null = an own one.
  std::shared_ptr<actors::Gateway> gateway;
};

/// A key or subkey as hivemind names it: its msgpack bytes, and the 160-bit id they hash to.
class DhtKey {
 public:
  /// A string key (a Python str): msgpack str; id = SHA1(msgpack).
  [[nodiscard]] static DhtKey str(std::string_view text);
  /// A bytes key (a Python bytes): msgpack bin; id = SHA1 of the raw bytes, as hivemind.
  [[nodiscard]] static DhtKey bytes(std::string_view raw);
  /// A key of any type given as one msgpack object (e.g. 0, (), false); id = SHA1(packed).
  /// Errors: errc::invalid_argument when `packed` is not exactly one msgpack object.
  [[nodiscard]] static Result<DhtKey> packed(std::string packed);

  /// The 160-bit id the key is stored under.
  [[nodiscard]] const core::dht::NodeId& id() const { return id_; }
  /// The key's msgpack bytes (as a subkey: what is stored and returned).
  [[nodiscard]] const std::string& packed() const { return packed_; }

 private:
  DhtKey(core::dht::NodeId id, std::string packed) : id_(id), packed_(std::move(packed)) {}
  core::dht::NodeId id_;
  std::string packed_;
};

/// One record of a store_many.
struct DhtStoreItem {
  DhtKey key;                     ///< the key
  std::string value;              ///< msgpack bytes
  double expiration = 0;          ///< absolute DHT seconds
  std::optional<DhtKey> subkey;   ///< set: one entry of a dictionary value
};

/// How one record of a store_many went.
struct DhtStored {
  bool ok = false;               ///< accepted by at least one replica
  std::size_t replicas = 0;      ///< replicas that accepted it
};

/// A node's counters and sizes, for monitoring, tests and benchmarks.
struct DhtStats {
  core::dht::NodeStats node;          ///< calls, failures, requests served, bans...
  std::size_t routing_table = 0;      ///< active nodes in the routing table
  std::size_t stored_keys = 0;        ///< keys alive in the main storage
  std::size_t cached_keys = 0;        ///< keys alive in the cache
  std::size_t blacklisted = 0;        ///< peers with a failure on record
  std::size_t pending_ops = 0;        ///< operations not finished
};

class Dht {
 public:
  /// Starts a node and bootstraps it from options.initial_peers. Errors: bad listen
  /// address or initial peer (invalid_argument), bad node config (invalid_argument),
  /// missing or bad identity file (not_found, malformed), port in use (unavailable), no
  /// initial peer answered (unavailable, naming them).
  static Result<std::unique_ptr<Dht>> start(const DhtOptions& options);
  /// Starts a node on `runtime` (its actor system, gateway, identity and DHT epoch;
  /// `runtime` must outlive the node) and bootstraps it; the options' listen, identity,
  /// mode, busy_poll, threads, system and gateway are the runtime's business and are
  /// ignored. Errors as start(options).
  static Result<std::unique_ptr<Dht>> start(Runtime& runtime, const DhtOptions& options);
  ~Dht();
  Dht(const Dht&) = delete;
  Dht& operator=(const Dht&) = delete;

  /// Stores `value` (msgpack bytes) under `key` (and `subkey`: one entry of a dictionary
  /// value) until `expiration` (absolute DHT seconds) on the num_replicas nearest nodes.
  /// True when at least one replica accepted it (false: older than what they hold, or
  /// rejected by a validator).
  std::future<Result<bool>> store(const DhtKey& key, std::string value, double expiration,
                                  std::optional<DhtKey> subkey = std::nullopt);
  /// Stores many records in one search; per record, in order.
  std::future<Result<std::vector<DhtStored>>> store_many(std::vector<DhtStoreItem> items);
  /// store_many of records made by core code (key id, packed subkey or
  /// core::dht::k_subkey_regular, value, expiration), e.g. core/moe's declarations.
  std::future<Result<std::vector<DhtStored>>> store_records(std::vector<core::dht::StoreItem> records);
  /// The freshest value of `key` (nullopt: not found). `latest` asks every replica of
  /// the beam and merges dictionary subkeys; otherwise any unexpired value will do.
  std::future<Result<std::optional<core::dht::FoundValue>>> get(const DhtKey& key, bool latest = false);
  /// get for many keys in one search; per key, in order.
  std::future<Result<std::vector<std::optional<core::dht::FoundValue>>>> get_many(const std::vector<DhtKey>& keys,
                                                                                   bool latest = false);
  /// The `k` nodes nearest to `id` that this node finds (itself included unless
  /// `exclude_self`), nearest first.
  std::future<Result<std::vector<core::dht::Contact>>> find_nearest(const core::dht::NodeId& id, std::size_t k,
                                                                    bool exclude_self = false);

  /// This node's PeerID.
  [[nodiscard]] const messages::PeerId& peer_id() const { return runtime_->peer_id(); }
  /// This node's DHT id.
  [[nodiscard]] const core::dht::NodeId& node_id() const { return node_id_; }
  /// The multiaddrs other nodes reach this one at (with /p2p/<PeerID>); empty for a client.
  [[nodiscard]] std::vector<std::string> visible_addrs() const;
  /// The listen multiaddr with /p2p/<PeerID> (a client's too).
  [[nodiscard]] const messages::Multiaddr& address() const { return runtime_->address(); }
  /// DHT time: Unix time in seconds (what expirations are measured against).
  [[nodiscard]] static double now();
  /// Counters and sizes (asks the actor; errors if it does not answer within 5 s).
  [[nodiscard]] Result<DhtStats> stats();
  /// Whether this node's main storage holds `key` now (a replica; tests, monitoring).
  [[nodiscard]] Result<bool> stores_locally(const DhtKey& key);
  /// Adds record validators to the running node (merged into its composite where they
  /// merge), as hivemind's DHT.add_validators. Errors: cancelled once stopped,
  /// deadline_exceeded if the node does not answer within 5 s.
  [[nodiscard]] Status add_validators(std::vector<std::unique_ptr<core::dht::RecordValidator>> validators);
  /// Consecutive failures on record for `peer` (a multiaddr with /p2p/) in the blacklist.
  [[nodiscard]] Result<std::size_t> blacklist_failures(const std::string& peer);
  /// The actor system the node runs on.
  [[nodiscard]] caf::actor_system& system() { return runtime_->system(); }
  /// The gateway the node serves on (roles beside the node, e.g. an Averager, share it).
  [[nodiscard]] const std::shared_ptr<actors::Gateway>& gateway() const { return runtime_->gateway(); }
  /// The runtime the node runs on.
  [[nodiscard]] Runtime& runtime() const { return *runtime_; }
  /// The runtime this Dht brought up itself (start(options)), for facades beside the node
  /// to hold: it then lives until the last of them goes, even if the Dht goes first.
  /// Null when the node runs on a caller's runtime (the caller keeps that alive).
  [[nodiscard]] std::shared_ptr<Runtime> own_runtime() const { return own_runtime_; }
  /// The DHT node's host (roles beside the node run their DHT operations on it).
  [[nodiscard]] const actors::RoleHost& host() const;
  /// Stops the node: operations in flight end cancelled. Idempotent.
  void stop();

 private:
  Dht();
  /// auto_relay after a bootstrap that failed with `unreachable` (the initial peers could
  /// not call this node back): reached through the first of `relays` that keeps a slot.
  static Result<std::unique_ptr<Dht>> start_relayed(Runtime& runtime, const DhtOptions& options,
                                                    const std::vector<core::PeerAddr>& relays,
                                                    const Error& unreachable);
  struct Impl;
  Runtime* runtime_ = nullptr;
  std::shared_ptr<Runtime> own_runtime_;  ///< when start(options) brought one up
  std::unique_ptr<Impl> impl_;
  core::dht::NodeId node_id_;
  bool client_ = false;
};

}  // namespace apiary
