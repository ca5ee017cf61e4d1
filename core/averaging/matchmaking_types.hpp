#pragma once
/// The vocabulary of matchmaking (reference §3.3): what a step asks for, what it yields,
/// and the DHT operations the role emits. The role never touches the DHT itself: it
/// returns DhtDeclare / DhtGetAveragers effects and receives their results as inputs
/// (`Matchmaking::on_declared`, `Matchmaking::on_averagers`).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/averaging/group_key.hpp"
#include "core/effects.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::core::averaging {

/// The service handle of the join stream (request JoinRequest, up to two MessageFromLeader).
inline constexpr const char* k_join_handle = "apiary.DecentralizedAverager.rpc_join_group";

/// Identifies one DHT operation emitted by the role; chosen by the role.
using DhtOpId = std::uint64_t;

/// A peer's PeerID bytes (the DHT subkey of its declaration, the ids in a group).
using PeerIdBytes = std::string;

/// Store (group_key, subkey = peer) = looking with `expiration` (DHT seconds). A later
/// `looking = false` with a larger expiration overrides an earlier `true` (leaving).
struct DhtDeclare {
  DhtOpId op = 0;
  std::string group_key;
  PeerIdBytes peer;
  bool looking = true;
  double expiration = 0;  ///< DHT time, seconds
};

/// Read every subkey of `group_key` (latest values); answer with the peers whose value is
/// `true` and not expired, through `Matchmaking::on_averagers`.
struct DhtGetAveragers {
  DhtOpId op = 0;
  std::string group_key;
};

/// One DHT operation.
using DhtOp = std::variant<DhtDeclare, DhtGetAveragers>;

/// A declared averager as read from the DHT.
struct Averager {
  PeerIdBytes peer;
  double expiration = 0;  ///< DHT time, seconds
};

/// A formed group, as every member learns it.
struct GroupInfo {
  std::string group_id;                 ///< k_group_id_bytes random bytes drawn by the leader
  std::vector<PeerIdBytes> peers;       ///< members in the leader's (shuffled) order
  std::vector<std::string> gathered;    ///< each member's gather bytes, aligned with `peers`
  std::size_t my_index = 0;             ///< this peer's index in `peers`
  PeerIdBytes leader;                   ///< who assembled the group (this peer if it led)
  std::string next_group_bits;          ///< the group bits after the Moshpit update
  std::string next_group_key;           ///< prefix.0b<next_group_bits>
};

/// What one input produced: calls/replies/timers, DHT operations, and at most once per
/// step the step's outcome (a group, or an error saying why none was found).
struct MatchmakingEffects {
  Effects rpc;
  std::vector<DhtOp> dht;
  std::optional<Result<GroupInfo>> outcome;
};

/// One matchmaking step (hivemind's `step(...)` as far as matchmaking goes).
struct StepParams {
  /// DHT time (seconds) at which the averager wants the all-reduce to begin; the
  /// declared expiration is never earlier than `now + min_matchmaking_time`.
  double scheduled_time = 0;
  /// DHT time (seconds) by which a group must be found, else the step fails
  /// ("could not find a group"); +inf: no deadline.
  double deadline = std::numeric_limits<double>::infinity();
  /// Averaging weight (carried for the caller; matchmaking itself does not read it).
  double weight = 1.0;
  /// This peer's gather bytes, delivered to every member of the group.
  std::string gather;
  /// A client never declares itself, never leads, and only joins others' groups.
  bool client_mode = false;
  /// The group is assembled as soon as it has this many members (0: no target).
  std::size_t target_group_size = 0;
  /// At the leader's expiration the group is assembled if it has this many members,
  /// else disbanded (>= 1).
  std::size_t min_group_size = 2;
  /// The least time spent matchmaking before a group may start (> 0).
  Duration min_matchmaking_time = std::chrono::seconds(5);
  /// How long a follower waits for a leader's first answer, and for its second one
  /// beyond the follower's expiration (> 0). Also the period at which an empty leader
  /// queue is read again from the DHT.
  Duration request_timeout = std::chrono::seconds(3);
  /// Hash of the averaged tensors' schema; peers with another hash are rejected (non-empty).
  std::string schema_hash;
  /// The current group key `prefix.0b<bits>`.
  std::string group_key;
};

/// Checks a StepParams; the error names the bad field, its value and the accepted range.
[[nodiscard]] Status validate(const StepParams& params);

/// The address an averager id names when the id is its multiaddr, as apiary's are (the
/// empty address, which no call reaches, for one that does not parse).
[[nodiscard]] PeerAddr address_of_multiaddr(const PeerIdBytes& id);

/// Fixed settings of one averager's matchmaking role.
struct MatchmakingConfig {
  /// This averager's PeerID bytes (non-empty).
  PeerIdBytes peer_id;
  /// Added to `to_seconds(now)` to get DHT time (seconds): DHT expirations are absolute.
  double dht_epoch = 0;
  /// Where calls to a peer go: the shell's address for a PeerID. Default:
  /// address_of_multiaddr (an averager's id is its multiaddr).
  std::function<PeerAddr(const PeerIdBytes&)> address_of;
  /// The leaders' join stream (with the averager's prefix, if the host uses one).
  std::string join_handle = k_join_handle;
};

/// The generator the role draws group ids and member orders from (64 random bits per call).
using NextU64 = std::function<std::uint64_t()>;

/// A uniform draw in [0, n) from `next` by rejection (n >= 1), portable across standard
/// libraries (unlike std::uniform_int_distribution).
[[nodiscard]] std::uint64_t uniform_below(const NextU64& next, std::uint64_t n);

}  // namespace apiary::core::averaging
