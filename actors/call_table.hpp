#pragma once
/// The calls of one role host over the gateway: runs what a core returns (unary and
/// streaming calls, messages, replies, cancels; timers through the host) and translates
/// the gateway's deliveries back into the core's terms. No CAF: the actor host
/// (effects_executor.hpp) and the transport-thread host (direct_host.hpp) share it.
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/core_deliveries.hpp"

namespace apiary::actors {

/// The time core/ sees in this process: the steady clock since its epoch.
core::TimePoint core_now();

/// Folds each empty end of stream into the latest earlier message of the same stream in
/// one batch: Call{last = false} + Send{"", last} becomes Call{last = true}, Send{m} +
/// Send{"", last} becomes Send{m, last}, and Reply{m, last = false} + Reply{"", last}
/// becomes Reply{m, last = true}; effects on other streams and timers in between keep
/// their order. The core sees the same inputs either way (an empty last message is no
/// message); one frame and one hand-off fewer go over the wire. execute() applies it.
void fold_stream_ends(core::Effects& fx);

/// A role host's timers: the call table hands it every SetTimer and CancelTimer.
class HostTimers {
 public:
  virtual ~HostTimers() = default;
  virtual void set(core::TimerId id, core::TimePoint at) = 0;
  virtual void cancel(core::TimerId id) = 0;
};

/// Runs one core's calls (unary and streaming calls, sends, replies, cancels) over the
/// gateway, its timers through the host's HostTimers, and translates the deliveries
/// addressed to it. Feed every
/// Delivery through the four translators in this order, feeding each input they return
/// to the core (and executing its effects) before calling the next:
///
///     request_of → request_message_of → message_of → response_of
///
/// Each takes its own part of the delivery and leaves the rest (a delivery can hold two
/// inputs: a callee's last message and the call's end; a request's only message and the
/// end of the caller's direction); a part whose call the core already ended or cancelled
/// is dropped. A taken delivery keeps its peer fields but no call (d.call == 0). Roles
/// that make and serve only unary calls may use request_of and response_of alone.
///
/// Streaming calls open as pb::BIDI_STREAM (any of the three streaming kinds behaves
/// alike here). An empty Reply{last = true} on a streaming request ends it without a
/// message, and an empty last message from a callee is no message, so a core sees the
/// same inputs here and in the simulator. When the callee ends first, the caller's
/// direction is closed for the core (its later Sends are dropped as the call is over).
class CallTable {
 public:
  /// Deliveries of the calls it opens go to `me`.
  CallTable(std::shared_ptr<Gateway> gw, DeliveryTarget me, HostTimers& timers);

  /// Executes `fx`. Calls that cannot even be issued (bad address) come back at once as
  /// failed responses, for the host to feed to its core.
  [[nodiscard]] std::vector<CoreResponse> execute(core::Effects fx);

  /// A delivery that opens a request to this actor's core, translated.
  std::optional<CoreRequest> request_of(Delivery& d);
  /// request_of() with the body left in the received buffer (it may stand in its place).
  std::optional<CoreRequestView> request_view_of(Delivery& d);
  /// Callee: the caller's later message, end or error on a streaming request, translated.
  std::optional<CoreRequestMessage> request_message_of(Delivery& d);
  /// request_message_of() with the message left in the received buffer.
  std::optional<CoreRequestMessageView> request_message_view_of(Delivery& d);
  /// Caller: one callee message on one of the core's streaming calls, translated.
  std::optional<CoreMessage> message_of(Delivery& d);
  /// message_of() with the message left in the received buffer.
  std::optional<CoreMessageView> message_view_of(Delivery& d);
  /// A delivery that ends one of the core's calls (unary or streaming), translated.
  std::optional<CoreResponse> response_of(Delivery& d);
  /// Effects dropped because they broke the rules of core/effects.hpp (Send on a unary
  /// call or after `last`; Reply{last = false} to a unary request, which fails the call).
  std::uint64_t anomalies() const { return anomalies_; }

 private:
  struct OutCall {
    core::CallId core = 0;   ///< the core's id of the call
    bool stream = false;     ///< a streaming call
    bool local_end = true;   ///< the core's direction has ended (always, for unary)
    bool view = false;       ///< unary, view_response: the answer as a Buffer
    bool landed = false;     ///< its answer went into its landing
  };
  struct InRequest {
    CallId call = 0;      ///< the gateway's id of the served call
    bool stream = false;  ///< a streaming call's request
  };
  void forget_call(std::unordered_map<CallId, OutCall>::iterator it);
  void call(core::Call& call, std::vector<CoreResponse>& failed);
  void reply(core::Reply& reply);

  std::shared_ptr<Gateway> gw_;
  DeliveryTarget me_;
  HostTimers& timers_;
  std::unordered_map<CallId, OutCall> calls_;                ///< gateway call → core call
  std::unordered_map<core::CallId, CallId> by_core_;         ///< core call → gateway call
  std::unordered_map<core::RequestId, InRequest> requests_;  ///< core request → served call
  std::unordered_map<CallId, Buffer> partial_;               ///< responses awaiting their end
  std::uint64_t anomalies_ = 0;
};

}  // namespace apiary::actors
