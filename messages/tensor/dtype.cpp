#include "messages/tensor/dtype.hpp"

#include <string>

namespace apiary::messages {

std::string_view to_string(dtype type) {
  switch (type) {
    case dtype::float32: return "float32";
    case dtype::float16: return "float16";
    case dtype::bfloat16: return "bfloat16";
    case dtype::float64: return "float64";
    case dtype::int64: return "int64";
    case dtype::int32: return "int32";
    case dtype::int16: return "int16";
    case dtype::int8: return "int8";
    case dtype::uint8: return "uint8";
    case dtype::bool_: return "bool";
    case dtype::complex64: return "complex64";
    case dtype::complex128: return "complex128";
  }
  return "unknown";
}

std::size_t element_size(dtype type) {
  switch (type) {
    case dtype::float32: return 4;
    case dtype::float16: return 2;
    case dtype::bfloat16: return 2;
    case dtype::float64: return 8;
    case dtype::int64: return 8;
    case dtype::int32: return 4;
    case dtype::int16: return 2;
    case dtype::int8: return 1;
    case dtype::uint8: return 1;
    case dtype::bool_: return 1;
    case dtype::complex64: return 8;
    case dtype::complex128: return 16;
  }
  return 0;
}

bool is_floating_point(dtype type) {
  return type == dtype::float32 || type == dtype::float16 || type == dtype::bfloat16 ||
         type == dtype::float64;
}

Result<dtype> parse_dtype(std::string_view name) {
  if (name.empty()) {
    return make_error(errc::malformed,
                      "tensor has no dtype: expected a name such as \"float32\"; a later chunk "
                      "of a streamed tensor carries none, so combine the stream before decoding");
  }
  for (dtype type : all_dtypes) {
    if (to_string(type) == name) return type;
  }
  std::string accepted;
  for (dtype type : all_dtypes) {
    if (!accepted.empty()) accepted += ", ";
    accepted += to_string(type);
  }
  return make_error(errc::unsupported,
                    "unknown tensor dtype \"{}\": expected one of {}; convert the tensor to one "
                    "of these before sending",
                    std::string(name), accepted);
}

}  // namespace apiary::messages
