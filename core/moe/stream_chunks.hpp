#pragma once
/// The streamed forms of ExpertRequest and ExpertResponse (hivemind's rpc_forward_stream
/// and rpc_backward_stream, reference §6.1 and §11.3): each tensor split into chunks of
/// at most k_stream_chunk_bytes buffer bytes (messages/tensor/streaming.hpp: the first
/// chunk carries size, dtype, compression and the chunk count, the later ones buffer
/// bytes only), one chunk per message, the tensors one after the other. Joining reads
/// the chunks back message by message, checking the announced counts, the uid and a
/// byte limit, so a malformed or cut stream is a clear error, not a wrong tensor.
#include <cstddef>
#include <string>
#include <vector>

#include "messages/buffer.hpp"
#include "messages/result.hpp"
#include "messages/tensor/streaming.hpp"
#include "runtime.pb.h"

namespace apiary::core::moe {

/// Buffer bytes per streamed chunk: hivemind's DEFAULT_MAX_MSG_SIZE (4 MiB), what its
/// client and server pass to split_for_streaming.
inline constexpr std::size_t k_stream_chunk_bytes = std::size_t{4} << 20;
/// A client streams a request whose serialized size exceeds this many bytes (hivemind's
/// MAX_UNARY_PAYLOAD_SIZE, 2 MiB), and calls unary otherwise.
inline constexpr std::size_t k_max_unary_payload = std::size_t{2} << 20;
/// The most buffer bytes a joiner takes from one stream by default: 1 GiB, the
/// transport's frame limit, so that a stream cannot grow a server's memory without end.
inline constexpr std::size_t k_max_stream_bytes = std::size_t{1} << 30;

/// The messages of a streamed ExpertRequest for expert `uid`: every chunk of every
/// tensor of `tensors` in order, one per message, each message carrying `uid` (as
/// hivemind's client does; its server refuses a later message naming another uid).
[[nodiscard]] std::vector<std::string> request_stream(const std::string& uid, const std::vector<pb::Tensor>& tensors,
                                                      std::size_t chunk_bytes = k_stream_chunk_bytes);
/// The messages of a streamed ExpertResponse: every chunk of every tensor, one per message.
[[nodiscard]] std::vector<std::string> response_stream(const std::vector<pb::Tensor>& tensors,
                                                       std::size_t chunk_bytes = k_stream_chunk_bytes);

/// Joins the tensors of a stream, chunk after chunk, as its messages arrive.
class ChunkJoiner {
 public:
  explicit ChunkJoiner(std::size_t max_bytes = k_max_stream_bytes) : max_bytes_(max_bytes) {}

  /// Takes the next chunk. A tensor's first chunk must carry its dtype. Errors:
  /// errc::malformed for a first chunk without a dtype or a negative chunk count,
  /// errc::protocol for a later chunk with metadata before the announced count came,
  /// errc::too_large past the byte limit. After an error the joiner is unusable.
  [[nodiscard]] Status add(pb::Tensor chunk);
  /// The whole tensors, in order. Errors: errc::truncated when the last tensor lacks
  /// announced chunks.
  [[nodiscard]] Result<std::vector<pb::Tensor>> finish();

  /// Buffer bytes taken so far.
  [[nodiscard]] std::size_t bytes() const { return bytes_; }

 private:
  messages::StreamAssembler current_;
  std::vector<pb::Tensor> done_;
  std::size_t bytes_ = 0;
  std::size_t max_bytes_;
};

/// Joins a streamed ExpertRequest message by message: the uid of its first message (a
/// later message names the same uid or none) and its whole tensors.
class RequestJoiner {
 public:
  explicit RequestJoiner(std::size_t max_bytes = k_max_stream_bytes) : tensors_(max_bytes) {}

  /// Takes the next serialized ExpertRequest. Errors: errc::malformed for bytes that are
  /// not one, errc::invalid_argument for a uid other than the first message's, and
  /// ChunkJoiner::add's, each naming the message.
  [[nodiscard]] Status add(const Buffer& message);
  /// The uid of the first message ("" before it).
  [[nodiscard]] const std::string& uid() const { return uid_; }
  /// The whole request: the uid and the joined tensors. Errors: ChunkJoiner::finish's.
  [[nodiscard]] Result<pb::ExpertRequest> finish();

 private:
  std::string uid_;
  std::size_t messages_ = 0;
  ChunkJoiner tensors_;
};

/// The tensors of a streamed ExpertResponse (its messages, serialized, in order).
/// Errors: errc::malformed for a message that is not an ExpertResponse, and those of
/// ChunkJoiner.
[[nodiscard]] Result<std::vector<pb::Tensor>> join_response(const std::vector<Buffer>& messages,
                                                           std::size_t max_bytes = k_max_stream_bytes);

}  // namespace apiary::core::moe
