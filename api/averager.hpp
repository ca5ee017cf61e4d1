#pragma once
/// apiary::Averager: decentralized averaging of a trainer's tensors (hivemind's
/// DecentralizedAverager). It runs beside a Dht (same gateway, same actor system): each
/// step() finds a group through the DHT (matchmaking), averages the tensors with it by
/// butterfly all-reduce, and applies tensor += averaging_alpha * (average - tensor) to
/// the tensors it holds. The trainer reads and updates those tensors between steps with
/// with_tensors(); an update made while a step runs is kept (the step adds a delta).
///
/// The tensors are host float32 vectors, or float32 arrays in a device's memory
/// (device_tensors: a GPU's, or host memory behind the CPU device actor) that the
/// averager reads before each step and updates in place after it. Groups name members by their multiaddr with
/// /p2p/<PeerID>; the group key is `<prefix>.0b<bits>` with the Moshpit update applied
/// after every round.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/dht.hpp"
#include "core/averaging/averager_role.hpp"
#include "messages/result.hpp"
#include "messages/tensor/tensor.hpp"
#include "runtime.pb.h"

namespace apiary {

/// A float32 tensor in the memory of the averager's device actor: a CUDA device pointer
/// of GPU `AveragerOptions::gpu` with ReduceOn::gpu, host memory with ReduceOn::cpu. The
/// trainer keeps it alive while the averager runs.
struct DeviceTensor {
  float* data = nullptr;  ///< first element
  std::size_t size = 0;   ///< elements
};

/// Where an averager's part reductions run (the weighted sums of its span of the
/// all-reduce and each sender's delta).
enum class ReduceOn {
  automatic,  ///< the GPU `gpu` when apiary has CUDA and it opens, else the CPU device actor
  cpu,        ///< the CPU device actor (a thread of its own, vectorised loops)
  gpu,        ///< the CUDA device actor of GPU `gpu`; start() fails when it cannot open
  in_role,    ///< inline in the averager's protocol core as parts arrive (no thread hop)
};

/// A state as a peer shares it (AveragerOptions::current_state).
struct SharedState {
  std::string metadata;             ///< non-empty bytes (e.g. msgpack)
  std::vector<pb::Tensor> tensors;  ///< runtime.proto Tensors, encoded
};

/// How to start an averager.
struct AveragerOptions {
  /// The experiment's name: group keys are `<prefix>.0b<bits>` (no dots).
  std::string prefix;
  /// The tensors to average (float32, flattened); every peer of the swarm must pass the
  /// same sizes and codecs.
  std::vector<std::vector<float>> tensors;
  /// Instead of `tensors`: tensors in the device actor's memory (reduce_on cpu or gpu).
  /// Each step reads them (the host copy tensors() shows is refreshed then) and adds
  /// averaging_alpha * (average - tensor) to them on the device; update them there, not
  /// through with_tensors().
  std::vector<DeviceTensor> device_tensors;
  /// node (sends and reduces), client (sends, never reduces) or aux (reduces only).
  core::averaging::AveragingMode mode = core::averaging::AveragingMode::node;
  /// Groups are assembled as soon as they have this many members.
  std::size_t target_group_size = 16;
  /// A group smaller than this at the leader's expiration is disbanded (>= 1).
  std::size_t min_group_size = 2;
  /// The initial group bits (Moshpit grid); "" = one bucket.
  std::string initial_group_bits;
  /// Least time spent matchmaking before a group may start, seconds.
  double min_matchmaking_time = 5.0;
  /// How long a follower waits for a leader's answer, seconds.
  double request_timeout = 3.0;
  /// tensor += alpha * (average - tensor).
  double averaging_alpha = 1.0;
  /// Every member of a round ends with the same bits, compressed codecs included
  /// (reducers answer with their averages encoded once, and apply what they sent to
  /// their own parts; the results are written over the tensors, not added). Every
  /// member of the swarm must set it; needs averaging_alpha 1 and a mode other than aux.
  /// For results that must agree everywhere (DiLoCo's outer step).
  bool identical_results = false;
  /// This peer's bandwidth for load balancing (any unit the swarm agrees on); nullopt:
  /// an equal share.
  std::optional<double> bandwidth;
  /// Codec of each tensor's parts (one entry applies to all).
  std::vector<pb::CompressionType> codecs{pb::NONE};
  /// Largest compressed part, bytes.
  std::int64_t part_size_bytes = std::int64_t{1} << 19;
  /// A peer whose share would be below this many elements reduces nothing.
  std::int64_t min_vector_size = 0;
  double sender_timeout = 5.0;   ///< seconds: a sender's silence before it is excluded
  double reducer_timeout = 10.0; ///< seconds: a reducer's silence before its parts stay local
  /// Share this peer's tensors with newcomers (load_state_from_peers) with this priority:
  /// the highest-priority donor is asked first. nullopt: do not share.
  std::optional<double> state_sharing_priority;
  /// Seconds between state-sharing declarations in the DHT.
  double declare_state_period = 30.0;
  /// Codec of each tensor of the shared state (empty: NONE; one entry applies to all).
  std::vector<pb::CompressionType> state_codecs;
  /// The state a peer downloads, built when one asks (hivemind's get_current_state):
  /// metadata bytes and the tensors encoded (any dtype and codec). Null: the averaged
  /// tensors (float32, flat, state_codecs) with set_state_metadata's metadata. Runs on
  /// the averager's actor thread: it must not wait on the averager.
  std::function<Result<SharedState>()> current_state;
  /// Average by PowerSGD (core/averaging/powersgd.hpp; hivemind's
  /// PowerSGDGradientAverager): the tensors as rows x cols matrices (0 x 0: averaged
  /// plainly), each round two all-reduces of rank-`rank` factors on one group, with the
  /// error feedback kept here between steps. Every peer of the swarm must use the same
  /// (it is part of the schema); not with identical_results.
  std::optional<core::averaging::PowerSgdConfig> powersgd;
  /// Seeds group ids and member orders (0: from the PeerID).
  std::uint64_t seed = 0;
  /// Where the part reductions run, and which GPU (a CUDA ordinal) for automatic and gpu.
  ReduceOn reduce_on = ReduceOn::automatic;
  int gpu = 0;
};

/// One step's settings.
struct AveragerStepOptions {
  /// This peer's averaging weight (>= 0).
  double weight = 1.0;
  /// The whole step (matchmaking retries included) fails after this many seconds.
  double timeout = 30.0;
  /// When the all-reduce should begin, seconds from now (0: as soon as a group forms,
  /// after min_matchmaking_time).
  double scheduled_in = 0;
  /// Bytes delivered to every groupmate (their `gathered`).
  std::string gather;
  /// Begin the all-reduce only after trigger() (matchmaking runs meanwhile).
  bool require_trigger = false;
};

/// What a step did.
struct AveragerStepReport {
  std::string group_id;               ///< raw bytes
  std::vector<std::string> peers;     ///< members in the group's order (multiaddrs)
  std::vector<std::string> gathered;  ///< each member's gather bytes, aligned with peers
  std::size_t my_index = 0;           ///< this peer's index in peers
  /// Elements load balancing gave each member; parts are whole, so a part straddling two
  /// shares is reduced by the member with the larger overlap.
  std::vector<std::int64_t> shares;
  std::vector<std::string> failed_senders;   ///< excluded senders, as seen here
  std::vector<std::string> failed_reducers;  ///< reducers whose parts kept local values
  std::size_t attempts = 1;           ///< matchmaking attempts
  std::string next_group_key;         ///< the key of the next round
};

/// A state downloaded from a peer.
struct AveragerState {
  std::string metadata;   ///< the donor's metadata bytes (see Averager::set_state_metadata)
  std::string donor;      ///< the donor's multiaddr
  /// The donor's tensors as decoded, in their dtypes and shapes (load_state_from_peers
  /// with any_state); empty otherwise (the tensors replaced the averager's own).
  std::vector<messages::Tensor> tensors;
};

class Averager {
 public:
  /// Starts an averager on `dht`'s gateway and actor system (`dht` must outlive it).
  /// Errors: bad options (invalid_argument).
  static Result<std::unique_ptr<Averager>> start(Dht& dht, AveragerOptions options);
  ~Averager();
  Averager(const Averager&) = delete;
  Averager& operator=(const Averager&) = delete;

  /// Runs one averaging step; the future is ready once the step's deltas are applied or
  /// it failed (no group before the timeout, cancel, another step running).
  std::future<Result<AveragerStepReport>> step(const AveragerStepOptions& options = {});
  /// Lets a require_trigger step begin its all-reduce, with the tensors as they are now
  /// (read again from device_tensors): a step scheduled early averages what the trainer
  /// put in the tensors before the trigger.
  void trigger();
  /// Cancels the running step (its future gets errc::cancelled).
  void cancel();
  /// Changes the running step's weight before its all-reduce begins; false afterwards.
  bool set_weight(double weight);

  /// Replaces the tensors with those of the highest-priority peer sharing its state,
  /// falling back to the next donor when one fails, stalls or sends another schema.
  /// Errors: no donor (not_found), every donor failed (unavailable, naming each).
  /// `any_state`: take a state of any tensors (any count, dtype, shape: a donor with its
  /// own current_state) into AveragerState::tensors, leaving the averager's as they are.
  std::future<Result<AveragerState>> load_state_from_peers(double timeout = 60.0, bool any_state = false);
  /// The metadata sent with this peer's state (default: msgpack str of the group key).
  void set_state_metadata(std::string metadata);
  /// Declares this peer a donor with `priority` from now on (hivemind's
  /// state_sharing_priority setter; the Optimizer sets it to its epoch), at once;
  /// nullopt: no longer declared (the last declaration expires). Errors: a NaN
  /// (invalid_argument); an averager started without state_sharing_priority cannot
  /// begin sharing (invalid_argument); the averager is gone (cancelled).
  Status set_state_sharing_priority(std::optional<double> priority);

  /// Runs `fn` on the tensors under the averager's lock (read or update them).
  void with_tensors(const std::function<void(std::vector<std::vector<float>>&)>& fn);
  /// A copy of the tensors (with device_tensors: read from the device now, unless the
  /// default shared state keeps a host copy of them).
  [[nodiscard]] std::vector<std::vector<float>> tensors() const;
  /// The averager's id in groups: its multiaddr with /p2p/<PeerID>.
  [[nodiscard]] const std::string& id() const { return id_; }
  /// The group key the next step uses.
  [[nodiscard]] std::string group_key() const;
  /// Bytes this process's transport sent and received so far (all traffic).
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> transport_bytes() const;

 private:
  Averager() = default;
  std::shared_ptr<Runtime> runtime_;  ///< the node's own runtime, if it has one: it outlives this averager
  Dht* dht_ = nullptr;
  struct Impl;
  std::shared_ptr<Impl> impl_;  ///< shared with the callback of a running step
  std::string id_;
};

/// Rounds on common time boundaries (multiples of `every` seconds of Unix time), so that
/// averagers started apart step together: each round at the first boundary at least
/// `lead` seconds away and after the last round's. A group assembles as soon as it is
/// full, so a peer also waits until `lead` seconds before the boundary to begin
/// matchmaking: groups that finish early then never start the next round while their
/// slower peers are still on this one.
class RoundClock {
 public:
  explicit RoundClock(double every) : every_(every) {}
  /// Waits until `lead` seconds before the next round's boundary and returns the
  /// seconds left to it (AveragerStepOptions::scheduled_in).
  double wait_for_round(double lead);

 private:
  double every_;
  double last_ = 0;
};

}  // namespace apiary
