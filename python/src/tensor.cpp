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

/// (buffer bytes, dtype name) of runtime.proto's Tensor of the `nbytes` bytes at
/// `address` encoded with `codec`; the caller builds the message around them. NONE is the
/// memory itself (one copy, into the bytes); a codec's buffer is written once, then copied
/// into the bytes (it is smaller than the tensor).
py::tuple encode_tensor(const std::string& dtype_name, const std::vector<std::uint32_t>& shape, std::uintptr_t address,
                        std::size_t nbytes, int codec) {
  const messages::dtype type = value_or_raise(messages::parse_dtype(dtype_name));
  if (codec < 0 || !pb::CompressionType_IsValid(codec)) {
    raise(make_error(errc::invalid_argument, "expected a CompressionType 0-5, got {}", codec));
  }
  const messages::Shape dims(shape.begin(), shape.end());
  const std::size_t numel = value_or_raise(messages::element_count(dims, messages::element_size(type)));
  if (numel * messages::element_size(type) != nbytes) {
    raise(make_error(errc::invalid_argument, "expected {} bytes for {} elements of {}, got {}",
                     numel * messages::element_size(type), numel, dtype_name, nbytes));
  }
  if (codec == pb::NONE && type != messages::dtype::bfloat16) {
    return py::make_tuple(py::bytes(reinterpret_cast<const char*>(address), nbytes), dtype_name);
  }
  Result<pb::Tensor> message = make_error(errc::internal, "not encoded");
  {
    py::gil_scoped_release unlocked;
    // A view of the caller's memory: it stays alive (and unchanged) during the call.
    Buffer view = Buffer::view_of(nullptr, reinterpret_cast<const void*>(address), nbytes);
    auto tensor = messages::Tensor::make(type, dims, std::move(view));
    if (!tensor) {
      message = tensor.error();
    } else {
      message = messages::encode(*tensor, static_cast<pb::CompressionType>(codec));
    }
  }
  if (!message) raise(message.error());
  return py::make_tuple(py::bytes(message->buffer()), message->dtype());
}

/// A uint8 numpy array owning `bytes` (no copy).
py::array_t<std::uint8_t> array_of(Buffer bytes) {
  auto holder = new Buffer(std::move(bytes));
  py::capsule owner(holder, [](void* p) { delete static_cast<Buffer*>(p); });
  return py::array_t<std::uint8_t>({static_cast<py::ssize_t>(holder->size())},
                                   reinterpret_cast<const std::uint8_t*>(holder->data()), owner);
}

/// The values of a runtime.proto Tensor given by its fields, as a writeable uint8 array
/// (one copy of the buffer for NONE; a codec decodes from the bytes in place), and the
/// decoded dtype name.
py::tuple decode_tensor(const py::bytes& buffer, const std::string& dtype_name, const std::vector<std::uint32_t>& shape,
                        int codec) {
  const std::string_view bytes = buffer;
  const messages::dtype type = value_or_raise(messages::parse_dtype(dtype_name));
  const messages::Shape dims(shape.begin(), shape.end());
  if (codec == pb::NONE && type != messages::dtype::bfloat16) {
    const std::size_t numel = value_or_raise(messages::element_count(dims, messages::element_size(type)));
    if (bytes.size() != numel * messages::element_size(type)) {
      raise(make_error(errc::malformed, "tensor buffer has {} bytes, expected {} for {} elements of {}; the message is "
                                        "truncated or its shape is wrong", bytes.size(),
                       numel * messages::element_size(type), numel, dtype_name));
    }
    return py::make_tuple(array_of(Buffer::copy_of(bytes.data(), bytes.size())), dtype_name);
  }
  // Decoded from the bytes where they lie (no message around a copy of them).
  const messages::WireTensor fields{dtype_name, dims, codec, false};
  Result<messages::Tensor> decoded = make_error(errc::internal, "not decoded");
  {
    py::gil_scoped_release unlocked;
    decoded = messages::decode(fields, bytes);
  }
  messages::Tensor tensor = value_or_raise(std::move(decoded));
  return py::make_tuple(array_of(tensor.bytes()), std::string(messages::to_string(tensor.type())));
}

}  // namespace

py::tuple tensor_to_python(messages::Tensor& tensor) {
  std::vector<std::uint32_t> shape(tensor.shape().begin(), tensor.shape().end());
  return py::make_tuple(array_of(tensor.bytes()), std::string(messages::to_string(tensor.type())), shape);
}

void bind_tensor(py::module_& m) {
  m.def("encode_tensor", &encode_tensor, py::arg("dtype"), py::arg("shape"), py::arg("address"), py::arg("nbytes"),
        py::arg("codec"), "(buffer, dtype) of runtime.proto's Tensor of the memory at address (read in place).");
  m.def("decode_tensor", &decode_tensor, py::arg("buffer"), py::arg("dtype"), py::arg("shape"), py::arg("codec"),
        "(uint8 array of the values, dtype) of a runtime.proto Tensor's fields.");
}

}  // namespace apiary::python
