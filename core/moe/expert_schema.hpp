#pragma once
/// What an expert takes and gives (hivemind's BatchTensorDescriptor and ModuleBackend's
/// get_info, reference §6.1 and §1b), and the msgpack info that `rpc_info` sends.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "messages/result.hpp"
#include "messages/tensor/tensor.hpp"
#include "runtime.pb.h"

namespace apiary::core::moe {

using messages::Tensor;

/// One tensor of an expert's inputs or outputs, dimension 0 being the batch (hivemind's
/// BatchTensorDescriptor: size (None, *instance_shape)).
struct TensorSchema {
  messages::Shape instance_shape;  ///< the extents after dimension 0
  messages::dtype type = messages::dtype::float32;
  bool requires_grad = false;
  /// How the tensor travels: a server encodes its outputs (and the gradients of its
  /// inputs) with it; clients encode inputs with it.
  pb::CompressionType compression = pb::NONE;
  /// The device the descriptor names ("cpu"); "" for none (then no device fields).
  std::string device_type = "cpu";

  friend bool operator==(const TensorSchema& a, const TensorSchema& b) {
    return a.instance_shape == b.instance_shape && a.type == b.type && a.requires_grad == b.requires_grad &&
           a.compression == b.compression && a.device_type == b.device_type;
  }
};

/// An expert's description (hivemind's get_info): forward_schema = (args, kwargs),
/// outputs_schema, keyword_names = the kwargs' names. Forward takes the args then the
/// kwargs' tensors in name order (hivemind's nested_flatten); backward takes those, then
/// one gradient per output, and gives one gradient per input.
struct ExpertSchema {
  std::vector<TensorSchema> args;
  std::map<std::string, TensorSchema> kwargs;
  std::vector<TensorSchema> outputs;
  /// outputs_schema is one descriptor rather than a tuple of them (a module returning a
  /// single tensor); then `outputs` has exactly one entry.
  bool single_output = true;

  /// The forward inputs in order: args, then kwargs by name.
  [[nodiscard]] std::vector<TensorSchema> forward_inputs() const;
  /// The backward inputs in order: forward_inputs(), then outputs.
  [[nodiscard]] std::vector<TensorSchema> backward_inputs() const;

  friend bool operator==(const ExpertSchema& a, const ExpertSchema& b) {
    return a.args == b.args && a.kwargs == b.kwargs && a.outputs == b.outputs && a.single_output == b.single_output;
  }
};

/// Ext type code of a BatchTensorDescriptor in hivemind's msgpack.
inline constexpr std::int8_t k_ext_batch_tensor_descriptor = 0x51;

/// The msgpack of `schema` as hivemind's MSGPackSerializer.dumps(get_info()) writes it:
/// a map {forward_schema: (args tuple, kwargs map), outputs_schema: descriptor or tuple,
/// keyword_names: tuple of str}, descriptors as ext 0x51 maps {size: (None, *shape),
/// dtype: "torch.<name>", layout: "torch.strided", requires_grad, pin_memory: false,
/// compression, device_type, device_index: None}.
[[nodiscard]] std::string pack_info(const ExpertSchema& schema);
/// Reads pack_info's form back (hivemind's too). Errors: errc::malformed naming the part
/// that does not fit, errc::unsupported for a dtype apiary does not know.
[[nodiscard]] Result<ExpertSchema> unpack_info(std::string_view packed);

}  // namespace apiary::core::moe
