#pragma once
/// The requests a device actor serves, as plain structs (no CAF here, so that a CUDA
/// device actor and non-actor code can share them). Every buffer holds float32 values,
/// little-endian, 4 bytes each; requests never modify their Buffers (shared and
/// immutable once filled): every result is a new Buffer or Tensor. read_request and
/// add_scaled_request address the actor's own memory (a GPU's for the CUDA actor).
#include <cstdint>
#include <string>
#include <vector>

#include "core/averaging/part_reducer.hpp"
#include "messages/buffer.hpp"
#include "messages/tensor/tensor.hpp"
#include "runtime.pb.h"

namespace apiary::actors {

/// acc + weight * x, element-wise (float multiply then float add, never fused).
/// Replies Result<Buffer>; acc and x must hold the same number of float32 values.
struct accumulate_request {
  Buffer acc;          ///< the running sum, float32
  Buffer x;            ///< the addend, float32
  float weight = 1.0f; ///< the addend's weight (e.g. its share of the batch)
};

/// sum / count, element-wise in float32. Replies Result<Buffer>; count must be > 0.
struct average_request {
  Buffer sum;               ///< the sum of `count` contributions, float32
  std::uint64_t count = 1;  ///< how many contributions the sum holds
};

/// a - b, element-wise (e.g. new parameters minus old: the update to send). Replies
/// Result<Buffer>; a and b must hold the same number of float32 values.
struct delta_request {
  Buffer a;  ///< the minuend, float32
  Buffer b;  ///< the subtrahend, float32
};

/// One part of a butterfly all-reduce: the weighted average of the contributors' copies
/// and each one's delta (core::averaging::reduce_part, the CPU reference; every device
/// gives its bits). Replies Result<core::averaging::ReducedPart>; the job's buffers are
/// reused for the deltas. Errors: check_reduce_job's.
struct reduce_part_request {
  core::averaging::ReduceJob job;  ///< inputs, weights and the caller's id
};

/// Copies `n` float32 values of the device actor's memory (a CUDA device pointer for the
/// CUDA actor, host memory for the CPU one) to the host. Replies Result<std::vector<float>>.
/// The caller keeps the memory alive and unchanged until the reply.
struct read_request {
  const float* src = nullptr;  ///< in the actor's memory
  std::size_t n = 0;           ///< floats
};

/// dst += alpha * x on the device actor's memory (e.g. a delta applied to a tensor that
/// lives on the GPU), or dst = x with `overwrite` (alpha unused). Replies Status. The
/// caller keeps `dst` alive until the reply.
struct add_scaled_request {
  float* dst = nullptr;  ///< x.size() floats in the actor's memory
  std::vector<float> x;  ///< host values
  float alpha = 1.0f;
  bool overwrite = false;
};

/// encode() of messages/tensor/codec.hpp. Replies Result<pb::Tensor>.
struct encode_request {
  messages::Tensor tensor;                          ///< any dtype the codec takes
  pb::CompressionType codec = pb::CompressionType::NONE;  ///< the wire compression
};

/// decode() of messages/tensor/codec.hpp. Replies Result<messages::Tensor>.
struct decode_request {
  pb::Tensor message;  ///< a complete (not streamed) wire tensor
};

/// HorovodCompressorEF::compress with the actor's own residuals: fp16(x + r[key]).
/// Replies Result<messages::Tensor> (float16, the input's shape).
struct ef_compress_request {
  std::string key;          ///< the tensor's name; one residual per key
  messages::Tensor tensor;  ///< float32
};

/// Forgets the residual of `key`, or every residual when `key` is empty. Replies bool:
/// whether a residual was forgotten.
struct ef_reset_request {
  std::string key;  ///< the tensor's name; empty = all
};

}  // namespace apiary::actors
