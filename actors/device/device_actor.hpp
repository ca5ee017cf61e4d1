#pragma once
/// Device actors: element-wise tensor work (weighted accumulate, average, delta, codec
/// encode/decode, error-feedback fp16 compression) done off the caller's thread, one
/// request at a time per actor, each answered when its result is ready.
///
/// `device_actor` is the typed interface; the CPU actor here implements it with the CPU
/// twins of cuda/kernels.hpp. A CUDA device actor serves the same messages with the same
/// replies (uploading the host Buffers, running the gpu:: kernels, downloading), so
/// callers hold a `device_actor` and do not care which one they got.
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
    caf::replies_to<ef_reset_request>::with<bool>>;

/// Spawns a CPU device actor on its own thread (detached), so long element-wise loops
/// never hold up the scheduler's workers. It owns its error-feedback residuals.
device_actor spawn_cpu_device_actor(caf::actor_system& sys);

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
