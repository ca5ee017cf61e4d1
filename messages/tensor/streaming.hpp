#pragma once
/// Splitting a serialized tensor into a stream of chunk messages and joining it back
/// (hivemind's split_for_streaming / combine_from_streaming). The first chunk carries the
/// metadata and the announced chunk count; later chunks carry only buffer bytes. Unlike
/// upstream, joining checks the announced count, so a cut or over-long stream is an error.
#include <cstddef>
#include <vector>

#include "messages/result.hpp"
#include "runtime.pb.h"

namespace apiary::messages {

/// Default chunk size in bytes: 64 KiB, what hivemind uses for state download.
inline constexpr std::size_t default_chunk_bytes = std::size_t{1} << 16;

/// Splits `message` into chunks of at most `chunk_bytes` buffer bytes (0 means the
/// default). The first chunk carries size, dtype, requires_grad, compression and
/// chunks = ceil(buffer / chunk_bytes); the others only a buffer slice. An empty buffer
/// gives one message with chunks = 0. If the count would not fit the int32 `chunks`
/// field, chunks are made larger so that it does.
std::vector<pb::Tensor> split_for_streaming(const pb::Tensor& message,
                                            std::size_t chunk_bytes = default_chunk_bytes);

/// Joins one tensor's stream incrementally, as chunks arrive.
class StreamAssembler {
 public:
  /// Feeds the next chunk. Returns true once the announced number of chunks has arrived
  /// (or at once for a single message with chunks = 0). Errors: errc::protocol for a
  /// chunk after completion or a later chunk carrying metadata (a new tensor started
  /// early); errc::malformed for a negative chunk count. After an error the assembler
  /// must be reset().
  Result<bool> push(pb::Tensor chunk);

  /// Whether every announced chunk has arrived.
  [[nodiscard]] bool complete() const { return started_ && received_ == expected_; }
  /// Whether a first chunk has arrived.
  [[nodiscard]] bool started() const { return started_; }
  /// Chunks received so far.
  [[nodiscard]] std::size_t received() const { return received_; }

  /// The joined tensor (chunks = 0, as if never split) and a reset assembler;
  /// errc::truncated if chunks are still missing.
  Result<pb::Tensor> finish();

  /// Forgets any partial tensor.
  void reset();

 private:
  pb::Tensor joined_;
  bool started_ = false;
  std::size_t expected_ = 0;  // chunks announced by the first chunk (at least 1)
  std::size_t received_ = 0;
};

/// Joins a whole stream made by split_for_streaming. Errors: errc::truncated for an
/// empty stream or fewer chunks than announced; errc::protocol for more chunks than
/// announced or a later chunk carrying metadata; errc::malformed for a negative count.
Result<pb::Tensor> combine_from_streaming(std::vector<pb::Tensor> chunks);

}  // namespace apiary::messages
