#include "core/collective/exchange_wire.hpp"

#include <algorithm>
#include <cstring>

#include "messages/tensor/float16.hpp"

namespace apiary::core::collective {
namespace {

constexpr char k_magic[4] = {'A', 'X', 'C', '1'};
/// magic + op + rank + kind + weight + fingerprint.
constexpr std::size_t k_header_bytes = 4 + 8 + 4 + 1 + 8 + 8;

template <class T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

template <class T>
T get(const char*& p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  p += sizeof(T);
  return value;
}

/// Bytes per element of a codec on the wire.
std::size_t width_of(pb::CompressionType codec) { return codec == pb::FLOAT16 ? 2 : 4; }

/// Calls fn(tensor, first, last) for every piece of [lo, hi) inside one tensor, in order.
template <class Fn>
void for_each_piece(const SpanLayout& layout, std::size_t lo, std::size_t hi, Fn fn) {
  std::size_t begin = 0;
  for (std::size_t t = 0; t < layout.sizes.size() && begin < hi; ++t) {
    const std::size_t end = begin + layout.sizes[t];
    const std::size_t first = std::max(lo, begin);
    const std::size_t last = std::min(hi, end);
    if (first < last) fn(t, first, last);
    begin = end;
  }
}

}  // namespace

std::string encode_frame(const ExchangeFrame& frame) {
  std::string out;
  out.reserve(k_header_bytes + frame.payload.size());
  out.append(k_magic, sizeof k_magic);
  put(out, frame.op);
  put(out, frame.rank);
  put(out, static_cast<std::uint8_t>(frame.kind));
  put(out, frame.weight);
  put(out, frame.fingerprint);
  out += frame.payload;
  return out;
}

Result<ExchangeFrame> decode_frame(std::string_view bytes) {
  if (bytes.size() < k_header_bytes || std::memcmp(bytes.data(), k_magic, sizeof k_magic) != 0) {
    return make_error(errc::malformed,
                      "collective exchange: expected a frame starting with 'AXC1' of at least {} bytes, got {} bytes; "
                      "is the caller another program on this handle?",
                      k_header_bytes, bytes.size());
  }
  const char* p = bytes.data() + sizeof k_magic;
  ExchangeFrame f;
  f.op = get<std::uint64_t>(p);
  f.rank = get<std::uint32_t>(p);
  const auto kind = get<std::uint8_t>(p);
  if (kind != static_cast<std::uint8_t>(ExchangeKind::mean) &&
      kind != static_cast<std::uint8_t>(ExchangeKind::gather)) {
    return make_error(errc::malformed, "collective exchange: expected kind 1 (mean) or 2 (gather), got {}; is the "
                      "caller a newer version?", kind);
  }
  f.kind = static_cast<ExchangeKind>(kind);
  f.weight = get<double>(p);
  f.fingerprint = get<std::uint64_t>(p);
  f.payload.assign(p, bytes.data() + bytes.size());
  return f;
}

Result<SpanLayout> make_span_layout(const std::vector<std::size_t>& sizes,
                                    const std::vector<pb::CompressionType>& codecs) {
  if (codecs.size() > 1 && codecs.size() != sizes.size()) {
    return make_error(errc::invalid_argument,
                      "collective mean: expected 0, 1 or {} codecs (one per tensor), got {}", sizes.size(),
                      codecs.size());
  }
  SpanLayout layout;
  layout.sizes = sizes;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const auto codec = codecs.empty() ? pb::NONE : codecs[codecs.size() == 1 ? 0 : t];
    if (codec != pb::NONE && codec != pb::FLOAT16) {
      return make_error(errc::unsupported,
                        "collective mean: tensor {}: expected codec NONE or FLOAT16, got {}; the identical-result "
                        "mean carries float32 or float16 only",
                        t, pb::CompressionType_Name(codec));
    }
    layout.codecs.push_back(codec);
    layout.total += sizes[t];
  }
  return layout;
}

std::uint64_t fingerprint_of(ExchangeKind kind, const SpanLayout& layout) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a offset basis
  auto mix = [&h](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;  // FNV-1a prime
    }
  };
  mix(static_cast<std::uint64_t>(kind));
  mix(layout.sizes.size());
  for (std::size_t t = 0; t < layout.sizes.size(); ++t) {
    mix(layout.sizes[t]);
    mix(static_cast<std::uint64_t>(layout.codecs[t]));
  }
  return h;
}

std::size_t span_bytes(const SpanLayout& layout, std::size_t lo, std::size_t hi) {
  std::size_t bytes = 0;
  for_each_piece(layout, lo, hi, [&](std::size_t t, std::size_t first, std::size_t last) {
    bytes += (last - first) * width_of(layout.codecs[t]);
  });
  return bytes;
}

void encode_span(const SpanLayout& layout, std::size_t lo, std::size_t hi, const float* values, std::string& out) {
  const std::size_t at = out.size();
  out.resize(at + span_bytes(layout, lo, hi));
  char* dst = out.data() + at;
  for_each_piece(layout, lo, hi, [&](std::size_t t, std::size_t first, std::size_t last) {
    const float* src = values + (first - lo);
    const std::size_t n = last - first;
    if (layout.codecs[t] == pb::FLOAT16) {
      for (std::size_t i = 0; i < n; ++i) {
        const float v = std::clamp(src[i], -messages::half_max, messages::half_max);
        const std::uint16_t h = messages::float_to_half(v);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      dst += 2 * n;
    } else {
      std::memcpy(dst, src, 4 * n);
      dst += 4 * n;
    }
  });
}

Status decode_span(const SpanLayout& layout, std::size_t lo, std::size_t hi, std::string_view bytes, float* out) {
  const std::size_t expected = span_bytes(layout, lo, hi);
  if (bytes.size() != expected) {
    return make_error(errc::malformed,
                      "collective mean: expected {} bytes for elements [{}, {}), got {}; do all members run the same "
                      "tensors and codecs?",
                      expected, lo, hi, bytes.size());
  }
  const char* src = bytes.data();
  for_each_piece(layout, lo, hi, [&](std::size_t t, std::size_t first, std::size_t last) {
    float* dst = out + (first - lo);
    const std::size_t n = last - first;
    if (layout.codecs[t] == pb::FLOAT16) {
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = messages::half_to_float(h);
      }
      src += 2 * n;
    } else {
      std::memcpy(dst, src, 4 * n);
      src += 4 * n;
    }
  });
  return ok_status();
}

}  // namespace apiary::core::collective
