#pragma once
/// A node's proxy of dense PS variables (`local_replication`) as a simulated node: the
/// generic host running core::ps::ProxyServer. The replicas of one node send their pulls
/// of proxied shards here instead of to the PS; the proxy sends one pull per shard per
/// step to the PS and answers every local reader of that step from its copy.
#include "core/ps/proxy_server.hpp"
#include "sim/role_host.hpp"

namespace apiary::sim::scenarios {

/// One node's proxy as a simulated node (role() gives its pull and read counters).
using PsProxyHost = RoleHost<core::ps::ProxyServer>;

}  // namespace apiary::sim::scenarios
