#pragma once
/// What an averager actor (averager_actor.hpp) is sent, as plain structs (no CAF here).
#include <functional>
#include <memory>
#include <utility>

#include "core/averaging/averager_role.hpp"
#include "core/averaging/state_sharing.hpp"
#include "core/dht/node.hpp"

namespace apiary::actors {

/// Hands a step's outcome to its caller exactly once: the role's outcome, or cancelled
/// when the last reference is dropped first (the actor stopped).
class StepDoneOnce {
 public:
  explicit StepDoneOnce(std::function<void(Result<core::averaging::AveragerStepResult>)> deliver)
      : deliver_(std::move(deliver)) {}
  ~StepDoneOnce() {
    deliver(make_error(errc::cancelled, "the averager stopped before the step finished; start a new one"));
  }
  StepDoneOnce(const StepDoneOnce&) = delete;
  StepDoneOnce& operator=(const StepDoneOnce&) = delete;

  /// Delivers `outcome`; later calls do nothing.
  void deliver(Result<core::averaging::AveragerStepResult> outcome) {
    if (!deliver_) return;
    auto fn = std::move(deliver_);
    deliver_ = nullptr;
    fn(std::move(outcome));
  }

 private:
  std::function<void(Result<core::averaging::AveragerStepResult>)> deliver_;
};

/// Starts a step.
struct averager_step_message {
  core::averaging::AveragerStep step;
  std::shared_ptr<StepDoneOnce> done;
};

/// Runs a control function on the role.
struct averager_control_message {
  std::function<core::averaging::AveragerEffects(core::averaging::AveragerRole&, core::TimePoint)> run;
};

/// Downloads the state from `donors` (best first) with `config`; `done` gets the outcome
/// once, on the actor's thread (cancelled if the actor stops first).
struct averager_load_state_message {
  core::averaging::StateLoaderConfig config;
  std::shared_ptr<std::function<void(Result<core::averaging::DownloadedState>)>> done;
};

/// A DHT operation of the role finished on the DHT actor.
struct averager_dht_message {
  core::averaging::DhtOpId op = 0;
  bool declare = false;
  core::dht::OpResult result;
};

}  // namespace apiary::actors
