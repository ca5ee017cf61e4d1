#pragma once
/// What the device actors share (internal to actors/device/): float32 buffer lengths,
/// with errors that name the operation and the argument, and the error-feedback reset.
#include <cstddef>
#include <string>

#include "messages/buffer.hpp"
#include "messages/result.hpp"
#include "messages/tensor/compressors.hpp"

namespace apiary::actors::device_checks {

/// The number of float32 values in `b`, or errc::invalid_argument naming the operation
/// and the argument when its byte count is not a multiple of 4.
inline Result<std::size_t> float_count(const Buffer& b, const char* op, const char* arg) {
  if (b.size() % sizeof(float) != 0) {
    return make_error(errc::invalid_argument,
                      "device {}: expected '{}' to hold float32 values (a multiple of 4 bytes), "
                      "got {} bytes; pass float32 data or convert it first",
                      op, arg, b.size());
  }
  return b.size() / sizeof(float);
}

/// The common length of two float32 buffers, or errc::invalid_argument.
inline Result<std::size_t> same_length(const Buffer& a, const Buffer& b, const char* op,
                                       const char* a_name, const char* b_name) {
  auto na = float_count(a, op, a_name);
  if (!na) return na;
  auto nb = float_count(b, op, b_name);
  if (!nb) return nb;
  if (*na != *nb) {
    return make_error(errc::invalid_argument,
                      "device {}: expected '{}' and '{}' of the same length, got {} and {} float32 "
                      "values; pass tensors of the same shape",
                      op, a_name, b_name, *na, *nb);
  }
  return *na;
}

/// Forgets the error-feedback residual of `key` (every residual when `key` is empty);
/// true when there was one to forget. The ef_reset_request of every device actor.
inline bool reset_residuals(messages::HorovodCompressorEF& ef, const std::string& key) {
  const bool had = key.empty() ? ef.size() > 0 : !ef.residual(key).empty();
  if (key.empty()) {
    ef.reset();
  } else {
    ef.reset(key);
  }
  return had;
}

/// The bytes of `b` as float32 values.
inline float* floats(Buffer& b) { return reinterpret_cast<float*>(b.data()); }
/// The bytes of `b` as float32 values.
inline const float* floats(const Buffer& b) { return reinterpret_cast<const float*>(b.data()); }

/// The error for a null pointer into the actor's memory.
inline Error null_memory(const char* op) {
  return make_error(errc::invalid_argument,
                    "device {}: expected a pointer into the device actor's memory, got null; pass the "
                    "tensor's data pointer",
                    op);
}

}  // namespace apiary::actors::device_checks
