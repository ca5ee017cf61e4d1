#include "actors/device/device_actor.hpp"

#include <caf/all.hpp>

#include "cuda/kernels.hpp"
#include "messages/tensor/codec.hpp"
#include "messages/tensor/compressors.hpp"

namespace apiary::actors {
namespace {

/// The number of float32 values in `b`, or errc::invalid_argument naming the operation
/// and the argument when its byte count is not a multiple of 4.
Result<std::size_t> float_count(const Buffer& b, const char* op, const char* arg) {
  if (b.size() % sizeof(float) != 0) {
    return make_error(errc::invalid_argument,
                      "device {}: expected '{}' to hold float32 values (a multiple of 4 bytes), "
                      "got {} bytes; pass float32 data or convert it first",
                      op, arg, b.size());
  }
  return b.size() / sizeof(float);
}

/// The common length of two float32 buffers, or errc::invalid_argument.
Result<std::size_t> same_length(const Buffer& a, const Buffer& b, const char* op, const char* a_name,
                                const char* b_name) {
  auto na = float_count(a, op, a_name);
  if (!na) return na;
  auto nb = float_count(b, op, b_name);
  if (!nb) return nb;
  if (*na != *nb) {
    return make_error(errc::invalid_argument,
                      "device {}: expected '{}' and '{}' of the same length, got {} and {} float32 "
                      "values; pass tensors of the same shape",
                      op, a_name, b_name, *na, *nb);
  }
  return *na;
}

float* floats(Buffer& b) { return reinterpret_cast<float*>(b.data()); }
const float* floats(const Buffer& b) { return reinterpret_cast<const float*>(b.data()); }

struct cpu_device_state {
  messages::HorovodCompressorEF ef;
};

device_actor::behavior_type cpu_device_behavior(device_actor::stateful_pointer<cpu_device_state> self) {
  return {
      [](const accumulate_request& r) { return cpu_device::accumulate(r); },
      [](const average_request& r) { return cpu_device::average(r); },
      [](const delta_request& r) { return cpu_device::delta(r); },
      [](const encode_request& r) { return messages::encode(r.tensor, r.codec); },
      [](const decode_request& r) { return messages::decode(r.message); },
      [self](const ef_compress_request& r) { return self->state.ef.compress(r.key, r.tensor); },
      [self](const ef_reset_request& r) {
        auto& ef = self->state.ef;
        const bool had = r.key.empty() ? ef.size() > 0 : !ef.residual(r.key).empty();
        if (r.key.empty()) {
          ef.reset();
        } else {
          ef.reset(r.key);
        }
        return had;
      },
  };
}

}  // namespace

namespace cpu_device {

Result<Buffer> accumulate(const accumulate_request& r) {
  auto n = same_length(r.acc, r.x, "accumulate", "acc", "x");
  if (!n) return n.error();
  // Copy the running sum (the request's buffer stays untouched), then acc += w * x.
  Buffer out = Buffer::copy_of(r.acc.data(), r.acc.size());
  cuda::cpu::weighted_accumulate(floats(out), floats(r.x), r.weight, *n);
  return out;
}

Result<Buffer> average(const average_request& r) {
  auto n = float_count(r.sum, "average", "sum");
  if (!n) return n.error();
  if (r.count == 0) {
    return make_error(errc::invalid_argument,
                      "device average: expected a count of at least 1, got 0; skip the average "
                      "when nothing was summed");
  }
  Buffer out = Buffer::allocate(r.sum.size());
  const float count = static_cast<float>(r.count);
  const float* in = floats(r.sum);
  float* o = floats(out);
  for (std::size_t i = 0; i < *n; ++i) o[i] = in[i] / count;
  return out;
}

Result<Buffer> delta(const delta_request& r) {
  auto n = same_length(r.a, r.b, "delta", "a", "b");
  if (!n) return n.error();
  // a + (-1) * b: the negation is exact and a + (-b) is a - b in IEEE arithmetic.
  Buffer out = Buffer::copy_of(r.a.data(), r.a.size());
  cuda::cpu::weighted_accumulate(floats(out), floats(r.b), -1.0f, *n);
  return out;
}

}  // namespace cpu_device

device_actor spawn_cpu_device_actor(caf::actor_system& sys) {
  return sys.spawn<caf::detached>(cpu_device_behavior);
}

}  // namespace apiary::actors
