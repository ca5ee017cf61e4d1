#pragma once
/// A filter over a core's effects, for tests that drive a core by hand.
#include <variant>
#include <vector>

#include "core/effects.hpp"

namespace apiary::testing {

/// The effects of type T in `fx`, in order.
template <class T>
std::vector<T> all_of(const core::Effects& fx) {
  std::vector<T> out;
  for (const auto& e : fx) {
    if (const T* x = std::get_if<T>(&e)) out.push_back(*x);
  }
  return out;
}

}  // namespace apiary::testing
