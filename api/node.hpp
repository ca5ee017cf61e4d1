#pragma once
/// apiary::Node: the embedding facade. One Node per process: an actor system, the
/// gateway on a listen address, the node's identity, and its standing roles (for now
/// the ping role, which finds the swarm from bootstrap addresses and measures RTTs).
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/gateway.hpp"
#include "api/runtime.hpp"
#include "core/role.hpp"
#include "messages/identity/ed25519.hpp"
#include "messages/identity/multiaddr.hpp"
#include "messages/identity/peer_id.hpp"

namespace caf {
class actor_system;
class actor_system_config;
}

namespace apiary {

/// How to start a node.
struct NodeOptions {
  /// Listen multiaddr; port 0 picks a free port. Only TCP/IP addresses of this host.
  std::string listen = "/ip4/127.0.0.1/tcp/0";
  /// Ed25519 key file (libp2p format); empty = a fresh key for this run only.
  std::string identity_file;
  /// Multiaddrs of peers to start from.
  std::vector<std::string> bootstrap;
  /// UCX lanes between same-host peers.
  transport::Mode mode = transport::Mode::tcp;
  /// Plaintext connections (`--insecure`), which every peer must choose too; encrypted
  /// and authenticated by default.
  bool insecure = false;
  /// Authorization of every call (Authorization; off by default).
  Authorization authorization;
  /// Time between ping rounds.
  std::chrono::milliseconds ping_interval{1000};
  /// Which host runs the ping role: its own actor, or the transport thread (no thread
  /// hand-off per probe).
  core::HostKind host = core::HostKind::actor;
  /// CAF scheduler threads (0 = CAF's default, one per core).
  std::size_t threads = 0;
};

class Node {
 public:
  /// Starts a node. Errors: bad listen address or bootstrap multiaddr
  /// (invalid_argument), missing or bad identity file (not_found, malformed), port in
  /// use (unavailable).
  static Result<std::unique_ptr<Node>> start(const NodeOptions& options);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// The listen multiaddr including /p2p/<PeerID>.
  const messages::Multiaddr& address() const { return runtime_->address(); }
  /// This node's PeerID.
  const messages::PeerId& id() const { return runtime_->peer_id(); }
  /// The ping role's RTT table (blocks up to a second for the actor's answer).
  std::string rtt_table();
  /// The actor system, for embedding applications that spawn their own actors.
  caf::actor_system& system() { return runtime_->system(); }
  /// The gateway, for registering services and making calls.
  const std::shared_ptr<actors::Gateway>& gateway() const { return runtime_->gateway(); }
  /// Stops the roles and the gateway. Idempotent.
  void stop();

 private:
  Node() = default;
  struct Impl;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<Impl> impl_;
};

/// What one probe of a Pinger got.
struct PingReply {
  bool answered = false;  ///< a reply came (else `problem` says why none did)
  bool matched = false;   ///< it answers this probe (else `problem` says what is wrong with it)
  double rtt_us = 0;      ///< the round trip, µs
  std::string problem;
};

/// A client of a node's ping role (`apiary ping`): its own actor system and a gateway on
/// the interface the node is reached through (an ephemeral port), probing the node one
/// probe at a time.
class Pinger {
 public:
  /// Starts the gateway to probe `target`, over `mode` (which must match the node's).
  /// Errors: the gateway's.
  /// `insecure`: plaintext, as the node must run too.
  static Result<std::unique_ptr<Pinger>> start(const messages::Multiaddr& target, transport::Mode mode,
                                               bool insecure = false);
  /// Stops the gateway.
  ~Pinger();
  Pinger(const Pinger&) = delete;
  Pinger& operator=(const Pinger&) = delete;

  /// Sends probe `seq` and waits up to `timeout` for its answer.
  PingReply probe(std::uint64_t seq, std::chrono::milliseconds timeout);

 private:
  Pinger() = default;
  std::string target_;  ///< the node's "host:port"
  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> system_;
  std::shared_ptr<actors::Gateway> gateway_;
};

}  // namespace apiary
