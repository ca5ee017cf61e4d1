#pragma once
/// What the state-sharing tests share: the names they use, and tensors of given shapes
/// filled by a rule, to stream from a donor.
#include <chrono>
#include <cstddef>
#include <utility>
#include <vector>

#include "averaging.pb.h"
#include "core/averaging/state_sharing.hpp"
#include "tests/core/effects_of.hpp"

namespace apiary::core::averaging::testing {

namespace av = apiary::core::averaging;
namespace pb = apiary::pb;
using apiary::errc;
using namespace apiary::core;
using apiary::messages::Shape;
using std::chrono::seconds;
using apiary::testing::all_of;

/// One tensor of floats per shape in `shapes`, element `i` of tensor `t` set to
/// `value(t, i)`.
template <class Value>
std::vector<std::vector<float>> tensors_of(const std::vector<Shape>& shapes, Value value) {
  std::vector<std::vector<float>> tensors;
  for (const Shape& shape : shapes) {
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> t(n);
    for (std::size_t i = 0; i < n; ++i) t[i] = value(tensors.size(), i);
    tensors.push_back(std::move(t));
  }
  return tensors;
}

}  // namespace apiary::core::averaging::testing
