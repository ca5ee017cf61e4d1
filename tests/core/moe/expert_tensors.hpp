#pragma once
// Helpers of the expert tests: float32 batches, ExpertRequests, the replies of the
// server role read back, and its pool timer fired as a host with nothing else queued does.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/effects.hpp"
#include "core/moe/expert_server_role.hpp"
#include "core/rng.hpp"
#include "messages/tensor/codec.hpp"
#include "messages/tensor/tensor.hpp"
#include "runtime.pb.h"

namespace expert_test {

using apiary::messages::Tensor;

/// `fx` of `role` as a host that holds no other input sees them: the pool timer armed for
/// `now` or before fires at once, its effects following (the SetTimer itself dropped).
inline apiary::core::Effects settled(apiary::core::moe::ExpertServerRole& role, apiary::core::TimePoint now,
                                     apiary::core::Effects fx) {
  apiary::core::Effects out;
  bool due = false;
  for (auto& effect : fx) {
    const auto* timer = std::get_if<apiary::core::SetTimer>(&effect);
    if (timer != nullptr && timer->id == apiary::core::moe::k_pool_timer && timer->at <= now) {
      due = true;
      continue;
    }
    out.push_back(std::move(effect));
  }
  if (due) {
    auto more = settled(role, now, role.on(now, apiary::core::TimerFired{apiary::core::moe::k_pool_timer}));
    for (auto& effect : more) out.push_back(std::move(effect));
  }
  return out;
}

/// A [rows, h] float32 tensor of `values` (rows * h of them).
inline Tensor rows_of(const std::vector<float>& values, std::uint32_t h) {
  auto t = Tensor::copy_of(apiary::messages::dtype::float32, {static_cast<std::uint32_t>(values.size() / h), h},
                           values.data(), values.size() * sizeof(float));
  REQUIRE(t.ok());
  return *t;
}

/// `n` floats uniform in [-1, 1) from `seed`.
inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
  apiary::core::Rng rng(seed);
  std::vector<float> out(n);
  for (float& v : out) v = static_cast<float>(2.0 * rng.uniform01() - 1.0);
  return out;
}

/// The elements of a float32 tensor.
inline std::vector<float> floats(const Tensor& t) {
  std::vector<float> out(t.numel());
  if (!out.empty()) std::memcpy(out.data(), t.bytes().data(), t.byte_size());
  return out;
}

/// Largest absolute difference of two equally long vectors (infinity if the lengths differ).
inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  float worst = 0.0f;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::fmax(worst, std::fabs(a[i] - b[i]));
  return worst;
}

/// A serialized ExpertRequest for `uid` with `tensors` (NONE compression).
inline apiary::Buffer request(const std::string& uid, const std::vector<Tensor>& tensors) {
  apiary::pb::ExpertRequest r;
  r.set_uid(uid);
  for (const Tensor& t : tensors) *r.add_tensors() = apiary::messages::encode_none(t);
  return apiary::Buffer::copy_of(r.SerializeAsString());
}

/// The replies among `fx`, in order.
inline std::vector<apiary::core::Reply> replies(const apiary::core::Effects& fx) {
  std::vector<apiary::core::Reply> out;
  for (const auto& e : fx) {
    if (const auto* r = std::get_if<apiary::core::Reply>(&e)) out.push_back(*r);
  }
  return out;
}

/// The tensors of a successful reply's ExpertResponse, decoded.
inline std::vector<Tensor> response_tensors(const apiary::core::Reply& reply) {
  REQUIRE(reply.response.ok());
  apiary::pb::ExpertResponse response;
  REQUIRE(response.ParseFromString(*reply.response));
  std::vector<Tensor> out;
  for (const auto& wire : response.tensors()) {
    auto t = apiary::messages::decode(wire);
    REQUIRE(t.ok());
    out.push_back(*t);
  }
  return out;
}

}  // namespace expert_test
