#pragma once
/// Device actors: element-wise tensor work (weighted accumulate, average, delta, the
/// all-reduce's part reductions, codec encode/decode, error-feedback fp16 compression) done off the caller's thread, one
/// request at a time per actor, each answered when its result is ready.
///
/// `device_actor` is the typed interface; the CPU actor implements it with the CPU twins
/// of cuda/kernels.hpp, the CUDA actor (cuda_device_actor.cpp) with one
/// cuda::device_context per GPU (one stream, one memory pool): it uploads the host
/// Buffers, runs the gpu:: kernels and downloads, with the same replies bit for bit.
/// Codecs and error feedback run on the host in both for now (messages/tensor/), the GPU
/// codec kernels being in cuda/codec_kernels.hpp. spawn_device_actor() picks one at run
/// time, so callers hold a `device_actor` and do not care which one they got.
///
/// Errors come back as a Result holding an Error (never a dropped request): a buffer
/// that is not float32-sized or two buffers of different lengths are
/// errc::invalid_argument, a dtype a codec or compressor cannot take errc::unsupported.
/// The actor keeps serving after an error.
#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>
#include <caf/replies_to.hpp>

#include "actors/device/device_messages.hpp"
#include "actors/type_ids.hpp"
#include "cuda/status.hpp"
#include "messages/result.hpp"

namespace apiary::actors {

/// The messages every device actor serves (CPU now; a CUDA one later).
using device_actor = caf::typed_actor<
    caf::replies_to<accumulate_request>::with<Result<Buffer>>,
    caf::replies_to<average_request>::with<Result<Buffer>>,
    caf::replies_to<delta_request>::with<Result<Buffer>>,
    caf::replies_to<encode_request>::with<Result<pb::Tensor>>,
    caf::replies_to<decode_request>::with<Result<messages::Tensor>>,
    caf::replies_to<ef_compress_request>::with<Result<messages::Tensor>>,
    caf::replies_to<ef_reset_request>::with<bool>,
    caf::replies_to<reduce_part_request>::with<Result<core::averaging::ReducedPart>>,
    caf::replies_to<read_request>::with<Result<std::vector<float>>>,
    caf::replies_to<add_scaled_request>::with<Status>>;

/// Spawns a CPU device actor on its own thread (detached), so long element-wise loops
/// never hold up the scheduler's workers. It owns its error-feedback residuals.
device_actor spawn_cpu_device_actor(caf::actor_system& sys);

/// Spawns a device actor (detached) that owns a cuda::device_context on `where`: CUDA
/// device `device` with its own stream and memory pool, or, for backend::cpu, the same
/// code path on host memory (how the CUDA actor's logic is tested without a GPU).
/// errc::unavailable when the device cannot be opened (no driver, no such device, a
/// build without CUDA); the message says why.
Result<device_actor> spawn_backend_device_actor(caf::actor_system& sys, cuda::backend where,
                                                int device);

/// The CUDA device actor of GPU `device` (spawn_backend_device_actor on backend::cuda).
Result<device_actor> spawn_cuda_device_actor(caf::actor_system& sys, int device);

/// The device actor chosen at run time: the CUDA actor of GPU `device` when
/// cuda::default_backend() is cuda (a CUDA build, a device, APIARY_BACKEND not "cpu")
/// and the device opens, the CPU actor otherwise.
device_actor spawn_device_actor(caf::actor_system& sys, int device = 0);

/// The element-wise operations the CPU device actor runs, callable without an actor
/// (the actor's handlers are these plus the codecs). Same errors as the requests.
namespace cpu_device {

/// acc + weight * x as a new float32 Buffer.
Result<Buffer> accumulate(const accumulate_request& r);
/// sum / count as a new float32 Buffer.
Result<Buffer> average(const average_request& r);
/// a - b as a new float32 Buffer.
Result<Buffer> delta(const delta_request& r);

}  // namespace cpu_device

}  // namespace apiary::actors
