#pragma once
/// apiary::Runtime: what a process has once, for every facade in it. The actor system,
/// the gateway (one transport, one listen address), the identity (Ed25519 key and
/// PeerID), the DHT epoch (Unix seconds at the runtime's time zero, computed once), and
/// the logger. A DHT, averagers, a PS replica and an expert server in one process all
/// take the same Runtime&, so none of them brings up its own.
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "api/fwd.hpp"
#include "core/time.hpp"
#include "messages/identity/ed25519.hpp"
#include "messages/identity/multiaddr.hpp"
#include "messages/identity/peer_id.hpp"
#include "messages/log/log.hpp"
#include "messages/result.hpp"
#include "transport/transport.hpp"

namespace apiary {

namespace core::rpc {
class Authorizer;
class TokenIssuer;
}  // namespace core::rpc

/// Who may call a runtime's services, and whose answers it believes: every call of every
/// facade on the runtime (DHT, averaging and state download, PS, all-reduce, ping,
/// experts) is then signed and checked (core/rpc/auth.hpp). Off when both are empty.
struct Authorization {
  /// A swarm's shared authority key file (`apiary identity create`): the runtime mints
  /// its own tokens with it, and serves and believes only holders of tokens it signed.
  std::string authority_file;
  /// Or the issuer of this identity's tokens, which also judges peers' (plug your own for
  /// a moderated swarm, hivemind issue #253); it must mint tokens for the runtime's key.
  std::shared_ptr<core::rpc::TokenIssuer> issuer;
  [[nodiscard]] bool on() const { return !authority_file.empty() || issuer != nullptr; }
};

/// How to bring a runtime up.
struct RuntimeOptions {
  /// Listen multiaddr (/ip4/HOST/tcp/PORT or /ip6/...; port 0 picks a free one).
  std::string listen = "/ip4/127.0.0.1/tcp/0";
  /// Identity key file (libp2p format); empty: a fresh key for this run.
  std::string identity_file;
  /// UCX transport mode (tcp, or shared memory between processes of one host).
  transport::Mode mode = transport::Mode::tcp;
  /// Plaintext connections (a trusted cluster, shared memory on one host); every peer must
  /// say so too. By default connections are encrypted and PeerIDs proven (Noise XX).
  bool insecure = false;
  /// Authorization of every call (off by default).
  Authorization authorization;
  /// Busy-poll the transport this long before sleeping (0: sleep at once).
  std::chrono::microseconds busy_poll{0};
  /// Most scheduler threads of the actor system (0: CAF's default).
  std::size_t threads = 0;
  /// An actor system to run on instead of an own one (it must outlive the runtime).
  caf::actor_system* system = nullptr;
  /// Serve as a relay (transport/README.md "Relays"): keep slots for peers behind NAT and
  /// pass on the connections dialled to them through this node (limits: RelayLimits).
  bool relay_service = false;
  /// What the relay grants each peer (with relay_service); every limit must be positive.
  transport::RelayLimits relay_limits;
};

class Runtime {
 public:
  /// Starts an actor system and a gateway listening on `options.listen`, with the
  /// identity of `options.identity_file`. Errors name the bad option or what failed.
  static Result<std::unique_ptr<Runtime>> start(const RuntimeOptions& options);

  /// A runtime on an actor system and gateway another runtime owns (several identities
  /// behind one gateway, each addressed by its PeerID), with its own identity; the
  /// owner must outlive it. `authorization` covers this identity's calls and handles.
  /// Errors: the identity file, the authority file.
  static Result<std::unique_ptr<Runtime>> attach(caf::actor_system& system, std::shared_ptr<actors::Gateway> gateway,
                                                 const std::string& identity_file = {},
                                                 const Authorization& authorization = {});

  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  [[nodiscard]] caf::actor_system& system() const { return *system_; }
  [[nodiscard]] const std::shared_ptr<actors::Gateway>& gateway() const { return gateway_; }
  /// Whether the gateway is another runtime's (attach()).
  [[nodiscard]] bool shares_gateway() const { return own_gateway_ == false; }
  [[nodiscard]] const messages::Ed25519PrivateKey& key() const { return *key_; }
  [[nodiscard]] const messages::PeerId& peer_id() const { return peer_id_; }
  /// The bound listen address with /p2p/<PeerID>, or the relayed one once reached
  /// through a relay (reach_through).
  [[nodiscard]] const messages::Multiaddr& address() const { return address_; }
  /// Reserves a slot at the relay at `relay` (its multiaddr, naming its PeerID) and is
  /// reached through it from then on: address() becomes the relayed address
  /// (RELAY/p2p-circuit/p2p/SELF), peers are told, and the transport keeps the slot.
  /// Call before the roles that advertise address() start. On a gateway shared with other
  /// identities (attach()), the slot is this identity's and the gateway's listen address
  /// becomes the relay's for all of them. Errors: the relay's refusal or unreachability,
  /// no answer within `timeout`.
  Status reach_through(const messages::Multiaddr& relay, std::chrono::milliseconds timeout);
  /// The runtime's time (the steady clock the actors use).
  [[nodiscard]] core::TimePoint now() const;
  /// DHT time (Unix seconds) at now() == 0, fixed when the runtime starts: DHT time at
  /// `t` is to_seconds(t) + dht_epoch().
  [[nodiscard]] double dht_epoch() const { return dht_epoch_; }
  /// Unix seconds now, on the runtime's clock (hivemind's get_dht_time).
  [[nodiscard]] double dht_time() const { return core::to_seconds(now()) + dht_epoch_; }
  /// The process logger.
  [[nodiscard]] log::Logger& logger() const { return log::process_logger(); }

  /// Stops the gateway (when this runtime owns it); facades on it stop answering.
  void stop();

 private:
  Runtime() = default;
  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> own_system_;
  caf::actor_system* system_ = nullptr;
  std::shared_ptr<actors::Gateway> gateway_;
  bool own_gateway_ = true;
  bool authorized_ = false;  ///< an authorizer of this identity is on the gateway
  std::optional<messages::Ed25519PrivateKey> key_;
  messages::PeerId peer_id_;
  messages::Multiaddr address_;
  double dht_epoch_ = 0;
};

}  // namespace apiary
