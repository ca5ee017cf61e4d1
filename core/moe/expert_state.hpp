#pragma once
/// The saved state of a C++ expert (its parameters), for checkpoints: a header naming
/// the expert class, its hidden_dim and each array's length, then the arrays' float32
/// values as they lie in memory (little-endian), so a load gives back the same bits.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "messages/result.hpp"

namespace apiary::core::moe {

/// The state of expert class `cls` of hidden_dim `h` holding `arrays`.
[[nodiscard]] std::string pack_state(std::string_view cls, std::uint32_t h, const std::vector<const std::vector<float>*>& arrays);
/// Reads pack_state's form into `arrays` (all or nothing). Errors: errc::malformed for a
/// state of another class, hidden_dim or array lengths, or a truncated one.
[[nodiscard]] Status unpack_state(std::string_view state, std::string_view cls, std::uint32_t h,
                                  const std::vector<std::vector<float>*>& arrays);

}  // namespace apiary::core::moe
