#pragma once
/// A trainer-side mixture-of-experts client as a role (hivemind's RemoteMixtureOfExperts
/// with a fixed choice of experts per step, reference §6.3). Each step it draws a batch of
/// rows and k distinct experts from its own seeded Rng over the grid it was given, and:
///   1. sends the batch's forward call to the k experts at once (rpc_forward);
///   2. once k_min experts answered, waits at most timeout_after_k_min for the rest
///      (one timer); a call that fails, is lost (its deadline) or whose server goes down
///      masks its expert out, and so does one still running when that wait ends;
///   3. below k_min answers the step fails with an error naming each expert and why;
///      else it mixes the answers (their mean, in the order the experts were drawn);
///   4. sends backward calls to the experts that answered, with the gradient of the loss
///      L = ½‖mixed‖² for each expert's output (dL/dy_e = mixed / answered), and waits
///      for all of them to end (each bounded by its deadline);
///   5. records the step and starts the next one.
/// No DHT: the grid is a list of uids with their servers' addresses.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/effects.hpp"
#include "core/rng.hpp"
#include "core/role.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::core::moe {

/// An expert of the client's grid: its uid and the server that serves it.
struct GridExpert {
  std::string uid;
  PeerAddr server;
};

/// How a client runs.
struct MoeClientConfig {
  std::vector<GridExpert> grid;  ///< the experts to choose from (distinct uids)
  std::size_t k = 4;             ///< experts asked per step (1 <= k <= grid size)
  std::size_t k_min = 1;         ///< answers a step needs (1 <= k_min <= k)
  /// Once k_min experts answered: how much longer the others may take.
  Duration timeout_after_k_min = std::chrono::milliseconds(20);
  Duration forward_timeout = std::chrono::seconds(1);   ///< deadline of each forward call
  Duration backward_timeout = std::chrono::seconds(1);  ///< deadline of each backward call
  std::uint32_t hidden_dim = 16;  ///< h: a batch is [rows, h] float32
  std::size_t rows = 4;           ///< rows per batch (>= 1)
  std::int64_t steps = 10;        ///< steps to run (>= 0)
  Duration pause = Duration::zero();  ///< between the end of a step and the next one
  std::uint64_t seed = 0;         ///< the client's Rng: experts and rows of every step
};

/// Checks a MoeClientConfig; the error names the field, its value and the accepted range.
[[nodiscard]] Status validate(const MoeClientConfig& config);

/// What one step did.
struct MoeStep {
  std::int64_t step = 0;
  std::vector<std::string> asked;  ///< the experts drawn, in order
  std::vector<bool> mask;          ///< per expert asked: its forward answered in time
  std::size_t answered = 0;        ///< forward answers used (mask's true count)
  std::size_t backward_answered = 0;  ///< backward calls that answered
  bool ok = false;                 ///< the step had k_min answers (backward failures included)
  std::optional<Error> error;      ///< why the step failed (below k_min)
  std::vector<std::string> failures;  ///< one line per expert masked out or whose backward failed
  std::vector<float> inputs;       ///< the batch, [rows, h] row-major
  std::vector<float> mixed;        ///< the mixed output, [rows, h] (empty when failed)
  std::uint64_t checksum = 0;      ///< checksum_of(mixed)
  TimePoint start{};               ///< when the step's forward calls went out
  TimePoint end{};                 ///< when it was recorded
};

/// FNV-1a 64 over the bits of `values`, in order (equal bits, equal checksums).
[[nodiscard]] std::uint64_t checksum_of(const std::vector<float>& values);

/// The client. As a Role it serves nothing; Start begins the first step.
class MoeClientRole final : public Role {
 public:
  /// Timers: the next step's start, the end of the wait after k_min answers.
  static constexpr TimerId k_step_timer = 1;
  static constexpr TimerId k_k_min_timer = 2;

  /// A client of a config that validate() accepted (the host checks it first).
  explicit MoeClientRole(MoeClientConfig config);

  [[nodiscard]] std::vector<std::string> handles() const override { return {}; }
  /// The role contract: Start, its calls' responses, its timers, servers going down.
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

  /// The steps recorded so far, in order.
  [[nodiscard]] const std::vector<MoeStep>& steps() const { return steps_; }
  /// Every step recorded.
  [[nodiscard]] bool done() const { return static_cast<std::int64_t>(steps_.size()) >= config_.steps; }
  [[nodiscard]] const MoeClientConfig& config() const { return config_; }

 private:
  enum class Phase { idle, forward, backward };
  /// A call of the current step still running.
  struct Pending {
    std::size_t expert = 0;  ///< index in the step's `asked`
    bool forward = true;
  };

  /// Draws the step's experts and rows and sends its forward calls.
  Effects begin_step(TimePoint now);
  Effects on_response(TimePoint now, CallId call, const Result<std::string>& response);
  Effects on_timer(TimePoint now, TimerId id);
  /// Ends every call to `peer` with an error naming it.
  Effects on_peer_down(TimePoint now, const PeerAddr& peer);
  /// Records how one call of the step ended (`output`: a forward's rows; `error`: why not).
  void record(const Pending& p, std::vector<float> output, const std::optional<Error>& error);
  /// After calls ended: ends the forward phase when none is left, arms the wait once
  /// k_min answered, or finishes the step when its backward calls are all over.
  Effects advance(TimePoint now, Effects fx);
  /// The forward phase is over: fail the step or mix and send the backward calls.
  Effects end_forward(TimePoint now, Effects fx);
  /// Records the current step and arms the next one.
  Effects finish(TimePoint now, Effects fx);
  /// The rows of a forward answer, checked against [rows, h] float32.
  Result<std::vector<float>> output_of(const std::string& response) const;
  /// "ffn.1.2 at /ip4/...: why".
  std::string failure(std::size_t expert, const std::string& what) const;

  MoeClientConfig config_;
  Rng rng_;
  std::vector<MoeStep> steps_;
  Phase phase_ = Phase::idle;
  MoeStep current_;
  std::vector<std::size_t> chosen_;           ///< grid index of each expert asked
  std::vector<std::vector<float>> outputs_;   ///< per expert asked: its forward output
  std::map<CallId, Pending> pending_;
  bool k_min_armed_ = false;
  CallId next_call_ = 1;
};

}  // namespace apiary::core::moe
