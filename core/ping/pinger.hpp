#pragma once
/// The ping role: liveness probes and peer discovery. Every `interval` the node probes
/// each peer it knows; probes and acks carry the sender's view of the swarm, so a swarm
/// started from one bootstrap address finds itself. Pure: time comes in as `now`, and
/// calls and timers go out as effects.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/effects.hpp"
#include "core/role.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::core::ping {

/// The service handle a node serves probes under (request PingProbe, response PingAck).
inline constexpr const char* k_handle = "apiary.Ping.rpc_ping";

/// The one timer the pinger arms: the next probing round.
inline constexpr TimerId k_round_timer = 1;

/// Tuning of one pinger.
struct Config {
  /// Time between two probing rounds (must be > 0).
  Duration interval = std::chrono::seconds(1);
  /// Deadline of each probe call, relative to when it is issued (must be > 0).
  Duration timeout = std::chrono::seconds(2);
  /// Most peers remembered; addresses learned beyond it are ignored (must be >= 1).
  std::size_t max_peers = 256;
  /// RTT samples kept per peer, newest last; older ones are dropped.
  std::size_t history = 32;
};

/// Checks a Config; the error names the bad field, its value and the accepted range.
[[nodiscard]] Status validate(const Config& config);

/// What one node has observed about one peer.
struct PeerStats {
  std::size_t sent = 0;      ///< probes issued to the peer
  std::size_t answered = 0;  ///< probes answered with a well-formed ack
  std::size_t failed = 0;    ///< probes that failed (call error, malformed or mismatched ack)
  std::vector<Duration> rtts;  ///< the last `Config::history` round-trip times, oldest first
  Duration last_rtt{};         ///< the most recent round-trip time (0 before the first ack)
  std::string last_error;      ///< the most recent failure, "" if none yet

  /// Smallest kept RTT (0 if none kept).
  [[nodiscard]] Duration min_rtt() const;
  /// Middle kept RTT; for an even count the upper of the two middles (0 if none kept).
  [[nodiscard]] Duration median_rtt() const;
  /// Largest kept RTT (0 if none kept).
  [[nodiscard]] Duration max_rtt() const;
};

/// What a pinger has seen, as one value (the answer of k_snapshot_method).
struct Snapshot {
  PeerAddr self;                          ///< the node's own listen multiaddr
  std::map<PeerAddr, PeerStats> peers;    ///< every known peer, sorted by address
  std::size_t rounds = 0;                 ///< probing rounds run so far
};

/// The local method that answers with a Snapshot.
inline constexpr const char* k_snapshot_method = "snapshot";

/// One node's pinger. Peers are iterated in sorted address order, so equal inputs give
/// equal effects. As a Role it serves k_handle, starts on Start with the bootstrap
/// addresses it was made with, and answers the local method k_snapshot_method.
class Pinger final : public Role {
 public:
  /// `self` is the node's own listen multiaddr; it is never added as a peer. `bootstrap`
  /// is what Start learns.
  Pinger(PeerAddr self, Config config, std::vector<PeerAddr> bootstrap = {});

  /// {k_handle}.
  [[nodiscard]] std::vector<std::string> handles() const override { return {k_handle}; }
  /// The role contract: each input to the method below that takes it.
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

  /// Learns the `bootstrap` addresses and arms the round timer to fire at `now`, so the
  /// first round runs as soon as the shell delivers it.
  [[nodiscard]] Effects start(TimePoint now, const std::vector<PeerAddr>& bootstrap);

  /// Runs a round when `id` is the round timer: one Call (deadline `Config::timeout`)
  /// per known peer, then re-arms the timer at `now + Config::interval`. Other ids are
  /// ignored.
  [[nodiscard]] Effects on_timer(TimePoint now, TimerId id);

  /// Answers a serialized PingProbe with a PingAck holding this node's view; learns the
  /// sender and the peers the probe lists. Unparsable bytes get an errc::malformed
  /// error reply.
  [[nodiscard]] Effects on_request(TimePoint now, RequestId id, const std::string& request);

  /// Records the outcome of probe `call`: an RTT (`now` minus the time it was issued)
  /// and the peers the ack lists, or a failure with its message. Unknown ids are ignored.
  [[nodiscard]] Effects on_response(TimePoint now, CallId call,
                                    const Result<std::string>& response);

  /// Every known peer and what was observed about it, sorted by address.
  [[nodiscard]] const std::map<PeerAddr, PeerStats>& peers() const { return peers_; }

  /// Probing rounds run so far.
  [[nodiscard]] std::size_t rounds() const { return rounds_; }

  /// Probes issued whose outcome has not come back yet.
  [[nodiscard]] std::size_t in_flight() const { return in_flight_.size(); }

  /// This node's own listen multiaddr.
  [[nodiscard]] const PeerAddr& self() const { return self_; }

 private:
  /// A probe waiting for its answer.
  struct InFlight {
    PeerAddr peer;
    TimePoint issued_at{};
    std::uint64_t seq = 0;
  };

  /// Adds `addr` unless it is empty, this node, already known, or the table is full.
  void learn(const PeerAddr& addr);
  /// Records a failed probe to `peer`.
  void record_failure(const PeerAddr& peer, std::string message);
  /// Serialized PingProbe carrying `seq` and this node's view.
  [[nodiscard]] std::string make_probe(std::uint64_t seq) const;

  PeerAddr self_;
  Config config_;
  std::vector<PeerAddr> bootstrap_;
  std::map<PeerAddr, PeerStats> peers_;
  messages::AddressBook addresses_;  ///< addresses met in probes and acks
  std::map<CallId, InFlight> in_flight_;
  CallId next_call_ = 1;
  std::uint64_t next_seq_ = 1;
  std::size_t rounds_ = 0;
};

}  // namespace apiary::core::ping
