#pragma once
/// Addressing roles by PeerID, for roles that share one transport with others of their
/// kind (several DHT nodes, or several averagers, in one process): such a role serves
/// `<handle>@<PeerID>` and its callers append the callee's PeerID, read from the callee's
/// multiaddr (/p2p/...), to the handle. A role alone on its transport serves the plain
/// handles as well (callers that know only host:port); an unaddressed role (the
/// simulator, where every address is one node) serves and calls plain handles only.
#include <optional>
#include <string>
#include <vector>

#include "core/effects.hpp"
#include "messages/identity/peer_id.hpp"

namespace apiary::core {

class Addressing {
 public:
  /// Unaddressed: plain handles, calls unchanged.
  Addressing() = default;
  /// Addressed to `self`; `shared_transport`: others of the kind share the transport, so
  /// only the addressed handles are served.
  Addressing(messages::PeerId self, bool shared_transport) : self_(std::move(self)), shared_(shared_transport) {}

  /// The handles to serve for `bases`.
  [[nodiscard]] std::vector<std::string> served(const std::vector<std::string>& bases) const;
  /// `handle` without its "@<PeerID>" suffix.
  [[nodiscard]] static std::string base_of(const std::string& handle);
  /// Appends "@<PeerID of the callee>" to the handle of every Call in `fx` whose peer's
  /// multiaddr names one (nothing when unaddressed).
  void address(Effects& fx);

 private:
  std::optional<messages::PeerId> self_;
  bool shared_ = false;
};

}  // namespace apiary::core
