#include "core/moe/stream_chunks.hpp"

#include <utility>

namespace apiary::core::moe {
namespace {

/// Every chunk of every tensor of `tensors`, in order, each as one message made by `wrap`.
template <class Message, class Wrap>
std::vector<std::string> stream_of(const std::vector<pb::Tensor>& tensors, std::size_t chunk_bytes, Wrap wrap) {
  std::vector<std::string> out;
  for (const pb::Tensor& tensor : tensors) {
    for (pb::Tensor& chunk : messages::split_for_streaming(tensor, chunk_bytes)) {
      Message message;
      wrap(message);
      *message.add_tensors() = std::move(chunk);
      out.push_back(message.SerializeAsString());
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> request_stream(const std::string& uid, const std::vector<pb::Tensor>& tensors,
                                        std::size_t chunk_bytes) {
  return stream_of<pb::ExpertRequest>(tensors, chunk_bytes, [&](pb::ExpertRequest& m) { m.set_uid(uid); });
}

std::vector<std::string> response_stream(const std::vector<pb::Tensor>& tensors, std::size_t chunk_bytes) {
  return stream_of<pb::ExpertResponse>(tensors, chunk_bytes, [](pb::ExpertResponse& /*m*/) {});
}

Status ChunkJoiner::add(pb::Tensor chunk) {
  const std::size_t index = done_.size();
  if (!current_.started() && chunk.dtype().empty()) {
    return make_error(errc::malformed,
                      "tensor {} of the stream begins with a chunk without a dtype: expected its first chunk (size, "
                      "dtype, chunk count); the previous tensor sent more chunks than it announced",
                      index);
  }
  bytes_ += chunk.buffer().size();
  if (bytes_ > max_bytes_) {
    return make_error(errc::too_large,
                      "the stream's tensors exceed {} bytes at tensor {}: send fewer or smaller tensors", max_bytes_,
                      index);
  }
  auto complete = current_.push(std::move(chunk));
  if (!complete) return make_error(complete.error().code, "tensor {}: {}", index, complete.error().message);
  if (*complete) {
    auto whole = current_.finish();
    if (!whole) return whole.error();
    done_.push_back(std::move(*whole));
  }
  return ok_status();
}

Result<std::vector<pb::Tensor>> ChunkJoiner::finish() {
  if (current_.started()) {
    auto cut = current_.finish();  // incomplete: says how many chunks came of how many
    return make_error(errc::truncated, "tensor {}: {}", done_.size(), cut.error().message);
  }
  return std::move(done_);
}

Status RequestJoiner::add(const Buffer& message) {
  pb::ExpertRequest request;
  if (!request.ParseFromArray(message.data(), static_cast<int>(message.size()))) {
    return make_error(errc::malformed, "message {} of the stream: {} bytes are not an ExpertRequest", messages_,
                      message.size());
  }
  if (messages_ == 0) {
    uid_ = request.uid();
  } else if (!request.uid().empty() && request.uid() != uid_) {
    return make_error(errc::invalid_argument,
                      "message {} of the stream names expert '{}', the first named '{}': one stream calls one expert",
                      messages_, request.uid(), uid_);
  }
  ++messages_;
  for (pb::Tensor& chunk : *request.mutable_tensors()) {
    if (Status added = tensors_.add(std::move(chunk)); !added) return added;
  }
  return ok_status();
}

Result<pb::ExpertRequest> RequestJoiner::finish() {
  auto tensors = tensors_.finish();
  if (!tensors) return tensors.error();
  pb::ExpertRequest request;
  request.set_uid(uid_);
  for (pb::Tensor& tensor : *tensors) *request.add_tensors() = std::move(tensor);
  return request;
}

Result<std::vector<pb::Tensor>> join_response(const std::vector<Buffer>& messages, std::size_t max_bytes) {
  ChunkJoiner joiner(max_bytes);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    pb::ExpertResponse response;
    if (!response.ParseFromArray(messages[i].data(), static_cast<int>(messages[i].size()))) {
      return make_error(errc::malformed, "message {} of the answer: {} bytes are not an ExpertResponse", i,
                        messages[i].size());
    }
    for (pb::Tensor& chunk : *response.mutable_tensors()) {
      if (Status added = joiner.add(std::move(chunk)); !added) return added.error();
    }
  }
  return joiner.finish();
}

}  // namespace apiary::core::moe
