#pragma once
/// apiary::Optimizer: hivemind's collaborative Optimizer for C++ trainers, over flat
/// float32 tensors. Peers of different speeds train one model: each accumulates its
/// gradients (weighted by samples) and reports its samples through a ProgressTracker;
/// once the swarm has `target_batch_size` samples (an epoch) the peers average their
/// gradients (a round pre-scheduled `matchmaking_time` before the epoch ends), each takes
/// the optimizer step (SGD, momentum or Adam of core/ps, or the caller's), and every
/// `average_state_every` epochs they average parameters and optimizer slots. A peer
/// behind the swarm's epoch loads the most advanced peer's state (shared with priority =
/// epoch). The decisions are core/optim/epoch.hpp's; the Python Optimizer takes the same.
/// Everything runs on the caller's thread (no background optimizer step).
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/averager.hpp"
#include "api/dht.hpp"
#include "api/progress.hpp"
#include "core/ps/optimizer.hpp"
#include "messages/result.hpp"

namespace apiary {

/// How to train.
struct OptimizerOptions {
  /// The run's name: peers with the same run_id train together (DHT keys
  /// "<run_id>_progress", averagers "<run_id>_grad_averager" and "<run_id>_state_averager").
  std::string run_id;
  /// The parameters' initial values (every peer starts from the same, or loads them).
  std::vector<std::vector<float>> params;
  /// The optimizer step on the averaged gradient (its slots are averaged and shared).
  core::ps::OptimizerConfig inner;
  /// Instead of `inner`: the caller's step, params -= f(averaged gradients) at `epoch`
  /// (the epoch being left); nothing but the parameters is averaged or shared then.
  std::function<void(std::vector<std::vector<float>>& params, const std::vector<std::vector<float>>& grads,
                     std::int64_t epoch)>
      step;
  /// target_batch_size (samples per epoch of the whole swarm), refresh periods, EMA.
  core::optim::ProgressConfig tracker;
  double matchmaking_time = 15.0;   ///< seconds before an epoch's end that a group is looked for
  double averaging_timeout = 60.0;  ///< seconds a round may take before the local values are used
  double load_state_timeout = 600.0;
  std::int64_t average_state_every = 1;
  /// Sends, never serves (a peer that cannot accept connections); tracker.client_mode follows.
  bool client_mode = false;
  pb::CompressionType grad_compression = pb::NONE;
  pb::CompressionType state_compression = pb::NONE;
  std::size_t target_group_size = 16;
  double request_timeout = 3.0;
  /// The key this peer's progress record is signed with (its subkey); empty: the
  /// process's key, shared by every tracker of the process (so give several peers of one
  /// process keys of their own).
  std::optional<messages::Ed25519PrivateKey> owner_key;
};

/// What step() did.
struct OptimizerStep {
  bool new_epoch = false;          ///< this step ended an epoch (the parameters changed)
  bool loaded_state = false;       ///< the peer was behind: it loaded the swarm's state instead
  std::size_t group_size = 0;      ///< peers the gradients were averaged with (1: its own)
  bool state_averaged = false;     ///< parameters and slots were averaged this epoch
};

class Optimizer {
 public:
  /// Starts the tracker and both averagers beside `dht` (which must outlive this).
  /// Errors: bad options (invalid_argument), a stopped node.
  static Result<std::unique_ptr<Optimizer>> start(Dht& dht, OptimizerOptions options);
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// This batch's gradients (one per parameter tensor, of its size) from `batch_size`
  /// samples: accumulated; at the swarm's epoch boundary, averaged and stepped. A peer
  /// behind the swarm loads the state instead (these gradients are dropped: they were
  /// computed on old parameters). Errors: wrong sizes or batch_size <= 0
  /// (invalid_argument; nothing changes), the tracker or averagers failing.
  Result<OptimizerStep> step(const std::vector<std::vector<float>>& grads, std::int64_t batch_size);

  /// Downloads the most advanced peer's parameters, slots and epoch (not from a peer
  /// behind this one). True when loaded; false when no peer shares or the donor is
  /// behind.
  Result<bool> load_state_from_peers();

  [[nodiscard]] const std::vector<std::vector<float>>& params() const { return params_; }
  [[nodiscard]] std::int64_t local_epoch() const { return epoch_; }
  /// The tracker's view of the swarm.
  Result<ProgressSnapshot> progress() { return tracker_->look(); }
  /// Bytes this process's transport sent and received so far.
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> transport_bytes() const { return grads_->transport_bytes(); }

 private:
  Optimizer() = default;
  /// params + slots, as the state averager holds them.
  [[nodiscard]] std::vector<std::vector<float>> state_tensors() const;
  Status take_state(const std::vector<std::vector<float>>& tensors);
  Status publish_state();
  Result<OptimizerStep> end_epoch(const ProgressSnapshot& progress);

  OptimizerOptions options_;
  std::vector<std::vector<float>> params_;
  std::vector<core::ps::Optimizer> inner_;  ///< one per tensor (none with a caller's step)
  std::vector<std::vector<float>> acc_;     ///< sum of samples * gradient since the epoch began
  std::int64_t samples_ = 0;
  std::int64_t epoch_ = 0;
  bool check_sync_ = true;
  std::optional<std::future<Result<AveragerStepReport>>> scheduled_;  ///< the gradients' round
  std::unique_ptr<ProgressTracker> tracker_;
  std::unique_ptr<Averager> grads_;
  std::unique_ptr<Averager> state_;
};

}  // namespace apiary
