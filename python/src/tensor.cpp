// Bindings of the tensor codecs (messages/tensor/codec.hpp): hivemind's runtime.proto
// Tensor bytes from a tensor's memory (read in place), and back into memory Python owns
// without a copy (a numpy array over the decoded buffer).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "messages/tensor/codec.hpp"
#include "python/src/common.hpp"
#include "runtime.pb.h"

namespace apiary::python {

namespace {

/// Serialized runtime.proto Tensor of the `nbytes` bytes at `address` (dtype, shape).
py::bytes encode_tensor(const std::string& dtype_name, const std::vector<std::uint32_t>& shape, std::uintptr_t address,
                        std::size_t nbytes, int codec, bool requires_grad) {
  const messages::dtype type = value_or_raise(messages::parse_dtype(dtype_name));
  if (codec < 0 || !pb::CompressionType_IsValid(codec)) {
    raise(make_error(errc::invalid_argument, "expected a CompressionType 0-5, got {}", codec));
  }
  std::string wire;
  {
    py::gil_scoped_release unlocked;
    // A view of the caller's memory: it stays alive (and unchanged) during the call.
    Buffer view = Buffer::view_of(nullptr, reinterpret_cast<const void*>(address), nbytes);
    auto tensor = messages::Tensor::make(type, messages::Shape(shape.begin(), shape.end()), std::move(view),
                                         requires_grad);
    if (!tensor) {
      py::gil_scoped_acquire locked;
      raise(tensor.error());
    }
    auto message = messages::encode(*tensor, static_cast<pb::CompressionType>(codec));
    if (!message) {
      py::gil_scoped_acquire locked;
      raise(message.error());
    }
    wire = message->SerializeAsString();
  }
  return py::bytes(wire);
}

/// (dtype name, shape, uint8 array over the values, requires_grad) of serialized Tensor bytes.
py::tuple decode_tensor(const py::bytes& serialized) {
  const std::string_view bytes = serialized;
  pb::Tensor message;
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    raise(make_error(errc::malformed, "expected a serialized runtime.proto Tensor, got {} bytes that do not parse",
                     bytes.size()));
  }
  Result<messages::Tensor> decoded = make_error(errc::internal, "not decoded");
  {
    py::gil_scoped_release unlocked;
    decoded = messages::decode(message);
  }
  messages::Tensor tensor = value_or_raise(std::move(decoded));
  auto holder = new Buffer(tensor.bytes());
  py::capsule owner(holder, [](void* p) { delete static_cast<Buffer*>(p); });
  py::array_t<std::uint8_t> values({static_cast<py::ssize_t>(holder->size())},
                                   reinterpret_cast<const std::uint8_t*>(holder->data()), owner);
  std::vector<std::uint32_t> shape(tensor.shape().begin(), tensor.shape().end());
  return py::make_tuple(std::string(messages::to_string(tensor.type())), shape, values, tensor.requires_grad());
}

}  // namespace

void bind_tensor(py::module_& m) {
  m.def("encode_tensor", &encode_tensor, py::arg("dtype"), py::arg("shape"), py::arg("address"), py::arg("nbytes"),
        py::arg("codec"), py::arg("requires_grad") = false,
        "Serialized runtime.proto Tensor bytes of the memory at address (read in place).");
  m.def("decode_tensor", &decode_tensor, py::arg("serialized"),
        "(dtype, shape, uint8 array of the values, requires_grad) of serialized Tensor bytes.");
}

}  // namespace apiary::python
