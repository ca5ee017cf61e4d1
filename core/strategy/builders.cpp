// build_strategy: option checks and dispatch; the shared node helpers.
#include <algorithm>
#include <numeric>

#include "core/strategy/builders.hpp"
#include "core/strategy/builders_common.hpp"

namespace apiary::core::strategy {
namespace {

constexpr std::string_view builder_names[] = {"PS",     "PSLoadBalancing", "PartitionedPS", "UnevenPartitionedPS",
                                              "AllReduce", "PartitionedAR", "RandomAxisPartitionAR", "Parallax"};

/// Which options each builder takes, in BuilderOptions order.
struct Accepts {
  bool proxy, sync, staleness, chunk_size, spec, compressor, seed;
};

Accepts accepted_options(BuilderKind kind) {
  switch (kind) {
    case BuilderKind::ps:
    case BuilderKind::ps_load_balancing:
    case BuilderKind::partitioned_ps:
    case BuilderKind::uneven_partitioned_ps: return {true, true, true, false, false, false, false};
    case BuilderKind::all_reduce: return {false, false, false, true, true, true, false};
    case BuilderKind::partitioned_ar: return {false, false, false, true, false, false, false};
    case BuilderKind::random_axis_partition_ar: return {false, false, false, true, false, false, true};
    case BuilderKind::parallax: return {true, true, true, true, false, false, false};
  }
  return {};
}

Status check_options(BuilderKind kind, const BuilderOptions& o) {
  const Accepts a = accepted_options(kind);
  const std::pair<bool, const char*> given[] = {
      {o.local_proxy_variable.has_value() && !a.proxy, "local_proxy_variable"},
      {o.sync.has_value() && !a.sync, "sync"},
      {o.staleness.has_value() && !a.staleness, "staleness"},
      {o.chunk_size.has_value() && !a.chunk_size, "chunk_size"},
      {o.all_reduce_spec.has_value() && !a.spec, "all_reduce_spec"},
      {o.compressor.has_value() && !a.compressor, "compressor"},
      {o.seed.has_value() && !a.seed, "seed"}};
  for (const auto& [bad, name] : given) {
    if (bad) {
      return make_error(errc::invalid_argument, "builder {} does not take the option {}; drop it (it would have no "
                        "effect)", to_string(kind), name);
    }
  }
  if (o.staleness.value_or(0) < 0) {
    return make_error(errc::invalid_argument, "staleness is {}; expected 0 (bulk-synchronous) or a positive number of "
                      "steps", *o.staleness);
  }
  if (o.staleness.value_or(0) > 0 && !o.sync.value_or(true)) {
    return make_error(errc::invalid_argument, "staleness {} needs synchronous updates but sync is false; set sync or "
                      "drop staleness", *o.staleness);
  }
  if (o.chunk_size.value_or(128) < 1) {
    return make_error(errc::invalid_argument, "chunk_size is {}; expected at least 1 variable per group", *o.chunk_size);
  }
  if (kind == BuilderKind::parallax && o.local_proxy_variable.value_or(false)) {
    return make_error(errc::invalid_argument, "Parallax puts only sparse variables on parameter servers and sparse "
                      "variables never get a proxy, so local_proxy_variable=true would have no effect; drop it, or use "
                      "PSLoadBalancing for proxies");
  }
  return ok_status();
}

}  // namespace

std::string_view to_string(BuilderKind kind) { return builder_names[static_cast<std::size_t>(kind)]; }

Result<BuilderKind> parse_builder_kind(std::string_view name) {
  for (BuilderKind kind : all_builder_kinds) {
    if (to_string(kind) == name) return kind;
  }
  std::string names;
  for (auto n : builder_names) names += (names.empty() ? "" : ", ") + std::string(n);
  return make_error(errc::invalid_argument, "unknown strategy builder \"{}\"; expected one of {}", std::string(name),
                    names);
}

Result<pb::autodist::Strategy> build_strategy(BuilderKind kind, const BuilderOptions& o, const GraphItem& item,
                                              const ResourceSpec& spec, std::string id) {
  if (auto s = check_options(kind, o); !s) return s.error();
  if (auto s = check_graph_item(item); !s) return s.error();
  const PsParams ps{o.local_proxy_variable.value_or(false), o.sync.value_or(true), o.staleness.value_or(0)};
  const std::int64_t chunk = o.chunk_size.value_or(128);
  pb::autodist::Strategy out;
  switch (kind) {
    case BuilderKind::ps: out = build_ps(ps, item, spec); break;
    case BuilderKind::ps_load_balancing: out = build_ps_load_balancing(ps, item, spec); break;
    case BuilderKind::partitioned_ps: out = build_partitioned_ps(ps, false, item, spec); break;
    case BuilderKind::uneven_partitioned_ps: out = build_partitioned_ps(ps, true, item, spec); break;
    case BuilderKind::all_reduce:
      out = build_all_reduce(ArParams{chunk, o.all_reduce_spec.value_or(pb::autodist::AllReduceSynchronizer::NCCL),
                                      o.compressor.value_or(pb::autodist::AllReduceSynchronizer::NoneCompressor)},
                             item, spec);
      break;
    case BuilderKind::partitioned_ar: out = build_partitioned_ar(chunk, item, spec); break;
    case BuilderKind::random_axis_partition_ar:
      out = build_random_axis_partition_ar(chunk, o.seed.value_or(0), item, spec);
      break;
    case BuilderKind::parallax: out = build_parallax(chunk, ps.sync, ps.staleness, item, spec); break;
  }
  out.set_id(std::move(id));
  return out;
}

std::int64_t smallest_divisor_shards(std::int64_t n) {
  if (n <= 1) return 1;
  for (std::int64_t i = 2; i < n; ++i) {
    if (n % i == 0) return i;
  }
  return n;
}

std::int64_t smallest_non_divisor_shards(std::int64_t n) {
  if (n <= 1) return 1;
  for (std::int64_t i = 2; i < n; ++i) {
    if (n % i != 0) return i;
  }
  return n;
}

pb::autodist::Strategy strategy_with_replicas(const ResourceSpec& spec) {
  pb::autodist::Strategy s;
  for (const auto& r : spec.replicas()) s.mutable_graph_config()->add_replicas(r);
  return s;
}

void set_ps(pb::autodist::Strategy::Node& node, const std::string& destination, const PsParams& p) {
  auto* ps = node.mutable_pssynchronizer();
  ps->set_reduction_destination(destination);
  ps->set_local_replication(p.local_proxy_variable);
  ps->set_sync(p.sync);
  ps->set_staleness(p.staleness);
}

void set_ar(pb::autodist::Strategy::Node& node, std::int64_t group, ArSpec spec, ArCompressor compressor) {
  auto* ar = node.mutable_allreducesynchronizer();
  ar->set_spec(spec);
  ar->set_compressor(compressor);
  ar->set_group(static_cast<std::int32_t>(group));
}

std::string part_name(const Variable& var, std::int64_t i) { return fmt::format("{}/part_{}:0", var.op_name(), i); }

ServerLoads::ServerLoads(std::vector<std::string> devices)
    : devices_(std::move(devices)), loads_(devices_.size(), 0.0) {}

std::string ServerLoads::take_least(double bytes) {
  const auto least = static_cast<std::size_t>(std::min_element(loads_.begin(), loads_.end()) - loads_.begin());
  loads_[least] += bytes;
  return devices_[least];
}

std::vector<std::string> ServerLoads::take_shards(std::int64_t count, double bytes_per_shard) {
  std::vector<std::size_t> order(devices_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return loads_[a] < loads_[b]; });
  std::vector<std::string> out;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::size_t server = order[static_cast<std::size_t>(i) % order.size()];
    out.push_back(devices_[server]);
    loads_[server] += bytes_per_shard;
  }
  return out;
}

}  // namespace apiary::core::strategy
