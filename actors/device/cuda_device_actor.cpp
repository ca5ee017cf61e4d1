// The device actor over a cuda::device_context: one per GPU, owning its stream and
// memory pool; element-wise work runs on the context's backend, codecs and error
// feedback on the host (as in the CPU actor).
#include <caf/all.hpp>

#include <memory>
#include <vector>

#include "actors/device/device_actor.hpp"
#include "actors/device/device_checks.hpp"
#include "cuda/device.hpp"
#include "cuda/device_context.hpp"
#include "messages/tensor/codec.hpp"
#include "messages/tensor/compressors.hpp"

namespace apiary::actors {
namespace {

using device_checks::float_count;
using device_checks::floats;
using device_checks::same_length;

// A failed cuda::status as an apiary::Error naming the operation and the device.
Error device_error(const char* op, const cuda::device_context& ctx, const cuda::status& st) {
  return make_error(errc::internal, "device {} on {} device {}: {}", op, cuda::to_string(ctx.where()),
                    ctx.device(), st.message());
}

struct context_device_state {
  std::shared_ptr<cuda::device_context> ctx;
  messages::HorovodCompressorEF ef;
};

// acc + weight * x through the context (delta is a + (-1) * b: exact negation).
Result<Buffer> accumulate_on(cuda::device_context& ctx, const char* op, const Buffer& acc,
                             const Buffer& x, float weight, const char* acc_name, const char* x_name) {
  auto n = same_length(acc, x, op, acc_name, x_name);
  if (!n) return n.error();
  Buffer out = Buffer::allocate(acc.size());
  if (cuda::status st = ctx.accumulate(floats(out), floats(acc), floats(x), weight, *n); !st) {
    return device_error(op, ctx, st);
  }
  return out;
}

Result<Buffer> average_on(cuda::device_context& ctx, const average_request& r) {
  auto n = float_count(r.sum, "average", "sum");
  if (!n) return n.error();
  if (r.count == 0) {
    return make_error(errc::invalid_argument,
                      "device average: expected a count of at least 1, got 0; skip the average "
                      "when nothing was summed");
  }
  Buffer out = Buffer::allocate(r.sum.size());
  if (cuda::status st = ctx.divide(floats(out), floats(r.sum), static_cast<float>(r.count), *n); !st) {
    return device_error("average", ctx, st);
  }
  return out;
}

// The part reduction through the context (one upload and one download per buffer on a
// GPU); the deltas overwrite the job's inputs.
Result<core::averaging::ReducedPart> reduce_on(cuda::device_context& ctx, core::averaging::ReduceJob job) {
  auto n = core::averaging::check_reduce_job(job);
  if (!n) return n.error();
  double total = 0.0;
  for (float w : job.weights) total += w;
  core::averaging::ReducedPart out;
  out.average.resize(*n);
  std::vector<const float*> inputs;
  std::vector<float*> deltas;
  for (auto& input : job.inputs) {
    inputs.push_back(input.data());
    deltas.push_back(input.data());
  }
  if (cuda::status st = ctx.weighted_average(inputs.data(), job.weights.data(), inputs.size(), *n,
                                             static_cast<float>(total), out.average.data(), deltas.data());
      !st) {
    return device_error("part reduction", ctx, st);
  }
  out.deltas = std::move(job.inputs);
  return out;
}

device_actor::behavior_type context_device_behavior(
    device_actor::stateful_pointer<context_device_state> self, std::shared_ptr<cuda::device_context> ctx) {
  self->state.ctx = std::move(ctx);
  return {
      [self](const accumulate_request& r) {
        return accumulate_on(*self->state.ctx, "accumulate", r.acc, r.x, r.weight, "acc", "x");
      },
      [self](const average_request& r) { return average_on(*self->state.ctx, r); },
      [self](const delta_request& r) {
        return accumulate_on(*self->state.ctx, "delta", r.a, r.b, -1.0f, "a", "b");
      },
      [](const encode_request& r) { return messages::encode(r.tensor, r.codec); },
      [](const decode_request& r) { return messages::decode(r.message); },
      [self](const ef_compress_request& r) { return self->state.ef.compress(r.key, r.tensor); },
      [self](const ef_reset_request& r) { return device_checks::reset_residuals(self->state.ef, r.key); },
      [self](reduce_part_request& r) { return reduce_on(*self->state.ctx, std::move(r.job)); },
      [self](const read_request& r) -> Result<std::vector<float>> {
        if (r.n > 0 && r.src == nullptr) return device_checks::null_memory("read");
        std::vector<float> out(r.n);
        if (cuda::status st = self->state.ctx->read(out.data(), r.src, r.n); !st) {
          return device_error("read", *self->state.ctx, st);
        }
        return out;
      },
      [self](const add_scaled_request& r) -> Status {
        if (!r.x.empty() && r.dst == nullptr) return device_checks::null_memory("add_scaled");
        const cuda::status st = r.overwrite ? self->state.ctx->write(r.dst, r.x.data(), r.x.size())
                                            : self->state.ctx->add_scaled(r.dst, r.x.data(), r.alpha, r.x.size());
        if (!st) {
          return device_error("add_scaled", *self->state.ctx, st);
        }
        return ok_status();
      },
  };
}

}  // namespace

Result<device_actor> spawn_backend_device_actor(caf::actor_system& sys, cuda::backend where,
                                                int device) {
  std::unique_ptr<cuda::device_context> ctx;
  if (cuda::status st = cuda::device_context::open(where, device, &ctx); !st) {
    return make_error(errc::unavailable,
                      "device actor: expected to open {} device {}, but: {}; use the CPU device "
                      "actor (spawn_device_actor picks it when no GPU is usable)",
                      cuda::to_string(where), device, st.message());
  }
  return sys.spawn<caf::detached>(context_device_behavior,
                                  std::shared_ptr<cuda::device_context>(std::move(ctx)));
}

Result<device_actor> spawn_cuda_device_actor(caf::actor_system& sys, int device) {
  return spawn_backend_device_actor(sys, cuda::backend::cuda, device);
}

device_actor spawn_device_actor(caf::actor_system& sys, int device) {
  if (cuda::default_backend() == cuda::backend::cuda) {
    auto gpu = spawn_cuda_device_actor(sys, device);
    if (gpu) return *gpu;
  }
  return spawn_cpu_device_actor(sys);
}

}  // namespace apiary::actors
