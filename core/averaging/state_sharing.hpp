#pragma once
/// State sharing (reference shared/reference/hivemind.md §3.6): a peer that joins late, or
/// falls behind, downloads the averaged tensors and their metadata from a peer that shares
/// its state.
///
/// - Declaring: a sharing peer stores under the DHT key `<prefix>.all_averagers` (a str
///   key), subkey = msgpack bin of its PeerID bytes, value = msgpack float64 priority
///   (nil: not sharing), expiration now + declare period.
/// - Choosing donors: order_state_donors() keeps the numeric, unexpired entries of other
///   peers, highest priority first.
/// - Serving: rpc_download_state (request DownloadRequest{}, a stream of DownloadData):
///   make_state_stream() builds the messages, serve_state_stream() the Replies. The first
///   message carries the metadata (and the first chunk of the first tensor, if any); then
///   each tensor's chunks in order (messages/tensor/streaming.hpp: a chunk with a dtype
///   starts a tensor and announces its chunk count). A peer that does not share ends the
///   stream without a message.
/// - Downloading: StateLoader asks the donors one after another until one streams a
///   complete, well-formed state.
///
/// Pure: time comes in as `now`, calls and timers go out as effects (core/effects.hpp).
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "averaging.pb.h"
#include "core/averaging/matchmaking_types.hpp"
#include "core/dht/timed_storage.hpp"
#include "core/effects.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"
#include "messages/tensor/streaming.hpp"
#include "messages/tensor/tensor.hpp"

namespace apiary::core::averaging {

/// The handle of the state stream without the averager's prefix; a shell serving an
/// averager with prefix P registers "P::" + this (hivemind's naming, reference §11.3).
inline constexpr const char* k_download_state_handle = "DecentralizedAverager.rpc_download_state";

/// The DHT key (a str key) under which the peers of averager `prefix` declare whether
/// they share their state: "<prefix>.all_averagers".
[[nodiscard]] std::string state_sharing_key(std::string_view prefix);

/// The subkey of `peer`'s declaration: msgpack bin of its PeerID bytes (hivemind's
/// `subkey=peer_id.to_bytes()`), as stored in and returned by the DHT.
[[nodiscard]] std::string state_sharing_subkey(const PeerIdBytes& peer);

/// The declared value: msgpack float64 `priority` (higher is asked first), or msgpack nil
/// when `priority` is empty (not sharing). errc::invalid_argument for a NaN priority.
[[nodiscard]] Result<std::string> encode_sharing_priority(std::optional<double> priority);

/// The entries of the `<prefix>.all_averagers` dictionary value as the DHT returns them:
/// packed subkey -> (packed value, expiration in DHT seconds). The same type as
/// core::dht::FoundValue::Dictionary.
using SharingDictionary = std::map<std::string, dht::ValueWithExpiration<std::string>>;

/// A peer that declared it shares its state.
struct StateDonor {
  PeerIdBytes peer;         ///< its PeerID bytes
  double priority = 0;      ///< its declared priority
  double expiration = 0;    ///< when its declaration expires, DHT seconds
};

/// The donors of `entries`, best first: priority descending; among equal priorities, by
/// peer bytes ascending when `tie_seed` is 0, else by a 64-bit mix of (tie_seed, peer
/// bytes) ascending, then peer bytes (so that peers loading at once can spread over equal
/// donors, as hivemind's random tie-break, yet reproducibly). Left out: `self`, entries
/// expired at `now` (expiration < now, DHT seconds), values that are nil (not sharing),
/// not numbers (bool, str, ...) or NaN, and subkeys that are not a msgpack bin or str.
[[nodiscard]] std::vector<StateDonor> order_state_donors(const SharingDictionary& entries,
                                                         const PeerIdBytes& self,
                                                         dht::DhtTime now,
                                                         std::uint64_t tie_seed = 0);

/// The serialized DownloadData messages of one state, in order: the first carries
/// `metadata` (application bytes, e.g. msgpack of {"group_key": bits}; must not be empty)
/// and the first chunk of the first tensor; then every chunk of every tensor. Each tensor
/// (float32, `shapes[i]`'s elements) is encoded with `codec` and split into chunks of at
/// most `chunk_size_bytes` buffer bytes (> 0; hivemind uses 64 KiB). No tensors: one
/// message with the metadata only. Errors (errc::invalid_argument): empty metadata,
/// shapes not aligned with tensors, a tensor whose size is not its shape's element count,
/// chunk_size_bytes 0; the codec's errors (e.g. MEANSTD_16BIT on a 0-d tensor).
[[nodiscard]] Result<std::vector<std::string>> make_state_stream(
    const std::string& metadata, const std::vector<std::vector<float>>& tensors,
    const std::vector<messages::Shape>& shapes, pb::CompressionType codec,
    std::size_t chunk_size_bytes = messages::default_chunk_bytes);

/// The messages of a state whose tensors are encoded already (any dtype, any codec, e.g.
/// runtime.proto Tensors a trainer serialized): each split into chunks of at most
/// `chunk_size_bytes`. Errors: errc::invalid_argument (empty metadata, chunk size 0).
[[nodiscard]] Result<std::vector<std::string>> make_state_stream(const std::string& metadata,
                                                                 const std::vector<pb::Tensor>& encoded,
                                                                 std::size_t chunk_size_bytes = messages::default_chunk_bytes);

/// The Replies answering inbound rpc_download_state `request`: each message with
/// last = false, then an empty Reply with last = true. An empty `stream` (sharing off)
/// is just the end; an error is one Reply carrying it.
[[nodiscard]] Effects serve_state_stream(RequestId request,
                                         Result<std::vector<std::string>> stream);

/// A state as downloaded.
struct DownloadedState {
  std::string metadata;                      ///< the donor's metadata bytes
  std::vector<std::vector<float>> tensors;   ///< the tensors, float32, in stream order
  std::vector<messages::Shape> shapes;       ///< their shapes, aligned with tensors
  /// The tensors as decoded, in their own dtypes, instead of `tensors` (which is then
  /// empty), from a reader that takes any dtype.
  std::vector<messages::Tensor> typed;
  PeerAddr donor;                            ///< who sent it (empty from a bare reader)
};

/// Reads one donor's stream incrementally (StateLoader's parser; usable alone). After an
/// error the reader is spent: start a new one for the next donor.
class StateStreamReader {
 public:
  /// `expected_shapes`: when set, the state must have exactly these tensors' shapes.
  /// `max_bytes`: most tensor buffer bytes accepted (0: no limit). `any_dtype`: tensors
  /// of every dtype are taken (into DownloadedState::typed), not only float32.
  explicit StateStreamReader(std::optional<std::vector<messages::Shape>> expected_shapes = {},
                             std::uint64_t max_bytes = 0, bool any_dtype = false);

  /// Feeds the next serialized DownloadData. Errors: errc::malformed (not DownloadData,
  /// no metadata in the first message, a tensor that does not decode or is not float32),
  /// errc::protocol (metadata repeated, a message without tensor chunk after the first,
  /// chunks beyond the announced count, a tensor begun early, tensors not as expected),
  /// errc::too_large (more than max_bytes).
  [[nodiscard]] Status push(const std::string& message);

  /// The state once the stream ended. Errors: errc::not_found for a stream without any
  /// message (the donor does not share), errc::truncated for a tensor whose chunks are
  /// missing, errc::protocol for fewer tensors than expected.
  [[nodiscard]] Result<DownloadedState> finish();

  /// Messages pushed so far.
  [[nodiscard]] std::size_t messages() const { return messages_; }

 private:
  std::optional<std::vector<messages::Shape>> expected_;
  std::uint64_t max_bytes_ = 0;
  bool any_dtype_ = false;
  std::uint64_t bytes_ = 0;
  std::size_t messages_ = 0;
  messages::StreamAssembler assembler_;
  DownloadedState state_;
};

/// Settings of one download.
struct StateLoaderConfig {
  /// Addresses of the donors, best first (e.g. order_state_donors mapped to addresses).
  std::vector<PeerAddr> donors;
  /// Service handle of the state stream (with the averager's prefix).
  std::string handle = k_download_state_handle;
  /// Longest wait for a donor's first message and between two of its messages (> 0);
  /// past it the donor is stalled and the next one is asked. 15 s is the Optimizer's
  /// next_chunk_timeout (its matchmaking_time).
  Duration chunk_timeout = std::chrono::seconds(15);
  /// Deadline of each donor's call as a whole (> 0); hivemind's load_state_timeout.
  Duration call_timeout = std::chrono::seconds(600);
  /// When set, a donor whose tensors' shapes differ is skipped (e.g. another model).
  std::optional<std::vector<messages::Shape>> expected_shapes;
  /// Most tensor buffer bytes accepted from one donor (0: no limit).
  std::uint64_t max_state_bytes = 0;
  /// Take tensors of any dtype (DownloadedState::typed) rather than float32 only.
  bool any_dtype = false;
  /// Added to every call id and timer id, so that one shell can host several roles.
  std::uint64_t id_base = 0;
};

/// Why one donor did not deliver.
struct DonorFailure {
  PeerAddr donor;
  Error error;
};

/// Downloads the state from the first donor that delivers one. Call ids are
/// config.id_base + 1 + donor index; the one timer is config.id_base + 1 (re-armed at each
/// message for chunk_timeout).
class StateLoader {
 public:
  /// Checks `config` (handle non-empty, timeouts > 0); an empty donor list is accepted
  /// (start() then fails with errc::not_found).
  [[nodiscard]] static Result<StateLoader> create(StateLoaderConfig config);

  /// Opens the stream to the first donor (Call{stream, last: DownloadRequest is the only
  /// request message}) and arms the timer.
  [[nodiscard]] Effects start(TimePoint now);
  /// A message on call `call`; a malformed one fails the donor (its call is cancelled).
  [[nodiscard]] Effects on_message(TimePoint now, CallId call, const std::string& message);
  /// Call `call` ended ("" normally, or a final message) or broke: done, or next donor.
  [[nodiscard]] Effects on_response(TimePoint now, CallId call, const Result<std::string>& result);
  /// The timer fired: the donor stalled; its call is cancelled and the next one asked.
  [[nodiscard]] Effects on_timer(TimePoint now, TimerId id);
  /// Gives up: cancels the open call and the timer; the outcome is errc::cancelled.
  [[nodiscard]] Effects cancel(TimePoint now);

  /// True once the outcome is known.
  [[nodiscard]] bool finished() const { return outcome_.has_value(); }
  /// The state and its donor, or errc::unavailable listing every donor and why it failed
  /// (errc::not_found without donors, errc::cancelled after cancel()). Set once finished().
  [[nodiscard]] const std::optional<Result<DownloadedState>>& outcome() const { return outcome_; }
  /// Moves the outcome out (the tensors can be large); empty if not finished.
  [[nodiscard]] std::optional<Result<DownloadedState>> take_outcome() { return std::move(outcome_); }
  /// The donors that failed so far, in the order they were asked.
  [[nodiscard]] const std::vector<DonorFailure>& failures() const { return failures_; }

 private:
  explicit StateLoader(StateLoaderConfig config);

  void ask(Effects& fx, TimePoint now);
  void fail_donor(Effects& fx, TimePoint now, Error error, bool cancel_call);
  void arm(Effects& fx, TimePoint now);
  [[nodiscard]] CallId call_id() const { return config_.id_base + 1 + current_; }
  [[nodiscard]] TimerId timer_id() const { return config_.id_base + 1; }
  [[nodiscard]] bool is_current(CallId call) const;

  StateLoaderConfig config_;
  std::size_t current_ = 0;       ///< index of the donor being asked
  bool running_ = false;          ///< a call is open
  TimePoint deadline_{};          ///< when the armed timer is due
  StateStreamReader reader_;
  std::vector<DonorFailure> failures_;
  std::optional<Result<DownloadedState>> outcome_;
};

}  // namespace apiary::core::averaging
