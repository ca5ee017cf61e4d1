#include "actors/device/device_actor.hpp"

#include <algorithm>

#include <caf/all.hpp>

#include "actors/device/device_checks.hpp"
#include "cuda/kernels.hpp"
#include "messages/tensor/codec.hpp"
#include "messages/tensor/compressors.hpp"

namespace apiary::actors {
namespace {

using device_checks::float_count;
using device_checks::floats;
using device_checks::same_length;

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
      [self](const ef_reset_request& r) { return device_checks::reset_residuals(self->state.ef, r.key); },
      [](reduce_part_request& r) { return core::averaging::reduce_part(std::move(r.job)); },
      [](const read_request& r) -> Result<std::vector<float>> {
        if (r.n > 0 && r.src == nullptr) return device_checks::null_memory("read");
        return std::vector<float>(r.src, r.src + r.n);
      },
      [](const add_scaled_request& r) -> Status {
        if (!r.x.empty() && r.dst == nullptr) return device_checks::null_memory("add_scaled");
        if (r.overwrite) {
          std::copy(r.x.begin(), r.x.end(), r.dst);
        } else {
          cuda::cpu::weighted_accumulate(r.dst, r.x.data(), r.alpha, r.x.size());
        }
        return ok_status();
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
  cuda::cpu::divide(floats(out), floats(r.sum), static_cast<float>(r.count), *n);
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
