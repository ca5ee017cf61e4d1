#include "core/strategy/validate.hpp"

#include <set>
#include <string>

#include "core/strategy/partitioner.hpp"

namespace apiary::core::strategy {
namespace {

using Node = pb::autodist::Strategy::Node;

std::string where(int index, const Node& node) { return fmt::format("node_config[{}] (\"{}\")", index, node.var_name()); }

Status check_device(const std::string& device, const std::string& what, const ResourceSpec* spec) {
  auto parsed = parse_device_name(device);
  if (!parsed) return make_error(errc::invalid_argument, "{}: {}", what, parsed.error().message);
  if (spec != nullptr && !spec->has_device(device)) {
    return make_error(errc::invalid_argument, "{}: the device {} is not in the resource spec; build the strategy for "
                      "this cluster or add the device there", what, device);
  }
  return ok_status();
}

Status check_synchronizer(const Node& node, const std::string& what, int units, const ResourceSpec* spec) {
  switch (node.synchronizer_case()) {
    case Node::kPSSynchronizer: {
      const auto& ps = node.pssynchronizer();
      if (ps.staleness() < 0) {
        return make_error(errc::invalid_argument, "{}: PSSynchronizer.staleness is {}; expected 0 (bulk-synchronous) or "
                          "a positive number of steps", what, ps.staleness());
      }
      if (ps.staleness() > 0 && !ps.sync()) {
        return make_error(errc::invalid_argument, "{}: PSSynchronizer.staleness {} needs sync: true; set sync or make "
                          "staleness 0", what, ps.staleness());
      }
      if (!ps.reduction_destination().empty()) {
        return check_device(ps.reduction_destination(), what + ": PSSynchronizer.reduction_destination", spec);
      }
      return ok_status();
    }
    case Node::kAllReduceSynchronizer: {
      const auto& ar = node.allreducesynchronizer();
      if (ar.group() < 0 || ar.group() >= units) {
        return make_error(errc::invalid_argument, "{}: AllReduceSynchronizer.group is {}; expected 0 <= group < {} (the "
                          "number of synchronized variables and partitions); renumber the groups", what, ar.group(),
                          units);
      }
      if (!pb::autodist::AllReduceSynchronizer::Spec_IsValid(ar.spec()) ||
          !pb::autodist::AllReduceSynchronizer::Compressor_IsValid(ar.compressor())) {
        return make_error(errc::invalid_argument, "{}: AllReduceSynchronizer has spec {} / compressor {}, which the "
                          "schema does not define; expected AUTO, NCCL or RING and NoneCompressor, HorovodCompressor "
                          "or HorovodCompressorEF", what, static_cast<int>(ar.spec()), static_cast<int>(ar.compressor()));
      }
      return ok_status();
    }
    case Node::SYNCHRONIZER_NOT_SET: break;
  }
  return make_error(errc::invalid_argument, "{}: no synchronizer; set PSSynchronizer or AllReduceSynchronizer", what);
}

Status check_partitioned(const Node& node, const std::string& what, const Variable& var, int units,
                         std::set<std::string>& names, const ResourceSpec* spec) {
  auto config = parse_partitioner(node.partitioner());
  if (!config) return make_error(errc::invalid_argument, "{}: {}", what, config.error().message);
  if (config->splits.size() != var.shape.size()) {
    return make_error(errc::invalid_argument, "{}: partitioner \"{}\" has {} axes but the variable has rank {}; give one "
                      "count per axis", what, node.partitioner(), config->splits.size(), var.shape.size());
  }
  const std::size_t axis = config->axis();
  if (config->splits[axis] > var.shape[axis]) {
    return make_error(errc::invalid_argument, "{}: partitioner \"{}\" cuts axis {} of {} rows into {} pieces; expected "
                      "at most one piece per row", what, node.partitioner(), axis, var.shape[axis],
                      config->splits[axis]);
  }
  if (var.sparse && axis != 0) {
    return make_error(errc::invalid_argument, "{}: partitioner \"{}\" splits axis {} of a sparse variable; sparse "
                      "gradients only split along axis 0", what, node.partitioner(), axis);
  }
  if (node.part_config_size() != config->num_shards()) {
    return make_error(errc::invalid_argument, "{}: partitioner \"{}\" makes {} partitions but part_config has {}; give "
                      "one part_config per partition, in order", what, node.partitioner(), config->num_shards(),
                      node.part_config_size());
  }
  for (int p = 0; p < node.part_config_size(); ++p) {
    const Node& part = node.part_config(p);
    const std::string part_what = fmt::format("{}.part_config[{}]", what, p);
    if (part.var_name().empty() || !names.insert(part.var_name()).second) {
      return make_error(errc::invalid_argument, "{}: var_name \"{}\" is empty or used twice; name partitions "
                        "\"<variable>/part_<i>:0\"", part_what, part.var_name());
    }
    if (!part.partitioner().empty() || part.part_config_size() > 0) {
      return make_error(errc::invalid_argument, "{}: a partition cannot be partitioned again; remove its partitioner "
                        "and part_config", part_what);
    }
    if (auto s = check_synchronizer(part, part_what, units, spec); !s) return s;
  }
  return ok_status();
}

Status validate_impl(const pb::autodist::Strategy& strategy, const GraphItem& item, const ResourceSpec* spec) {
  const auto& replicas = strategy.graph_config().replicas();
  if (replicas.empty()) {
    return make_error(errc::invalid_argument, "graph_config.replicas is empty; expected the data-parallel replica "
                      "devices, e.g. \"10.0.0.1:GPU:0\"");
  }
  std::set<std::string> seen_replicas;
  for (int r = 0; r < replicas.size(); ++r) {
    const std::string what = fmt::format("graph_config.replicas[{}]", r);
    if (auto s = check_device(replicas[r], what, spec); !s) return s;
    if (!seen_replicas.insert(replicas[r]).second) {
      return make_error(errc::invalid_argument, "{}: {} is listed twice; list each replica once", what, replicas[r]);
    }
  }
  int units = 0;  // synchronized variables and partitions: the bound on group indices
  for (const Node& node : strategy.node_config()) units += node.partitioner().empty() ? 1 : node.part_config_size();
  std::set<std::string> covered;
  std::set<std::string> names;
  for (int i = 0; i < strategy.node_config_size(); ++i) {
    const Node& node = strategy.node_config(i);
    const std::string what = where(i, node);
    const Variable* var = item.find(node.var_name());
    if (var == nullptr || !var->trainable) {
      return make_error(errc::invalid_argument, "{}: names no trainable variable of the graph item; remove the node or "
                        "fix its var_name", what);
    }
    if (!covered.insert(var->name).second) {
      return make_error(errc::invalid_argument, "{}: the variable already has a node; keep one node per variable", what);
    }
    names.insert(var->name);
    if (!node.partitioner().empty()) {
      if (auto s = check_partitioned(node, what, *var, units, names, spec); !s) return s;
      continue;
    }
    if (node.part_config_size() > 0) {
      return make_error(errc::invalid_argument, "{}: has {} part_config entries but no partitioner; set the partitioner "
                        "or remove the parts", what, node.part_config_size());
    }
    if (auto s = check_synchronizer(node, what, units, spec); !s) return s;
  }
  for (const Variable* var : item.trainable_variables()) {
    if (covered.count(var->name) == 0) {
      return make_error(errc::invalid_argument, "the trainable variable \"{}\" has no node in node_config; every "
                        "trainable variable needs a synchronizer", var->name);
    }
  }
  return ok_status();
}

}  // namespace

Status validate(const pb::autodist::Strategy& strategy, const GraphItem& item) {
  return validate_impl(strategy, item, nullptr);
}

Status validate(const pb::autodist::Strategy& strategy, const GraphItem& item, const ResourceSpec& spec) {
  return validate_impl(strategy, item, &spec);
}

}  // namespace apiary::core::strategy
