#pragma once
// Shared helpers of the core/strategy tests: the example files and small fixtures.
#include <string>

#include "core/strategy/graph_item.hpp"
#include "core/strategy/resource_spec.hpp"

namespace strategy_test {

/// The contents of examples/autodist/<name>; fails the test if unreadable.
std::string example(const std::string& name);
/// examples/autodist/graph_item.json: v0 [10000,16] (sparse), v1 [16,16], v2 [16],
/// v3 [16,1], v4 [1], all float32.
apiary::core::strategy::GraphItem golden_item();
/// examples/autodist/resource_spec.yml: hosts A=192.168.0.1 (chief) and B=192.168.0.2,
/// two GPUs each.
apiary::core::strategy::ResourceSpec golden_spec();
/// Parses a resource spec that must be valid.
apiary::core::strategy::ResourceSpec spec_from(const std::string& yaml);
/// The error message of parsing `yaml` as a resource spec (fails the test if it parses).
std::string spec_error(const std::string& yaml);

inline const std::string A = "192.168.0.1:CPU:0";
inline const std::string B = "192.168.0.2:CPU:0";

}  // namespace strategy_test
