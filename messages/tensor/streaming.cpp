#include "messages/tensor/streaming.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

namespace apiary::messages {
namespace {

// Whether a later chunk carries anything but buffer bytes.
bool carries_metadata(const pb::Tensor& chunk) {
  return !chunk.dtype().empty() || chunk.size_size() > 0 || chunk.requires_grad() ||
         chunk.compression() != pb::NONE || chunk.chunks() != 0;
}

}  // namespace

std::vector<pb::Tensor> split_for_streaming(const pb::Tensor& message, std::size_t chunk_bytes) {
  if (chunk_bytes == 0) chunk_bytes = default_chunk_bytes;
  const std::string& buffer = message.buffer();
  const std::size_t total = buffer.size();
  constexpr std::size_t max_chunks = std::numeric_limits<std::int32_t>::max();
  chunk_bytes = std::max(chunk_bytes, (total + max_chunks - 1) / max_chunks);
  const std::size_t count = (total + chunk_bytes - 1) / chunk_bytes;

  std::vector<pb::Tensor> out;
  out.reserve(std::max<std::size_t>(count, 1));
  // First chunk: all metadata, the announced count, and the first slice.
  pb::Tensor& first = out.emplace_back();
  first.mutable_size()->CopyFrom(message.size());
  first.set_requires_grad(message.requires_grad());
  first.set_dtype(message.dtype());
  first.set_compression(message.compression());
  first.set_chunks(static_cast<std::int32_t>(count));
  first.set_buffer(buffer.data(), std::min(total, chunk_bytes));
  // Later chunks: buffer slices only.
  for (std::size_t offset = chunk_bytes; offset < total; offset += chunk_bytes) {
    out.emplace_back().set_buffer(buffer.data() + offset, std::min(chunk_bytes, total - offset));
  }
  return out;
}

Result<bool> StreamAssembler::push(pb::Tensor chunk) {
  if (!started_) {
    if (chunk.chunks() < 0) {
      return make_error(errc::malformed,
                        "first tensor chunk announces {} chunks: expected 0 or more; the "
                        "sender is broken",
                        chunk.chunks());
    }
    // chunks = 0: an empty buffer, or a tensor sent whole; either way one message.
    expected_ = std::max<std::size_t>(static_cast<std::size_t>(chunk.chunks()), 1);
    received_ = 1;
    started_ = true;
    joined_ = std::move(chunk);
    joined_.set_chunks(0);
    return complete();
  }
  if (complete()) {
    return make_error(errc::protocol,
                      "tensor stream sent chunk {} but announced {}: expected the stream to "
                      "end; the sender's chunk count is wrong",
                      received_ + 1, expected_);
  }
  if (carries_metadata(chunk)) {
    return make_error(errc::protocol,
                      "tensor chunk {} of {} carries metadata (dtype \"{}\", {} dims): expected "
                      "buffer bytes only; a new tensor began before this one was complete",
                      received_ + 1, expected_, chunk.dtype(), chunk.size_size());
  }
  joined_.mutable_buffer()->append(chunk.buffer());
  ++received_;
  return complete();
}

Result<pb::Tensor> StreamAssembler::finish() {
  if (!complete()) {
    const std::size_t got = received_;
    const std::size_t want = expected_;
    reset();
    if (got == 0) {
      return make_error(errc::truncated,
                        "tensor stream ended before its first chunk: expected at least one "
                        "message; the sender stopped or the connection dropped");
    }
    return make_error(errc::truncated,
                      "tensor stream ended after {} of {} announced chunks: expected all of "
                      "them; the sender stopped or the connection dropped, retry the transfer",
                      got, want);
  }
  pb::Tensor out = std::move(joined_);
  reset();
  return out;
}

void StreamAssembler::reset() {
  joined_.Clear();
  started_ = false;
  expected_ = 0;
  received_ = 0;
}

Result<pb::Tensor> combine_from_streaming(std::vector<pb::Tensor> chunks) {
  StreamAssembler assembler;
  for (pb::Tensor& chunk : chunks) {
    auto pushed = assembler.push(std::move(chunk));
    if (!pushed) return pushed.error();
  }
  return assembler.finish();
}

}  // namespace apiary::messages
