#include "core/moe/batch_rows.hpp"

#include <algorithm>
#include <cstring>

namespace apiary::core::moe {

Result<std::size_t> check_batch(const std::vector<TensorSchema>& schema, const std::vector<Tensor>& tensors,
                                std::string_view what) {
  if (tensors.size() != schema.size()) {
    return make_error(errc::invalid_argument, "{} takes {} tensor(s), got {}; send one tensor per schema entry", what,
                      schema.size(), tensors.size());
  }
  std::size_t rows = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const TensorSchema& s = schema[i];
    const bool extents_match =
        !t.shape().empty() && messages::Shape(t.shape().begin() + 1, t.shape().end()) == s.instance_shape;
    if (!extents_match || t.type() != s.type) {
      std::string want = messages::format_shape(s.instance_shape);
      want.insert(1, s.instance_shape.empty() ? "*" : "*, ");
      return make_error(errc::invalid_argument,
                        "{}: tensor {} is {} {}, expected {} {} (dimension 0 is the batch); check the input's "
                        "dimensions",
                        what, i, messages::to_string(t.type()), messages::format_shape(t.shape()),
                        messages::to_string(s.type), want);
    }
    if (i == 0) rows = t.shape()[0];
    if (t.shape()[0] != rows) {
      return make_error(errc::invalid_argument, "{}: tensor {} has {} rows and tensor 0 has {}; every tensor of a "
                        "request needs the same batch size", what, i, t.shape()[0], rows);
    }
  }
  if (rows == 0) return make_error(errc::invalid_argument, "{}: the batch is empty; send at least one row", what);
  return rows;
}

Result<std::size_t> check_backward(const ExpertSchema& schema, const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& grad_outputs, std::string_view name) {
  auto rows = check_batch(schema.forward_inputs(), inputs, fmt::format("{} backward inputs", name));
  if (!rows) return rows.error();
  auto grad_rows = check_batch(schema.outputs, grad_outputs, fmt::format("{} backward grad_outputs", name));
  if (!grad_rows) return grad_rows.error();
  if (*grad_rows != *rows) {
    return make_error(errc::invalid_argument,
                      "{} backward: {} input rows but {} gradient rows; send one gradient row per input row", name,
                      *rows, *grad_rows);
  }
  return rows;
}

Result<std::vector<Tensor>> concat_rows(const std::vector<const std::vector<Tensor>*>& parts) {
  if (parts.empty()) return std::vector<Tensor>{};
  if (parts.size() == 1) return *parts.front();
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < parts.front()->size(); ++i) {
    const Tensor& first = (*parts.front())[i];
    std::size_t rows = 0;
    std::size_t bytes = 0;
    for (const auto* part : parts) {
      if (part->size() <= i || (*part)[i].type() != first.type() || (*part)[i].shape().empty() ||
          !std::equal(first.shape().begin() + 1, first.shape().end(), (*part)[i].shape().begin() + 1,
                      (*part)[i].shape().end())) {
        return make_error(errc::internal, "tensor {} of the tasks of one batch differ in dtype or shape", i);
      }
      rows += (*part)[i].shape()[0];
      bytes += (*part)[i].byte_size();
    }
    Buffer joined = Buffer::allocate(bytes);
    std::size_t at = 0;
    for (const auto* part : parts) {
      const Buffer& b = (*part)[i].bytes();
      if (!b.empty()) std::memcpy(joined.data() + at, b.data(), b.size());
      at += b.size();
    }
    messages::Shape shape = first.shape();
    shape[0] = static_cast<std::uint32_t>(rows);
    auto t = Tensor::make(first.type(), std::move(shape), std::move(joined), first.requires_grad());
    if (!t) return t.error();
    out.push_back(std::move(*t));
  }
  return out;
}

Result<std::vector<Tensor>> slice_rows(const std::vector<Tensor>& batch, std::size_t offset, std::size_t rows) {
  std::vector<Tensor> out;
  for (const Tensor& t : batch) {
    if (t.shape().empty() || offset + rows > t.shape()[0]) {
      return make_error(errc::internal, "rows [{}, {}) are outside a batch tensor of shape {}", offset, offset + rows,
                        messages::format_shape(t.shape()));
    }
    const std::size_t row_bytes = t.shape()[0] == 0 ? 0 : t.byte_size() / t.shape()[0];
    messages::Shape shape = t.shape();
    shape[0] = static_cast<std::uint32_t>(rows);
    auto part = Tensor::make(t.type(), std::move(shape), t.bytes().slice(offset * row_bytes, rows * row_bytes),
                             t.requires_grad());
    if (!part) return part.error();
    out.push_back(std::move(*part));
  }
  return out;
}

}  // namespace apiary::core::moe
