// GraphItem: the JSON file, sizes and names, and errors naming line, column and field.
#include <catch2/catch.hpp>

#include "core/strategy/graph_item.hpp"
#include "support.hpp"

namespace {

using namespace apiary::core::strategy;
using apiary::errc;
using Catch::Matchers::Contains;

std::string item_error(const std::string& json) {
  auto item = parse_graph_item_json(json, "g.json");
  REQUIRE_FALSE(item.ok());
  return item.error().message;
}

}  // namespace

TEST_CASE("graph item: the example file") {
  const GraphItem item = strategy_test::golden_item();
  REQUIRE(item.variables.size() == 5);
  const Variable& v0 = item.variables[0];
  CHECK(v0.name == "v0:0");
  CHECK(v0.shape == std::vector<std::int64_t>{10000, 16});
  CHECK(v0.byte_size() == 640000);
  CHECK(v0.sparse);  // from its "indices;values;dense_shape" gradient key
  CHECK_FALSE(item.variables[1].sparse);
  CHECK(item.variables[1].byte_size() == 1024);
  CHECK(item.variables[4].byte_size() == 4);
  CHECK(item.trainable_variables().size() == 5);
  CHECK(item.gradient_of("v1:0") == std::optional<std::string>("gradients/v1_grad:0"));
  CHECK(to_pb(item).grad_target_pairs().size() == 5);
}

TEST_CASE("graph item: names, dtypes, scalars and non-trainable variables") {
  auto item = parse_graph_item_json(
      R"({"variables": [
            {"name": "scope/w:0", "shape": [], "dtype": "float64"},
            {"name": "step", "shape": [2, 3], "dtype": "int8", "trainable": false, "control_flow": true}]})",
      "g.json");
  REQUIRE(item.ok());
  CHECK(item->variables[0].op_name() == "scope/w");
  CHECK(item->variables[0].num_elements() == 1);
  CHECK(item->variables[0].byte_size() == 8);
  CHECK(item->variables[1].op_name() == "step");
  CHECK(item->variables[1].byte_size() == 6);
  CHECK(item->variables[1].control_flow);
  CHECK(item->trainable_variables().size() == 1);
}

TEST_CASE("graph item: bad files give the position and the field") {
  CHECK_THAT(item_error(R"({"variables": [{"name": "a", "shape": [2], "dtyp": "float32"}]})"),
             Contains("g.json:1:") && Contains("variables[0]") && Contains("unknown field \"dtyp\""));
  CHECK_THAT(item_error("{\"variables\": [\n {\"name\": \"a\", \"shape\": [2, -1]}]}"),
             Contains("g.json:2:") && Contains("variables[0].shape[1]"));
  CHECK_THAT(item_error(R"({"variables": [{"name": "a", "shape": "2"}]})"), Contains("variables[0].shape: expected a list"));
  CHECK_THAT(item_error(R"({"variables": [{"name": "a", "shape": [2], "dtype": "float"}]})"),
             Contains("variables[0].dtype") && Contains("float32"));
  CHECK_THAT(item_error(R"({"variables": [{"shape": [2]}]})"), Contains("missing the field \"name\""));
  CHECK_THAT(item_error(R"({"vars": []})"), Contains("unknown field \"vars\""));
  CHECK_THAT(item_error(R"({"variables": [{"name": "a", "shape": [1]}, {"name": "a", "shape": [1]}]})"),
             Contains("variables[1].name") && Contains("used twice"));
  CHECK_THAT(item_error(R"({"variables": [{"name": "a", "shape": [1]}], "grad_target_pairs": {"g:0": "b"}})"),
             Contains("\"b\", which is not a listed variable"));
  CHECK_THAT(item_error(R"({"variables": [{"name": "a", "shape": [1]}],
                            "grad_target_pairs": {"g:0": "a", "h:0": "a"}})"),
             Contains("more than one gradient"));
  CHECK_THAT(item_error(R"({"variables": [{"name": "a", "shape": [4], "sparse": false}],
                            "grad_target_pairs": {"i;v;s": "a"}})"),
             Contains("grad_target_pairs[\"i;v;s\"]") && Contains("\"sparse\": false"));
  CHECK_THAT(item_error(R"({"variables": [{"name": "a", "shape": [4], "sparse": true}],
                            "grad_target_pairs": {"g:0": "a"}})"),
             Contains("the gradient is dense"));
  CHECK_THAT(item_error("[1, 2]"), Contains("expected a map"));
  CHECK_THAT(item_error("{"), Contains("invalid JSON"));
}

TEST_CASE("graph item: checks of an item built in code") {
  GraphItem item;
  item.variables.push_back(Variable{"a:0", {4}, apiary::messages::dtype::float32, true});
  item.grad_target_pairs["g:0"] = "a:0";
  auto s = check_graph_item(item);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == errc::invalid_argument);
  CHECK_THAT(s.error().message, Contains("variable is marked sparse"));
  item.grad_target_pairs.clear();
  item.grad_target_pairs["i:0;v:0;s:0"] = "a:0";
  CHECK(check_graph_item(item).ok());
  CHECK(is_sparse_gradient_key("i;v;s"));
  CHECK_FALSE(is_sparse_gradient_key("i;v"));
  CHECK_FALSE(is_sparse_gradient_key("i;;s"));
}
