#include "support.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>

namespace strategy_test {

using namespace apiary::core::strategy;

std::string example(const std::string& name) {
  const std::string path = std::string(APIARY_AUTODIST_EXAMPLES) + "/" + name;
  std::ifstream in(path, std::ios::binary);
  INFO(path);
  REQUIRE(in.good());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

GraphItem golden_item() {
  auto item = parse_graph_item_json(example("graph_item.json"), "graph_item.json");
  INFO((item.ok() ? std::string() : item.error().what()));
  REQUIRE(item.ok());
  return *item;
}

ResourceSpec golden_spec() { return spec_from(example("resource_spec.yml")); }

ResourceSpec spec_from(const std::string& yaml) {
  auto spec = parse_resource_spec(yaml, "spec.yml");
  INFO((spec.ok() ? std::string() : spec.error().what()));
  REQUIRE(spec.ok());
  return *spec;
}

std::string spec_error(const std::string& yaml) {
  auto spec = parse_resource_spec(yaml, "spec.yml");
  REQUIRE_FALSE(spec.ok());
  return spec.error().message;
}

}  // namespace strategy_test
