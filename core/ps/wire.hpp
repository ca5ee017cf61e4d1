#pragma once
/// The parameter-server RPC's handles and the conversions between its protobuf
/// messages (proto/ps.proto) and core::ps's types.
///
/// Two ways to the same bytes: the protobuf messages (to_pb / from_pb, for everything),
/// and a direct path for the two messages that carry a whole shard of float32 values,
/// a dense push and a pull response. The direct path writes and reads the protobuf
/// encoding itself (the floats as one packed little-endian run), so a value is copied
/// once between the wire bytes and its final place instead of three times (vector,
/// RepeatedField, serialization; parse, RepeatedField, vector). Either side may use
/// either path: the bytes are the same.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

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
/// Handle of a replica's rejoin (PsRejoinRequest -> PsRejoinResponse): a replica process
/// started again takes part in a running synchronous job from a step no replica has
/// pushed yet.
inline constexpr const char* k_ps_rejoin_handle = "apiary.ParameterServer.rpc_rejoin";
/// Handle of a reader of a node's proxy saying it is done (PsPullRequest naming the
/// replica -> empty): every answer it asked the proxy for is in, so the replica hosting the
/// proxy may stop without cutting one off.
inline constexpr const char* k_ps_proxy_done_handle = "apiary.ParameterServer.rpc_proxy_done";
/// Handle of a shard's optimizer state (PsPullRequest -> PsOptimizerState), for checkpoints.
inline constexpr const char* k_ps_optimizer_state_handle = "apiary.ParameterServer.rpc_optimizer_state";

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

// ---- the direct path for float32 payloads ----

/// The fields of a dense push, with its gradient left where it lies.
struct DensePushView {
  std::string_view shard;    ///< the shard's name (points into the bytes)
  std::int32_t replica = 0;  ///< who pushes
  std::int64_t step = 0;     ///< the replica's step
  double samples = 0.0;      ///< examples behind the gradient
  float learning_rate = 0.0F;  ///< the update's rate, or 0: the configured one
  DenseBytes gradient;       ///< the values (points into the bytes; empty when none)
};

/// Serialized size, in bytes, of a PsPushRequest with a dense gradient of `count` values.
[[nodiscard]] std::size_t dense_push_size(const std::string& shard, std::int32_t replica, std::int64_t step,
                                          double samples, std::size_t count, float learning_rate = 0.0F);
/// Writes that PsPushRequest to `out` (exactly dense_push_size() bytes): the bytes of
/// to_pb(shard, push).SerializeAsString() for the same push. Returns the bytes written.
std::size_t encode_dense_push(char* out, const std::string& shard, std::int32_t replica, std::int64_t step,
                              double samples, const float* values, std::size_t count, float learning_rate = 0.0F);

/// The bytes of encode_dense_push() before and after its values, for a push sent in
/// pieces with the values left where they lie: head + the values' raw float32 bytes +
/// tail is encode_dense_push()'s message (count > 0).
[[nodiscard]] std::pair<std::string, std::string> dense_push_framing(const std::string& shard, std::int32_t replica,
                                                                     std::int64_t step, double samples,
                                                                     std::size_t count, float learning_rate = 0.0F);

/// Reads a PsPushRequest whose gradient is dense (one packed run of floats, or none)
/// without copying the values. False for anything else (a sparse gradient, unpacked
/// floats, a repeated or unknown field, malformed bytes): the caller then parses it
/// with protobuf, which accepts every valid encoding and reports malformed bytes.
[[nodiscard]] bool scan_dense_push(std::string_view bytes, DensePushView& out);

/// The bytes of encode_pull_response() before its values (the whole message when
/// count is 0): the message is this head + the values' raw float32 bytes.
[[nodiscard]] std::string pull_response_head(const std::string& shard, std::int32_t replica, std::int64_t step,
                                             std::int64_t version, std::size_t count);

/// A PsPullResponse for `count` values at `values`: the bytes of
/// to_pb(shard, PullReply{replica, step, version, values}).SerializeAsString().
[[nodiscard]] std::string encode_pull_response(const std::string& shard, std::int32_t replica, std::int64_t step,
                                               std::int64_t version, const float* values, std::size_t count);

/// A PsPullResponse from the wire, its values copied once into the reply. Any valid
/// encoding is read (unusual ones through protobuf). Errors: malformed, naming what
/// came, when the bytes are not a PsPullResponse.
[[nodiscard]] Result<PullReply> decode_pull_response(std::string_view bytes);

/// decode_pull_response() into `out`, reusing the storage out.values already has: when
/// it holds as many values as came, they are overwritten in place (no allocation, no
/// zero fill). Errors: as decode_pull_response(); `out` is then unspecified.
[[nodiscard]] Status decode_pull_response_into(std::string_view bytes, PullReply& out);

/// The head of a pull response whose `landed` value bytes were received elsewhere (a
/// Landing): pull_response_head()'s bytes, its fields read into `out` (out.values is
/// left alone: it is where the values landed). Errors: malformed, when the head is not
/// one whose values field, last, holds exactly `landed` bytes.
[[nodiscard]] Status decode_landed_pull_response(std::string_view head, std::size_t landed, PullReply& out);

}  // namespace apiary::core::ps
