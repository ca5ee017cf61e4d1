#pragma once
/// What RemoteExpert's synchronous and asynchronous calls share (api/remote_expert.cpp,
/// remote_expert_async.cpp): float32 ExpertTensors to and from messages::Tensor, an
/// ExpertRequest encoded with the schema's compressions, and an answer's tensors decoded.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "api/remote_expert.hpp"
#include "core/moe/expert_schema.hpp"
#include "messages/result.hpp"
#include "messages/tensor/codec.hpp"
#include "messages/tensor/tensor.hpp"
#include "runtime.pb.h"

namespace apiary::detail {

/// `tensor` as a messages::Tensor. Errors: invalid_argument naming tensor `index`.
[[nodiscard]] Result<messages::Tensor> tensor_of(const ExpertTensor& tensor, std::size_t index);
/// `tensor` as an ExpertTensor. Errors: unsupported for a dtype other than float32.
[[nodiscard]] Result<ExpertTensor> expert_tensor_of(const messages::Tensor& tensor, std::size_t index);
/// Every tensor of `tensors` as a messages::Tensor (errors as tensor_of's).
[[nodiscard]] Result<std::vector<messages::Tensor>> tensors_of(const std::vector<ExpertTensor>& tensors);
/// Every tensor of `tensors` as an ExpertTensor (errors as expert_tensor_of's).
[[nodiscard]] Result<std::vector<ExpertTensor>> expert_tensors_of(const std::vector<messages::Tensor>& tensors);

/// The ExpertRequest for expert `uid` of `tensors` (forward inputs, or those then the
/// output gradients), each encoded with its compression in `schema`'s backward inputs.
[[nodiscard]] Result<pb::ExpertRequest> expert_request(const std::string& uid, const core::moe::ExpertSchema& schema,
                                                       const std::vector<messages::Tensor>& tensors);
/// The tensors of an answer (any range of pb::Tensor: a vector, a message's repeated
/// field), decoded.
template <class Wires>
[[nodiscard]] Result<std::vector<messages::Tensor>> decode_tensors(const Wires& wires) {
  std::vector<messages::Tensor> out;
  for (const pb::Tensor& wire : wires) {
    auto tensor = messages::decode(wire);
    if (!tensor) return tensor.error();
    out.push_back(std::move(*tensor));
  }
  return out;
}

}  // namespace apiary::detail
