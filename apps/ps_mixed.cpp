// `apiary ps` with a mixed strategy: one apiary::Replica per replica pulls and pushes the
// PS variables and averages the all-reduced ones.
#include "apps/ps_mixed.hpp"

#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "apps/ps_allreduce.hpp"

namespace apiary::apps {
namespace {

namespace cc = core::collective;
namespace cps = core::ps;
using ps_roles::fail;
using ps_roles::PsArgs;

/// A replica process: its collective members from the `replica:` entries of --peers,
/// the PS devices from the others (or the DHT).
int run_mixed_replica(const PsArgs& a, const cc::ArPlan& ar, cps::TrainingPlan ps) {
  const std::int32_t id = a.role == "chief" ? 0 : a.replica;
  if (a.role == "worker" && (id <= 0 || static_cast<std::size_t>(id) >= ar.replicas.size())) {
    return fail(make_error(errc::invalid_argument,
                           "--replica: expected a worker's replica id 1..{}, got {} (replica 0 is the chief)",
                           static_cast<std::int64_t>(ar.replicas.size()) - 1, id));
  }
  std::vector<std::string> host_ports;
  auto members = replica_members(a.peers, ar.replicas, k_replica_peer_prefix, host_ports);
  if (!members) return fail(members.error());
  PsArgs ps_args = a;
  ps_args.peers.clear();
  for (const auto& p : a.peers) {
    if (p.rfind(k_replica_peer_prefix, 0) != 0) ps_args.peers.push_back(p);
  }
  // Listen where the other replicas will call this one (unless --listen says otherwise).
  if (a.listen == "127.0.0.1:0" || a.listen.empty()) ps_args.listen = host_ports[static_cast<std::size_t>(id)];
  print_mixed_plan(ar, ps);
  std::fflush(stdout);
  return ps_roles::run_replica(ps_args, std::move(ps),
                               ps_roles::AllReducePart{std::make_shared<const cc::ArPlan>(ar), std::move(*members)});
}

int run_mixed_embedded(const PsArgs& a, const cc::ArPlan& ar, const cps::TrainingPlan& ps) {
  print_mixed_plan(ar, ps);
  std::fflush(stdout);
  return ps_roles::run_embedded(a, ps, std::make_shared<const cc::ArPlan>(ar));
}

}  // namespace

void print_mixed_plan(const cc::ArPlan& ar, const cps::TrainingPlan& ps) {
  std::string on_ps;
  for (const auto& v : ps.variables) {
    std::string devices;
    for (auto shard : v.shards) {
      const auto& d = ps.shards[shard].device;
      if (devices.find(d) == std::string::npos) devices += (devices.empty() ? "" : ",") + d;
    }
    on_ps += fmt::format("{}{}{} on {}", on_ps.empty() ? "" : ", ", v.name, v.sparse ? " (sparse)" : "", devices);
  }
  std::string reduced;
  for (const auto& v : ar.variables) reduced += (reduced.empty() ? "" : ", ") + v.name;
  for (const auto& sp : ar.sparse) reduced += (reduced.empty() ? "" : ", ") + sp.name + " (sparse)";
  std::printf("mixed plan: PS [%s]; all-reduce [%s]\n", on_ps.c_str(), reduced.c_str());
  print_allreduce_plan(ar);
}

int run_mixed_job(const PsArgs& a, const cc::ArPlan& ar, cps::TrainingPlan ps) {
  if (a.embedded) return run_mixed_embedded(a, ar, ps);
  return run_mixed_replica(a, ar, std::move(ps));
}

}  // namespace apiary::apps
