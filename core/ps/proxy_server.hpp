#pragma once
/// A node's proxy of dense PS variables as a protocol role (`local_replication`,
/// reference autodist.md §3.3): it serves the pull handle of core/ps/wire.hpp to the
/// node's replicas and, through a ProxyCache, sends one pull per shard per step to the
/// shard's PS; every local reader of that step is answered from the copy. Pushes do not
/// pass through it. A replica cannot tell a proxy from a PS.
///
/// A failed refresh fails every reader waiting for it with an error naming the proxy.
/// When the PS went away (peer_down, unavailable) the next read refreshes afresh, so
/// replicas waiting for a PS started again read through the proxy once it is back; any
/// other failure (the PS refused or did not answer in time) fails every later read of
/// that shard too. The
/// shell (the simulator's PsProxyHost, the actor of actors/ps/proxy_actor.hpp) delivers
/// requests and responses and executes the returned Calls and Replies.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/effects.hpp"
#include "core/ps/proxy.hpp"
#include "core/role.hpp"
#include "messages/result.hpp"

namespace apiary::core::ps {

/// What a proxy has done so far (the answer of k_proxy_counters_method).
struct ProxyCounts {
  std::int64_t pulls = 0;  ///< pulls sent to the PS (one per shard per step)
  std::int64_t reads = 0;  ///< reads answered to local replicas
  std::int64_t done = 0;   ///< replicas that said they are done reading (k_ps_proxy_done_handle)
};

/// The local method that answers with a ProxyCounts.
inline constexpr const char* k_proxy_counters_method = "counters";

/// One node's proxy. Not thread-safe; one owner drives it. As a Role it serves the pull
/// handle, refreshes from the PS with its own calls, and answers k_proxy_counters_method.
class ProxyServer final : public Role {
 public:
  /// The proxy of node `node`, caching the shards of `shards` (shard name -> address of
  /// its PS); its own pulls carry replica id `replica` (one of the node's) and wait up
  /// to `call_timeout`.
  ProxyServer(std::string node, std::map<std::string, PeerAddr> shards, std::int32_t replica, Duration call_timeout);

  /// The pull handle, and the handle a reader says it is done on.
  [[nodiscard]] std::vector<std::string> handles() const override;
  /// The role contract: each input to the method below that takes it.
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

  /// A request from a local replica: a pull of a proxied shard. Returns the Reply (a
  /// hit), the Call refreshing the copy (the first reader of a step), or nothing (the
  /// reader waits for a refresh under way). Or a reader saying it is done (counted once
  /// per replica, answered at once). Other handles, malformed requests and shards it does
  /// not proxy are answered with an error.
  [[nodiscard]] Effects on_request(TimePoint now, RequestId id, const std::string& handle, const std::string& body);

  /// The PS's answer to refresh `call`: Replies to the readers it serves, and the next
  /// refresh when readers already wait for a later step.
  [[nodiscard]] Effects on_response(TimePoint now, CallId call, const Result<std::string>& response);

  /// The connection to `peer` broke: refreshes in flight from it fail with errc::peer_down.
  [[nodiscard]] Effects peer_down(TimePoint now, const PeerAddr& peer);

  /// Pulls sent to the PS so far (one per shard per step).
  [[nodiscard]] std::int64_t pulls() const { return cache_.pulls(); }
  /// Reads answered so far (hits and released waiters).
  [[nodiscard]] std::int64_t reads() const { return reads_; }
  /// Replicas that said they are done reading.
  [[nodiscard]] std::int64_t done() const { return static_cast<std::int64_t>(done_.size()); }
  /// Whether answers carry the cached values as a Reply body viewing them (the actor's
  /// gateway sends them from where they lie, for every reader) instead of a copy in the
  /// response bytes (the simulator's hosts). Off by default.
  void set_splice_reads(bool splice) { splice_reads_ = splice; }
  /// Shards it caches, by name.
  [[nodiscard]] const std::map<std::string, PeerAddr>& shards() const { return shards_; }

 private:
  /// (shard, replica, step): a local reader waiting for a refresh.
  using Key = std::tuple<std::string, std::int32_t, std::int64_t>;

  void pull(Effects& out, const std::string& shard, std::int64_t step);
  Reply answer(RequestId id, const std::string& shard, std::int32_t replica, std::int64_t step, std::int64_t version,
               const ProxyValues& values);

  std::string node_;
  std::map<std::string, PeerAddr> shards_;
  std::int32_t replica_;
  Duration call_timeout_;
  ProxyCache cache_;
  std::map<Key, std::vector<RequestId>> waiting_;
  std::map<CallId, std::pair<std::string, std::int64_t>> pulls_;  ///< refresh call -> (shard, step)
  std::map<std::string, Error> failed_;                           ///< shard -> why its refresh failed
  CallId next_call_ = 1;
  std::int64_t reads_ = 0;
  bool splice_reads_ = false;
  std::set<std::int32_t> done_;  ///< replicas done reading
};

}  // namespace apiary::core::ps
