#pragma once
/// The DHT node as a Role (core/role.hpp): serves the three DHTProtocol handles, plain
/// and addressed to its PeerID (`<handle>@<PeerID>`, so several nodes can share one
/// transport), names the node on its calls when the transport is shared, addresses each
/// call to the node behind the peer's address, and completes the local operations it is
/// asked for with the node's OpResult. Any host runs it: the generic actor, the
/// simulator's RoleHost, a unit test.
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/addressing.hpp"
#include "core/dht/node.hpp"
#include "core/role.hpp"
#include "messages/identity/peer_id.hpp"

namespace apiary::core::dht {

/// Starts one operation on the node: calls one of Node::start/store/get/find_nearest
/// with the op id it is given. The argument of k_run_method.
using NodeOp = std::function<Effects(Node&, TimePoint, OpId)>;
/// A read of the node on its host's thread (statistics, tests). The argument of k_look_method.
using NodeLook = std::function<void(Node&, TimePoint)>;

/// Local method: runs a NodeOp; completes with the operation's OpResult when it finishes.
inline constexpr const char* k_run_method = "run";
/// Local method: runs a NodeLook at once; completes with an empty Value.
inline constexpr const char* k_look_method = "look";

/// The handle a node serves `base` under when callers address it by PeerID:
/// "DHTProtocol.rpc_find@12D3KooW...".
[[nodiscard]] std::string addressed_handle(const char* base, const messages::PeerId& peer);

/// What a NodeRole is made of besides its node.
struct NodeRoleConfig {
  /// The node's PeerID (its handles are addressed to it).
  messages::PeerId peer_id;
  /// The transport hosts other DHT nodes too: calls name this node as their caller, and
  /// only the handles addressed to this node are served.
  bool shared_transport = false;
  /// Nodes are addressed by PeerID on their transport (`<handle>@<PeerID>`). Off where
  /// every address reaches exactly one node (the simulator): plain handles only, calls
  /// unchanged.
  bool addressed = true;
};

class NodeRole final : public Role {
 public:
  NodeRole(std::unique_ptr<Node> node, NodeRoleConfig config);

  /// Nothing in client mode; the plain handles when not addressed; else
  /// served(peer_id, shared_transport).
  [[nodiscard]] std::vector<std::string> handles() const override;
  /// The handles a serving node has: addressed to `peer`, and the plain ones too (for
  /// callers that know only host:port) unless the transport is shared.
  [[nodiscard]] static std::vector<std::string> served(const messages::PeerId& peer, bool shared_transport);
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

  [[nodiscard]] Node& node() { return *node_; }
  [[nodiscard]] const Node& node() const { return *node_; }

 private:
  /// Addresses the node's calls, then appends a Complete for every finished operation a
  /// LocalCall started.
  Effects finish(Effects fx);

  std::unique_ptr<Node> node_;
  NodeRoleConfig config_;
  std::string caller_;  ///< PeerID bytes named in calls when the transport is shared
  Addressing addressing_;  ///< the node's handles and its calls, by PeerID (when addressed)
  std::set<OpId> asked_;  ///< operations LocalCalls started, not finished yet
};

}  // namespace apiary::core::dht
