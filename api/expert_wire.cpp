#include "api/expert_wire.hpp"

#include <utility>


namespace apiary::detail {

Result<messages::Tensor> tensor_of(const ExpertTensor& tensor, std::size_t index) {
  auto made = messages::Tensor::copy_of(messages::dtype::float32, tensor.shape, tensor.values.data(),
                                        tensor.values.size() * sizeof(float));
  if (!made) {
    return make_error(errc::invalid_argument, "tensor {} ({} values for shape [{}]): {}", index,
                      tensor.values.size(), messages::format_shape(tensor.shape), made.error().message);
  }
  return made;
}

Result<ExpertTensor> expert_tensor_of(const messages::Tensor& tensor, std::size_t index) {
  if (tensor.type() != messages::dtype::float32) {
    return make_error(errc::unsupported, "output {} is {}, RemoteExpert takes float32 only", index,
                      messages::to_string(tensor.type()));
  }
  ExpertTensor out;
  out.shape = tensor.shape();
  const float* data = tensor.data<float>();
  if (data != nullptr) out.values.assign(data, data + tensor.numel());
  return out;
}

Result<std::vector<messages::Tensor>> tensors_of(const std::vector<ExpertTensor>& tensors) {
  std::vector<messages::Tensor> out;
  out.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    auto tensor = tensor_of(tensors[i], i);
    if (!tensor) return tensor.error();
    out.push_back(std::move(*tensor));
  }
  return out;
}

Result<std::vector<ExpertTensor>> expert_tensors_of(const std::vector<messages::Tensor>& tensors) {
  std::vector<ExpertTensor> out;
  out.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    auto converted = expert_tensor_of(tensors[i], i);
    if (!converted) return converted.error();
    out.push_back(std::move(*converted));
  }
  return out;
}

Result<pb::ExpertRequest> expert_request(const std::string& uid, const core::moe::ExpertSchema& schema,
                                         const std::vector<messages::Tensor>& tensors) {
  const auto wire_schema = schema.backward_inputs();
  pb::ExpertRequest request;
  request.set_uid(uid);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto compression = i < wire_schema.size() ? wire_schema[i].compression : pb::NONE;
    auto wire = messages::encode(tensors[i], compression);
    if (!wire) return wire.error();
    *request.add_tensors() = std::move(*wire);
  }
  return request;
}

}  // namespace apiary::detail
