#pragma once
/// A node's proxy of dense PS variables (`local_replication`) as a simulated node: a
/// thin shell over core::ps::ProxyServer. The replicas of one node send their pulls of
/// proxied shards here instead of to the PS; the proxy sends one pull per shard per
/// step to the PS and answers every local reader of that step from its copy.
#include <cstdint>

#include "core/effects.hpp"
#include "core/ps/proxy_server.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/host.hpp"

namespace apiary::sim::scenarios {

/// One node's proxy as a simulated node.
class PsProxyHost : public Host {
 public:
  /// Runs `proxy`.
  explicit PsProxyHost(core::ps::ProxyServer proxy) : proxy_(std::move(proxy)) {}

  [[nodiscard]] core::Effects on_start(core::TimePoint now) override;
  [[nodiscard]] core::Effects on_request(core::TimePoint now, core::RequestId id, const std::string& handle,
                                         const std::string& request) override;
  [[nodiscard]] core::Effects on_response(core::TimePoint now, core::CallId call,
                                          const Result<std::string>& response) override;
  [[nodiscard]] core::Effects on_timer(core::TimePoint now, core::TimerId id) override;

  /// The connection to `peer` broke: refreshes in flight from it fail (errc::peer_down)
  /// with their readers. Returns the effects for World::submit.
  [[nodiscard]] core::Effects peer_down(core::TimePoint now, const core::PeerAddr& peer) {
    return proxy_.peer_down(now, peer);
  }

  /// The proxy (pull and read counters).
  [[nodiscard]] const core::ps::ProxyServer& proxy() const { return proxy_; }

 private:
  core::ps::ProxyServer proxy_;
};

}  // namespace apiary::sim::scenarios
