#pragma once
/// Every type and atom apiary puts in CAF messages, in one place. These types stay
/// inside one process (the wire format is protobuf over UCX), so they are allowed as
/// unsafe (non-serializable) message types.
#include <caf/all.hpp>

#include "actors/device/device_messages.hpp"
#include "core/rpc/engine.hpp"
#include "messages/buffer.hpp"
#include "messages/result.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::core::rpc::Delivery)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::Buffer)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::Result<apiary::Buffer>)
// Device actors (actors/device/).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::actors::accumulate_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::actors::average_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::actors::delta_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::actors::encode_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::actors::decode_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::actors::ef_compress_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::actors::ef_reset_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::actors::reduce_part_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::actors::read_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::actors::add_scaled_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::Result<std::vector<float>>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::Status)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::Result<apiary::core::averaging::ReducedPart>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::Result<apiary::pb::Tensor>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::Result<apiary::messages::Tensor>)

namespace apiary::actors {

using call_atom = caf::atom_constant<caf::atom("call")>;
using serve_atom = caf::atom_constant<caf::atom("serve")>;
using timer_atom = caf::atom_constant<caf::atom("timer")>;
using report_atom = caf::atom_constant<caf::atom("report")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;

}  // namespace apiary::actors

// The generic role host (actors/role_actor.hpp).
namespace apiary::actors {
struct role_call_message;
struct role_reply_message;
}  // namespace apiary::actors
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::actors::role_call_message)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::actors::role_reply_message)

