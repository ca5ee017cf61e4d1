#pragma once
/// What a DHT actor (actors/dht/dht_actor.hpp) is sent, as plain structs (no CAF here).
/// Every message carries its own way back to the caller, so that a caller on any thread
/// (the embedding API, a test, a command) waits on a std::future without an actor of
/// its own, and always hears back, even when the actor stops first.
#include <functional>
#include <memory>
#include <utility>

#include "core/dht/node.hpp"
#include "core/time.hpp"

namespace apiary::actors {

/// Hands an operation's outcome to its caller exactly once: the node's OpResult when the
/// operation finishes, or a cancelled OpResult when the last reference is dropped
/// unfinished (the actor stopped, or the message never reached it).
class DhtOpDone {
 public:
  /// `deliver` runs on the actor's thread (or the dropping thread); keep it short.
  explicit DhtOpDone(std::function<void(core::dht::OpResult)> deliver) : deliver_(std::move(deliver)) {}
  ~DhtOpDone() {
    if (!deliver_) return;
    core::dht::OpResult r;
    r.status = make_error(errc::cancelled, "the DHT node stopped before the operation finished; start a new node");
    deliver_(std::move(r));
  }
  DhtOpDone(const DhtOpDone&) = delete;
  DhtOpDone& operator=(const DhtOpDone&) = delete;

  /// Delivers `result`; later calls do nothing.
  void deliver(core::dht::OpResult result) {
    if (!deliver_) return;
    auto fn = std::move(deliver_);
    deliver_ = nullptr;
    fn(std::move(result));
  }

 private:
  std::function<void(core::dht::OpResult)> deliver_;
};

/// Starts one operation on the actor's node: `start(node, now, op)` calls one of
/// Node::start/store/get/find_nearest with the op id the actor chose; the actor routes
/// the OpResult with that id to `done`.
struct dht_op_message {
  std::function<core::Effects(core::dht::Node&, core::TimePoint, core::dht::OpId)> start;
  std::shared_ptr<DhtOpDone> done;
};

/// Runs a read-only look at the node on the actor's thread (statistics, tests): `look`
/// gets the node and the current time, or nullptr when the actor stopped first.
class DhtLook {
 public:
  explicit DhtLook(std::function<void(core::dht::Node*, core::TimePoint)> look) : look_(std::move(look)) {}
  ~DhtLook() {
    if (look_) look_(nullptr, core::TimePoint{});
  }
  DhtLook(const DhtLook&) = delete;
  DhtLook& operator=(const DhtLook&) = delete;

  /// Runs the look on `node` at `now`; later calls do nothing.
  void run(core::dht::Node& node, core::TimePoint now) {
    if (!look_) return;
    auto fn = std::move(look_);
    look_ = nullptr;
    fn(&node, now);
  }

 private:
  std::function<void(core::dht::Node*, core::TimePoint)> look_;
};

/// Carries a DhtLook to the actor.
struct dht_look_message {
  std::shared_ptr<DhtLook> look;
};

}  // namespace apiary::actors
