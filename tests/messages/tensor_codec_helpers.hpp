#pragma once
// Helpers shared by the codec tests: building float tensors, reading them back.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "messages/tensor/bfloat16.hpp"
#include "messages/tensor/codec.hpp"
#include "messages/tensor/float16.hpp"
#include "messages/tensor/tensor.hpp"

namespace apiary::testing {

namespace msg = apiary::messages;

// A float32 tensor holding `values` with `shape`.
inline msg::Tensor float_tensor(const std::vector<float>& values, msg::Shape shape) {
  auto t = msg::Tensor::copy_of(msg::dtype::float32, std::move(shape), values.data(),
                                values.size() * sizeof(float));
  REQUIRE(t.ok());
  return *t;
}

// `n` standard normal float32 values from a fixed seed.
inline std::vector<float> randn(std::size_t n, unsigned seed = 42) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(n);
  for (float& v : out) v = normal(rng);
  return out;
}

// The elements of a floating-point tensor as float64.
inline std::vector<double> values_of(const msg::Tensor& t) {
  std::vector<double> out(t.numel());
  for (std::size_t i = 0; i < t.numel(); ++i) {
    switch (t.type()) {
      case msg::dtype::float32: out[i] = t.data<float>()[i]; break;
      case msg::dtype::float64: out[i] = t.data<double>()[i]; break;
      case msg::dtype::float16: out[i] = msg::half_to_float(t.data<std::uint16_t>()[i]); break;
      case msg::dtype::bfloat16:
        out[i] = msg::bfloat16_to_float(t.data<std::uint16_t>()[i]);
        break;
      default: FAIL("values_of: not a floating-point tensor"); break;
    }
  }
  return out;
}

// Bytes as lowercase hex, "00 3c ..." for readable failures.
inline std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i > 0) out += ' ';
    const auto b = static_cast<unsigned char>(bytes[i]);
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

// Every compression type.
inline const std::vector<apiary::pb::CompressionType>& all_compressions() {
  static const std::vector<apiary::pb::CompressionType> all = {
      apiary::pb::NONE,          apiary::pb::FLOAT16,       apiary::pb::MEANSTD_16BIT,
      apiary::pb::UNIFORM_8BIT,  apiary::pb::QUANTILE_8BIT, apiary::pb::BLOCKWISE_8BIT};
  return all;
}

}  // namespace apiary::testing
