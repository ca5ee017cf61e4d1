#pragma once
/// The simulated network: per directed link, a one-way delay of `latency` plus a
/// uniform jitter in [0, jitter], an independent loss probability per message, and a
/// bandwidth: a message occupies its link for bytes / bandwidth, after the messages sent
/// on it before (so a step's time depends on its bytes). Faults on top: a clogged link
/// delivers nothing before its clog ends (FoundationDB's clogging), a partition drops
/// every message between its two sides until it heals.
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>
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
  /// Bytes per second the link carries (> 0); 0: unlimited (a message takes no time to send).
  double bandwidth = 0.0;
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

  /// transit() for a message of `bytes` sent at `now`, with the link's bandwidth, clogs
  /// and partitions: a message waits for the link to be free, occupies it for
  /// bytes / bandwidth, and arrives no earlier than the link's clog ends; a message
  /// between the sides of a partition is lost.
  [[nodiscard]] std::optional<Duration> transit(const PeerAddr& from, const PeerAddr& to, std::size_t bytes,
                                                TimePoint now, Rng& rng);

  /// When a message of `bytes` put on `from` -> `to` at `now` has left: at once on an
  /// unlimited link, else after the messages before it and bytes / bandwidth.
  [[nodiscard]] TimePoint occupy(const PeerAddr& from, const PeerAddr& to, std::size_t bytes, TimePoint now);

  /// The earliest arrival of a message sent on `from` -> `to` at `now`: `now` unless the
  /// link is clogged, else the clog's end plus the link's latency.
  [[nodiscard]] TimePoint clog_end(const PeerAddr& from, const PeerAddr& to, TimePoint now);

  /// Clogs `from` -> `to` until `until`: what is sent on it arrives at `until` at the
  /// earliest (plus the link's delay). A later clog of the same link extends it.
  void clog(const PeerAddr& from, const PeerAddr& to, TimePoint until);

  /// Drops every message between a node of `a` and a node of `b` (both directions) sent
  /// before `until`. Partitions add up.
  void partition(std::vector<PeerAddr> a, std::vector<PeerAddr> b, TimePoint until);

  /// Whether `from` -> `to` crosses a partition at `now`.
  [[nodiscard]] bool partitioned(const PeerAddr& from, const PeerAddr& to, TimePoint now) const;

 private:
  struct Partition {
    std::set<PeerAddr> a, b;
    TimePoint until{};
  };
  using Link = std::pair<PeerAddr, PeerAddr>;
  /// A message's fate on a link of `model`: lost (nullopt), or latency plus its jitter.
  static std::optional<Duration> draw(const LinkModel& model, Rng& rng);
  /// occupy() with the link's model already looked up.
  TimePoint occupy(const LinkModel& model, const PeerAddr& from, const PeerAddr& to, std::size_t bytes, TimePoint now);

  LinkModel default_;
  LinkRule rule_;
  std::map<Link, LinkModel> overrides_;
  std::map<Link, TimePoint> busy_;     ///< bandwidth-limited link -> when it is free again
  std::map<Link, TimePoint> clogged_;  ///< clogged link -> when its clog ends
  std::vector<Partition> partitions_;
};

}  // namespace apiary::sim
