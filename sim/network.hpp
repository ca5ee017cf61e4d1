#pragma once
/// The simulated network: per directed link, a one-way delay of `latency` plus a
/// uniform jitter in [0, jitter], and an independent loss probability per message.
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "core/effects.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/rng.hpp"

namespace apiary::sim {

using core::Duration;
using core::PeerAddr;
using core::TimePoint;

/// How one directed link behaves.
struct LinkModel {
  /// Fixed one-way delay of every message (>= 0).
  Duration latency = std::chrono::milliseconds(1);
  /// Extra one-way delay, drawn uniformly from [0, jitter] per message, in whole ns (>= 0).
  Duration jitter = Duration::zero();
  /// Probability in [0, 1] that a message is dropped.
  double loss = 0.0;
};

/// Checks a LinkModel; the error names the bad field, its value and the accepted range.
[[nodiscard]] Status validate(const LinkModel& link);

/// Computes the model of a link that has no override, e.g. a latency drawn once per link
/// from a seeded hash of the two addresses. Must be a pure function of its arguments so a
/// seed replays.
using LinkRule = std::function<LinkModel(const PeerAddr& from, const PeerAddr& to)>;

/// Link models: one default (or a rule) plus per-pair overrides.
class Network {
 public:
  /// A network where every link behaves as a default-constructed LinkModel (1 ms, no
  /// jitter, no loss) until set_default or set_link change it.
  Network() = default;

  /// Replaces the model of every link without an override.
  [[nodiscard]] Status set_default(LinkModel link);

  /// Computes every link without an override with `rule` instead of the default; an
  /// empty rule restores the default. A model the rule returns that fails validate() is
  /// replaced by the default.
  void set_rule(LinkRule rule) { rule_ = std::move(rule); }

  /// Sets the model of both directions between `a` and `b`.
  [[nodiscard]] Status set_link(const PeerAddr& a, const PeerAddr& b, LinkModel link);

  /// Sets the model of the one direction `from` -> `to`.
  [[nodiscard]] Status set_one_way(const PeerAddr& from, const PeerAddr& to, LinkModel link);

  /// The model of `from` -> `to`: its override, else the rule's, else the default.
  [[nodiscard]] LinkModel link(const PeerAddr& from, const PeerAddr& to) const;

  /// Draws the fate of one message on `from` -> `to`: its delay, or nullopt if lost.
  /// Draws from `rng` in a fixed order (loss first, then jitter), only when needed.
  [[nodiscard]] std::optional<Duration> transit(const PeerAddr& from, const PeerAddr& to,
                                                Rng& rng) const;

 private:
  LinkModel default_;
  LinkRule rule_;
  std::map<std::pair<PeerAddr, PeerAddr>, LinkModel> overrides_;
};

}  // namespace apiary::sim
