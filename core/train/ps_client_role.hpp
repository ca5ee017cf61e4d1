#pragma once
/// PsClientRole: a replica's side of the parameter servers, as a role. It opens a session
/// with every PS device when it starts (kept while the replica trains: a PS learns from
/// its end that the replica left), pulls every shard of a step (through a node's proxy
/// where the plan replicates locally) and pushes the step's gradients over
/// core/ps/wire.hpp, with core::ps::Replica cutting and reassembling the pieces. Every
/// failure names the shard, the PS device and its address (and the proxy).
///
/// Local methods (core/role.hpp: LocalCall), one at a time:
///   "pull"   PsPullArgs (or nothing) -> PsPulled (the step's reassembled parameters);
///                                       an unpartitioned variable whose vector in the
///                                       args has its size is received straight into it
///                                       (the answer's Landing, where the host can)
///   "push"   PsPushArgs              -> the same PsPushArgs, once every shard
///                                       acknowledged: an unpartitioned dense gradient
///                                       is sent from where it lies in the args (a view
///                                       that keeps them alive), so they come back
///   "optimizer_states" no args       -> std::map<std::string, ps::Optimizer::State>:
///                                       every variable's optimizer state on the PS,
///                                       a partitioned one put back together
///   "leave"  no args                -> nothing; ends every session normally
///   "stop"   Error (why)             -> nothing; abandons the calls in flight and leaves
///                                       every session with the reason, so the PS devices
///                                       fail the synchronous steps that wait for it
///   "watch"  no args                -> completes only with the error that ended the
///                                       client outside a call (a session ended early,
///                                       a PS went down)
/// After a failure every call completes with that failure.
///
/// With synchronous shards it first asks every PS device where it stands
/// (k_ps_rejoin_handle): a replica process started again after the PS devices dropped it
/// asks to push from the first step no replica has pushed yet, on every device (a larger
/// one when a device refuses, as the others moved on), and its steps start there; calls
/// that come meanwhile wait. A replica no PS dropped starts at step 0.
///
/// With ps_restart_wait, a PS device that goes down does not end the replica: its calls
/// are held, and the device is asked where it stands every 200 ms until it answers (a PS
/// process started again at the same address; ShardServer::resume_at) or the wait runs
/// out (then the replica fails, naming the device). A device that continued the job from
/// a checkpoint expects every step since again: the replica replays the pushes it kept
/// (the last replay_steps steps' acknowledged pushes, copied), in order, one at a time
/// per shard, then sends the calls the loss interrupted, and its step goes on. A
/// checkpoint older than what it kept fails the replica, saying which steps it holds.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/ps/optimizer.hpp"
#include "core/ps/plan.hpp"
#include "core/ps/replica.hpp"
#include "core/role.hpp"

namespace apiary::core::train {

/// What a PsClientRole needs.
struct PsClientConfig {
  std::int32_t replica = 0;                     ///< replica id (index in plan->replicas)
  std::shared_ptr<const ps::TrainingPlan> plan;  ///< the PS variables and shards
  std::map<std::string, PeerAddr> servers;      ///< PS device -> its address
  std::map<std::size_t, PeerAddr> pull_via;     ///< shard -> the proxy it is pulled through
  Duration call_timeout = std::chrono::seconds(30);  ///< deadline of each pull and push
  std::string label = "replica";                ///< how errors of create() name the replica
  /// How long to wait for a PS device that went down to come back (see above); zero: a
  /// PS going down ends the replica.
  Duration ps_restart_wait = Duration::zero();
  /// With ps_restart_wait: the steps of acknowledged pushes kept to replay (>= 0; twice
  /// the steps between two checkpoints, and the staleness, cover any loss).
  std::int64_t replay_steps = 0;
};

/// What "pull" gives.
struct PsPulled {
  std::int64_t step = 0;     ///< the step the parameters are for
  std::int64_t version = 0;  ///< smallest version among the pulled pieces
  std::map<std::string, std::vector<float>> params;  ///< by variable name
};

/// What "pull" may take: storage for the values (by variable name), from the last pull.
struct PsPullArgs {
  std::map<std::string, std::vector<float>> storage;
};

/// What "push" takes.
struct PsPushArgs {
  std::map<std::string, ps::Gradient> gradients;  ///< every PS variable's whole gradient
  double samples = 1.0;                            ///< examples behind it (the aggregation weight)
  float learning_rate = 0.0F;                      ///< the update's rate (0: the shards' configured one)
};

class PsClientRole final : public Role {
 public:
  /// Errors: invalid_argument (no plan, a PS device without an address), Replica::create's.
  [[nodiscard]] static Result<std::unique_ptr<PsClientRole>> create(PsClientConfig config);

  [[nodiscard]] std::vector<std::string> handles() const override { return {}; }
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

  /// The replica's step state machine (its step and the pulled versions).
  [[nodiscard]] const ps::Replica& replica() const { return replica_; }
  /// Pulls whose values were received straight into the caller's vectors so far.
  [[nodiscard]] std::uint64_t pulls_landed() const { return pulls_landed_; }

 private:
  /// A pull or push in flight (replay: a kept push sent again to a device that resumed).
  enum class Kind { pull, push, state, replay };
  struct InFlight {
    std::size_t shard = 0;
    Kind kind = Kind::pull;
    std::optional<Call> again;  ///< with ps_restart_wait: the call, to send again
  };
  /// An acknowledged push kept to replay: its step and its call, the message in one piece.
  struct Kept {
    std::int64_t step = 0;
    Call call;
  };
  /// A PS device that went down, waited for.
  struct LostDevice {
    TimePoint deadline{};       ///< the replica fails if it is not back by then
    std::string why;            ///< how it went down
    std::optional<CallId> ask;  ///< the question in flight (where it stands)
    int tries = 0;
  };

  PsClientRole(PsClientConfig config, ps::Replica replica);
  Effects open();
  /// Opens the session with PS `device` (kept while training: the PS learns from its end
  /// that this replica left).
  void open_session(Effects& out, const std::string& device);
  Effects on_call(LocalCall call);
  Effects on_response(const Response& response);
  Effects on_peer_down(const PeerAddr& peer);
  /// Starts the step's pulls, its pushes, or the optimizer-state reads; the op completes
  /// when every shard answered.
  Status pull(Effects& out);
  Status push(Effects& out);
  Status read_states(Effects& out);
  /// One answer of a pull or push; true when it was the last.
  Result<bool> answered(const InFlight& flight, const Response& r);
  /// An error when a synchronous shard's answer to a pull breaks its staleness bound.
  [[nodiscard]] Status check_staleness(std::size_t shard, const ps::PullReply& reply) const;
  /// The caller's vector of the whole variable that shard `shard`, a piece along axis 0,
  /// is part of, when the pull's storage holds one of the variable's size; else null.
  std::vector<float>* whole_of(std::size_t shard);
  /// Completes the state reads with every variable's state.
  void states_done(Effects& out);
  /// Where a call about `shard` goes: the proxy (pulls) or the PS.
  [[nodiscard]] const PeerAddr& target(std::size_t shard, Kind kind) const;
  /// A unary call about `shard`, or the error when its target is down.
  Status call(Effects& out, std::size_t shard, Kind kind, Call c);
  [[nodiscard]] Error describe(const char* what, std::size_t shard, const Error& e) const;
  /// Abandons the calls in flight and leaves every session with `why`.
  void cancel(Effects& out, const Error& why);
  /// Ends the client with `error`: cancels what is in flight, completes the running op
  /// and the watch with it.
  Effects fail(Error error);
  /// Completes the running op with `result`.
  void finish(Effects& out, Result<Value> result);
  /// Asks every PS device to take the replica from `step` on (-1: where it stands).
  void ask_rejoin(Effects& out, std::int64_t step);
  /// One device's answer; the next round, or the start, once all answered.
  Effects on_rejoin_answer(const std::string& device, const Response& r);
  /// The replica can start: runs the call that waited.
  Effects ready(Effects out);
  /// With ps_restart_wait: PS `device` went down (`why`): its calls are held and it is
  /// asked where it stands until it comes back.
  void lose(Effects& out, const std::string& device, const std::string& why);
  /// The PS device a call about `shard` of this kind goes to ("" for a proxy).
  [[nodiscard]] std::string device_of(std::size_t shard, Kind kind) const;
  /// Asks lost `device` where it stands (after `delay`).
  void ask_lost(Effects& out, const std::string& device, Duration delay);
  Effects on_timer(TimerId id);
  /// A lost device's answer: it is back; replays what it lacks, then the held calls.
  Effects on_resume_answer(const std::string& device, const Response& r);
  /// Sends the next kept push of `shard` to replay, or, when none is left, its held call.
  Status next_replay(Effects& out, std::size_t shard);
  /// Keeps an acknowledged push (its call in `flight`) for replays.
  void keep(std::size_t shard, std::int64_t step, const Call& call);

  /// What a PS device said to a rejoin request.
  struct RejoinAnswer {
    bool dropped = false;
    bool accepted = false;
    std::int64_t step = 0;
  };

  PsClientConfig config_;
  ps::Replica replica_;
  std::map<CallId, InFlight> calls_;        ///< pulls and pushes in flight
  std::map<CallId, std::string> sessions_;  ///< open session -> PS device
  std::set<PeerAddr> down_;                 ///< peers whose connection broke
  CallId next_call_ = 1;
  std::map<std::size_t, std::string> whole_;  ///< shard holding a whole variable -> its name
  /// A piece of a dense variable split along axis 0: a range of the variable's values.
  struct Range {
    std::string variable;
    std::size_t offset = 0;  ///< its first value's index in the variable
    std::size_t count = 0;   ///< its values
    std::size_t total = 0;   ///< the variable's values
  };
  std::map<std::size_t, Range> ranges_;  ///< shard -> the range it holds
  std::set<std::string> in_place_;       ///< this pull's variables whose pieces landed in the caller's vectors
  std::optional<OpId> running_;  ///< the pull, push or state read being run
  Value args_;                   ///< its args: the storage the calls view, kept while they run
  std::map<std::size_t, ps::Optimizer::State> states_;  ///< the state read's answers by shard
  std::uint64_t pulls_landed_ = 0;
  std::optional<OpId> watch_;
  bool stopped_ = false;          ///< left, stopped or failed: session ends are expected
  bool ready_ = true;             ///< false while asking the PS devices where to start
  std::map<CallId, std::string> rejoin_calls_;          ///< rejoin requests in flight -> PS device
  std::map<std::string, RejoinAnswer> rejoin_answers_;  ///< this round's answers by device
  std::int64_t rejoin_step_ = -1;                       ///< the step asked for (-1: where it stands)
  int rejoin_rounds_ = 0;
  std::optional<LocalCall> held_call_;                  ///< a call that came before the start
  TimePoint now_{};
  std::map<std::string, LostDevice> lost_;                ///< PS devices down, waited for
  std::map<CallId, std::string> resume_asks_;             ///< questions to lost devices -> device
  std::map<TimerId, std::string> retry_timers_;           ///< armed: ask the device again
  TimerId next_timer_ = 1;
  std::map<std::size_t, std::deque<Kept>> kept_;          ///< shard -> acknowledged pushes, by step
  std::map<std::size_t, std::deque<Kept>> replaying_;     ///< shard -> kept pushes still to replay
  std::map<std::size_t, InFlight> held_;                  ///< shard -> the running op's call a loss interrupted
  std::map<std::size_t, std::int64_t> acked_;             ///< shard -> the last step it acknowledged a push of
  std::int64_t first_step_ = 0;                           ///< the step this replica's pushes began at
  std::optional<Error> failure_;
};

}  // namespace apiary::core::train
