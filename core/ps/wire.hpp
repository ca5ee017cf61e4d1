#pragma once
/// The parameter-server RPC's handles and the conversions between its protobuf
/// messages (proto/ps.proto) and core::ps's types.
#include <string>

#include "core/ps/shard.hpp"
#include "messages/result.hpp"
#include "ps.pb.h"

namespace apiary::core::ps {

/// Handle of a push (PsPushRequest -> PsPushResponse).
inline constexpr const char* k_ps_push_handle = "apiary.ParameterServer.rpc_push";
/// Handle of a pull (PsPullRequest -> PsPullResponse).
inline constexpr const char* k_ps_pull_handle = "apiary.ParameterServer.rpc_pull";
/// Handle of a replica's session: a stream opened with one PsJoinRequest, kept open
/// while the replica trains, ended by it when done (no messages back).
inline constexpr const char* k_ps_join_handle = "apiary.ParameterServer.rpc_join";

/// A push for shard `shard` in wire form.
pb::PsPushRequest to_pb(const std::string& shard, const Push& push);
/// A push from the wire (the shard name stays in the message).
Push from_pb(const pb::PsPushRequest& request);

/// An acknowledgement in wire form.
pb::PsPushResponse to_pb(const std::string& shard, const PushAck& ack);
/// Parameters in wire form.
pb::PsPullResponse to_pb(const std::string& shard, const PullReply& reply);
/// Parameters from the wire.
PullReply from_pb(const pb::PsPullResponse& response);

}  // namespace apiary::core::ps
