#include "core/strategy/graph_item.hpp"

#include <limits>
#include <set>

#include "core/strategy/json_reader.hpp"

namespace apiary::core::strategy {

std::int64_t Variable::num_elements() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::int64_t Variable::byte_size() const {
  return num_elements() * static_cast<std::int64_t>(messages::element_size(dtype));
}

std::string Variable::op_name() const {
  const std::size_t colon = name.rfind(':');
  if (colon == std::string::npos || colon + 1 == name.size()) return name;
  for (std::size_t k = colon + 1; k < name.size(); ++k) {
    if (name[k] < '0' || name[k] > '9') return name;
  }
  return name.substr(0, colon);
}

const Variable* GraphItem::find(std::string_view name) const {
  for (const auto& v : variables) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

std::vector<const Variable*> GraphItem::trainable_variables() const {
  std::vector<const Variable*> out;
  for (const auto& v : variables) {
    if (v.trainable) out.push_back(&v);
  }
  return out;
}

std::optional<std::string> GraphItem::gradient_of(std::string_view name) const {
  for (const auto& [grad, target] : grad_target_pairs) {
    if (target == name) return grad;
  }
  return std::nullopt;
}

bool is_sparse_gradient_key(std::string_view key) {
  std::size_t parts = 0;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = key.find(';', begin);
    const std::string_view part = key.substr(begin, end == std::string_view::npos ? end : end - begin);
    if (part.empty()) return false;
    ++parts;
    if (end == std::string_view::npos) break;
    begin = end + 1;
  }
  return parts == 3;
}

Status check_graph_item(const GraphItem& item) {
  std::set<std::string> names;
  for (std::size_t i = 0; i < item.variables.size(); ++i) {
    const Variable& v = item.variables[i];
    if (v.name.empty()) {
      return make_error(errc::invalid_argument, "variables[{}]: expected a tensor name such as \"dense/kernel:0\", got an empty name", i);
    }
    if (!names.insert(v.name).second) {
      return make_error(errc::invalid_argument, "variables[{}]: the name \"{}\" is used twice; every variable needs its own name", i, v.name);
    }
    std::int64_t elements = 1;
    for (std::size_t a = 0; a < v.shape.size(); ++a) {
      if (v.shape[a] < 0) {
        return make_error(errc::invalid_argument,
                          "variables[{}] (\"{}\"): shape[{}] is {}; expected a known extent >= 0 (the builders need "
                          "fully defined shapes)", i, v.name, a, v.shape[a]);
      }
      if (v.shape[a] > 0 && elements > std::numeric_limits<std::int64_t>::max() / 16 / v.shape[a]) {
        return make_error(errc::invalid_argument, "variables[{}] (\"{}\"): the shape has more elements than fit in 64 bits", i, v.name);
      }
      elements *= v.shape[a];
    }
  }
  std::set<std::string> targets;
  for (const auto& [grad, target] : item.grad_target_pairs) {
    const Variable* v = item.find(target);
    if (v == nullptr) {
      return make_error(errc::invalid_argument,
                        "grad_target_pairs: the gradient \"{}\" targets \"{}\", which is not a listed variable; "
                        "add the variable or fix the name", grad, target);
    }
    if (!targets.insert(target).second) {
      return make_error(errc::invalid_argument,
                        "grad_target_pairs: the variable \"{}\" has more than one gradient; expected one per variable",
                        target);
    }
    if (is_sparse_gradient_key(grad) != v->sparse) {
      return make_error(errc::invalid_argument,
                        "grad_target_pairs: the gradient \"{}\" of \"{}\" is {} but the variable is marked {}; a sparse "
                        "gradient is written \"indices;values;dense_shape\"", grad, target,
                        is_sparse_gradient_key(grad) ? "sparse" : "dense", v->sparse ? "sparse" : "dense");
    }
  }
  return ok_status();
}

namespace {

Result<Variable> read_variable(const DocumentReader& r, const Document& node, const std::string& path,
                               std::optional<bool>& sparse_given) {
  if (auto s = r.expect_fields(node, path, {"name", "shape", "dtype", "sparse", "trainable", "control_flow"}); !s) {
    return s.error();
  }
  Variable v;
  const Document* name = node.find("name");
  if (name == nullptr) return r.error(node, path, "missing the field \"name\" (the variable's tensor name)");
  auto n = r.string(*name, path + ".name");
  if (!n) return n.error();
  v.name = *n;
  const Document* shape = node.find("shape");
  if (shape == nullptr) return r.error(node, path, "missing the field \"shape\" (a list of extents, [] for a scalar)");
  auto dims = r.integer_list(*shape, path + ".shape", 0, std::numeric_limits<std::int64_t>::max());
  if (!dims) return dims.error();
  v.shape = std::move(*dims);
  if (const Document* dtype = node.find("dtype")) {
    auto d = r.string(*dtype, path + ".dtype");
    if (!d) return d.error();
    auto parsed = messages::parse_dtype(*d);
    if (!parsed) return r.error(*dtype, path + ".dtype", parsed.error().message);
    v.dtype = *parsed;
  }
  sparse_given.reset();
  if (const Document* sparse = node.find("sparse")) {
    auto b = r.boolean(*sparse, path + ".sparse");
    if (!b) return b.error();
    sparse_given = *b;
    v.sparse = *b;
  }
  for (auto [key, field] : {std::pair{"trainable", &v.trainable}, std::pair{"control_flow", &v.control_flow}}) {
    if (const Document* d = node.find(key)) {
      auto b = r.boolean(*d, path + "." + key);
      if (!b) return b.error();
      *field = *b;
    }
  }
  return v;
}

}  // namespace

Result<GraphItem> parse_graph_item_json(std::string_view text, std::string_view source) {
  auto doc = parse_json(text, source);
  if (!doc) return doc.error();
  const DocumentReader r{std::string(source)};
  if (auto s = r.expect_fields(*doc, "graph item", {"variables", "grad_target_pairs"}); !s) return s.error();
  auto listed = r.required_list(*doc, "graph item", "variables",
                                "missing the field \"variables\" (the list of variables)");
  if (!listed) return listed.error();
  const Document* vars = *listed;
  GraphItem item;
  std::vector<std::optional<bool>> sparse_given;
  for (std::size_t i = 0; i < vars->items.size(); ++i) {
    std::optional<bool> given;
    auto v = read_variable(r, vars->items[i], fmt::format("variables[{}]", i), given);
    if (!v) return v.error();
    if (item.find(v->name) != nullptr) {
      return r.error(vars->items[i], fmt::format("variables[{}].name", i),
                     fmt::format("the name \"{}\" is used twice; every variable needs its own name", v->name));
    }
    item.variables.push_back(std::move(*v));
    sparse_given.push_back(given);
  }
  if (const Document* pairs = doc->find("grad_target_pairs")) {
    if (auto s = r.expect_map(*pairs, "grad_target_pairs"); !s) return s.error();
    for (const auto& [grad, target_node] : pairs->fields) {
      const std::string path = fmt::format("grad_target_pairs[\"{}\"]", grad);
      auto target = r.string(target_node, path);
      if (!target) return target.error();
      const bool sparse = is_sparse_gradient_key(grad);
      for (std::size_t i = 0; i < item.variables.size(); ++i) {
        if (item.variables[i].name != *target) continue;
        if (sparse_given[i] && *sparse_given[i] != sparse) {
          return r.error(target_node, path,
                         fmt::format("the gradient is {} but variables[{}] says \"sparse\": {}; a sparse gradient is "
                                     "written \"indices;values;dense_shape\"",
                                     sparse ? "sparse" : "dense", i, *sparse_given[i]));
        }
        item.variables[i].sparse = sparse;
      }
      item.grad_target_pairs.emplace(grad, *target);
    }
  }
  if (auto s = check_graph_item(item); !s) {
    return make_error(s.error().code, "{}: {}", source, s.error().message);
  }
  return item;
}

pb::autodist::GraphItem to_pb(const GraphItem& item) {
  pb::autodist::GraphItem out;
  for (const auto& [grad, target] : item.grad_target_pairs) (*out.mutable_grad_target_pairs())[grad] = target;
  return out;
}

}  // namespace apiary::core::strategy
