#pragma once
/// Tensor: a dense, C-contiguous, little-endian tensor held in a shared Buffer. The value
/// type the codecs turn into and out of pb::Tensor.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "messages/buffer.hpp"
#include "messages/result.hpp"
#include "messages/tensor/dtype.hpp"

namespace apiary::messages {

/// A tensor's shape, one extent per dimension (uint32, as on the wire). Empty = 0-d.
using Shape = std::vector<std::uint32_t>;

/// Number of elements of `shape` (1 for 0-d, 0 if any extent is 0); errc::too_large if
/// the count or its size in bytes of `elem_bytes` each does not fit in size_t.
Result<std::size_t> element_count(const Shape& shape, std::size_t elem_bytes = 1);

/// "[3, 4]" for error messages and logs.
std::string format_shape(const Shape& shape);
/// The shape of comma-separated extents: "3,4,5" -> {3, 4, 5}, "" -> {} (0-d). Errors:
/// invalid_argument for anything else (an empty or non-decimal extent, one above
/// 2^32 - 1, a trailing comma).
Result<Shape> parse_shape(std::string_view text);

/// A dense tensor: dtype, shape, element bytes (exactly numel * element_size), and the
/// requires_grad flag carried on the wire. Copies share the bytes (Buffer semantics):
/// treat the bytes as immutable once the tensor is built.
class Tensor {
 public:
  /// An empty float32 tensor of shape [0].
  Tensor();

  /// A tensor over `bytes`; errc::invalid_argument if the byte count does not match the
  /// shape and dtype, errc::too_large if the shape's element count overflows.
  static Result<Tensor> make(dtype type, Shape shape, Buffer bytes, bool requires_grad = false);

  /// A tensor over a copy of `size` bytes at `data`; same checks as make().
  static Result<Tensor> copy_of(dtype type, Shape shape, const void* data, std::size_t size,
                                bool requires_grad = false);

  /// A tensor of zero bytes (0.0, 0, false) of the given dtype and shape.
  static Result<Tensor> zeros(dtype type, Shape shape, bool requires_grad = false);

  /// Element type.
  [[nodiscard]] dtype type() const { return type_; }
  /// Shape, one extent per dimension.
  [[nodiscard]] const Shape& shape() const { return shape_; }
  /// Number of elements (1 for 0-d).
  [[nodiscard]] std::size_t numel() const { return numel_; }
  /// Size of the element bytes: numel() * element_size(type()).
  [[nodiscard]] std::size_t byte_size() const { return bytes_.size(); }
  /// The element bytes, little-endian, C-contiguous.
  [[nodiscard]] const Buffer& bytes() const { return bytes_; }
  /// Whether the receiver should track gradients for this tensor.
  [[nodiscard]] bool requires_grad() const { return requires_grad_; }
  /// Sets the requires_grad flag.
  void set_requires_grad(bool value) { requires_grad_ = value; }

  /// The elements as `T` (caller picks the T matching type(); e.g. std::uint16_t for
  /// float16/bfloat16). Null for a tensor with no elements.
  template <class T>
  [[nodiscard]] const T* data() const {
    return reinterpret_cast<const T*>(bytes_.data());
  }

  /// Same dtype, shape, requires_grad and byte-identical elements.
  friend bool operator==(const Tensor& a, const Tensor& b);
  friend bool operator!=(const Tensor& a, const Tensor& b) { return !(a == b); }

 private:
  Tensor(dtype type, Shape shape, std::size_t numel, Buffer bytes, bool requires_grad);

  dtype type_ = dtype::float32;
  Shape shape_;
  std::size_t numel_ = 0;
  Buffer bytes_;
  bool requires_grad_ = false;
};

}  // namespace apiary::messages
