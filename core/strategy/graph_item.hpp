#pragma once
/// GraphItem: what the strategy builders need to know about a model: its variables
/// (name, shape, dtype, dense or sparse gradient) in creation order, and which gradient
/// tensor updates which variable. AutoDist takes this from a TensorFlow graph; here it
/// comes from a small JSON file (format in core/strategy/README.md):
///
///   {"variables": [{"name": "emb:0", "shape": [10000, 16], "dtype": "float32",
///                   "sparse": true}, ...],
///    "grad_target_pairs": {"grad/emb/indices:0;grad/emb/values:0;grad/emb/shape:0": "emb:0"}}
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graphitem.pb.h"
#include "messages/result.hpp"
#include "messages/tensor/dtype.hpp"

namespace apiary::core::strategy {

/// One model variable.
struct Variable {
  /// Tensor name, e.g. "dense/kernel:0"; unique in the graph item.
  std::string name;
  /// Extent of every axis (elements); empty for a scalar. Fully defined (no unknowns).
  std::vector<std::int64_t> shape;
  /// Element type; its size gives the variable's bytes.
  messages::dtype dtype = messages::dtype::float32;
  /// Whether the gradient is sparse (indices + values, TF's IndexedSlices), as for an
  /// embedding looked up by ids. Sparse variables can only be split along axis 0.
  bool sparse = false;
  /// Whether the optimizer trains it; builders only place trainable variables.
  bool trainable = true;
  /// Whether a control-flow op (a while loop, a cond) consumes it directly; such a
  /// variable is never partitioned.
  bool control_flow = false;

  /// Elements: the product of the shape (1 for a scalar).
  [[nodiscard]] std::int64_t num_elements() const;
  /// Bytes: num_elements() times the element size (the builders' load unit).
  [[nodiscard]] std::int64_t byte_size() const;
  /// The name without its ":<output>" suffix ("dense/kernel"), as partitions are named
  /// after it ("dense/kernel/part_0:0").
  [[nodiscard]] std::string op_name() const;
};

/// The variables of a model and its gradient -> variable map.
struct GraphItem {
  /// Every variable, in creation order (the order the builders visit them).
  std::vector<Variable> variables;
  /// Gradient tensor name -> variable name. A sparse gradient's key is its three tensors
  /// joined by ';' ("indices;values;dense_shape"), as AutoDist writes it.
  std::map<std::string, std::string> grad_target_pairs;

  /// The variable named `name`, or nullptr.
  [[nodiscard]] const Variable* find(std::string_view name) const;
  /// The trainable variables in creation order.
  [[nodiscard]] std::vector<const Variable*> trainable_variables() const;
  /// The gradient of the variable named `name`, if grad_target_pairs lists one.
  [[nodiscard]] std::optional<std::string> gradient_of(std::string_view name) const;
};

/// Checks a GraphItem built in code: names non-empty and unique, shapes >= 0, every
/// gradient target a variable, at most one gradient per variable, a ';'-joined (sparse)
/// gradient key only for a sparse variable and the reverse. Errors: invalid_argument.
[[nodiscard]] Status check_graph_item(const GraphItem& item);

/// Parses the JSON form (see above). Unknown fields, wrong types and a failing
/// check_graph_item are errors (malformed or invalid_argument) naming `source`, the line
/// and column, and the field ("variables[2].shape[0]"). A variable without "sparse"
/// takes it from its gradient key.
[[nodiscard]] Result<GraphItem> parse_graph_item_json(std::string_view text, std::string_view source);

/// The seed's wire form: grad_target_pairs only (the graph itself is TensorFlow's and
/// is not modelled here).
[[nodiscard]] pb::autodist::GraphItem to_pb(const GraphItem& item);

/// Whether a gradient key names a sparse gradient: three non-empty names joined by ';'.
[[nodiscard]] bool is_sparse_gradient_key(std::string_view key);

}  // namespace apiary::core::strategy
