#include "core/ping/pinger.hpp"

#include <algorithm>
#include <utility>

#include "ping.pb.h"

namespace apiary::core::ping {

Status validate(const Config& config) {
  if (config.interval <= Duration::zero()) {
    return make_error(errc::invalid_argument,
                      "ping interval must be > 0 ns, got {} ns; set Config::interval",
                      config.interval.count());
  }
  if (config.timeout <= Duration::zero()) {
    return make_error(errc::invalid_argument,
                      "ping timeout must be > 0 ns, got {} ns; set Config::timeout",
                      config.timeout.count());
  }
  if (config.max_peers == 0) {
    return make_error(errc::invalid_argument,
                      "ping max_peers must be >= 1, got 0; set Config::max_peers");
  }
  return ok_status();
}

namespace {

/// The kept samples, sorted ascending.
std::vector<Duration> sorted(const std::vector<Duration>& rtts) {
  std::vector<Duration> out = rtts;
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Duration PeerStats::min_rtt() const {
  if (rtts.empty()) return Duration::zero();
  return *std::min_element(rtts.begin(), rtts.end());
}

Duration PeerStats::median_rtt() const {
  if (rtts.empty()) return Duration::zero();
  return sorted(rtts)[rtts.size() / 2];
}

Duration PeerStats::max_rtt() const {
  if (rtts.empty()) return Duration::zero();
  return *std::max_element(rtts.begin(), rtts.end());
}

Pinger::Pinger(PeerAddr self, Config config, std::vector<PeerAddr> bootstrap)
    : self_(std::move(self)), config_(config), bootstrap_(std::move(bootstrap)) {}

Effects Pinger::on(TimePoint now, Input input) {
  if (std::holds_alternative<Start>(input)) return start(now, bootstrap_);
  if (auto* r = std::get_if<Request>(&input)) return on_request(now, r->id, std::string(r->body.view()));
  if (auto* r = std::get_if<Response>(&input)) return on_response(now, r->call, r->result);
  if (auto* t = std::get_if<TimerFired>(&input)) return on_timer(now, t->id);
  if (auto* c = std::get_if<LocalCall>(&input)) {
    if (c->method == k_snapshot_method) return {Complete{c->op, Value::of(Snapshot{self_, peers_, rounds_})}};
    return {unknown_method(*c, "the pinger")};
  }
  return {};  // no streams, no asks; a peer going down shows as failed probes
}

void Pinger::learn(const PeerAddr& addr) {
  if (addr.empty() || addr == self_) return;
  if (peers_.count(addr) != 0) return;
  if (peers_.size() >= config_.max_peers) return;
  peers_.emplace(addr, PeerStats{});
}

void Pinger::record_failure(const PeerAddr& peer, std::string message) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) return;
  it->second.failed += 1;
  it->second.last_error = std::move(message);
}

std::string Pinger::make_probe(std::uint64_t seq) const {
  pb::PingProbe probe;
  probe.set_seq(seq);
  probe.set_sender_addr(self_.multiaddr());
  for (const auto& [addr, stats] : peers_) probe.add_known_peers(addr.multiaddr());
  return probe.SerializeAsString();
}

Effects Pinger::start(TimePoint now, const std::vector<PeerAddr>& bootstrap) {
  for (const auto& addr : bootstrap) learn(addr);
  return {SetTimer{k_round_timer, now}};
}

Effects Pinger::on_timer(TimePoint now, TimerId id) {
  if (id != k_round_timer) return {};
  rounds_ += 1;
  Effects out;
  out.reserve(peers_.size() + 1);
  // Probe every known peer, in address order.
  for (auto& [addr, stats] : peers_) {
    const CallId call = next_call_++;
    const std::uint64_t seq = next_seq_++;
    in_flight_.emplace(call, InFlight{addr, now, seq});
    stats.sent += 1;
    out.emplace_back(unary_call(call, addr, k_handle, make_probe(seq), config_.timeout));
  }
  // Schedule the next round (at least 1 ns ahead, so a zero interval cannot spin).
  out.emplace_back(SetTimer{k_round_timer, now + std::max(config_.interval, Duration{1})});
  return out;
}

Effects Pinger::on_request(TimePoint /*now*/, RequestId id, const std::string& request) {
  pb::PingProbe probe;
  if (!probe.ParseFromString(request)) {
    return {Reply{id, make_error(errc::malformed,
                                 "expected a serialized apiary.pb.PingProbe for {}, got {} "
                                 "bytes that do not parse; send a PingProbe",
                                 k_handle, request.size())}};
  }
  // Learn the sender and its view.
  learn(addresses_.parse(probe.sender_addr()));
  for (const auto& addr : probe.known_peers()) learn(addresses_.parse(addr));
  // Answer with our own view.
  pb::PingAck ack;
  ack.set_seq(probe.seq());
  ack.set_responder_addr(self_.multiaddr());
  for (const auto& [addr, stats] : peers_) ack.add_known_peers(addr.multiaddr());
  return {Reply{id, ack.SerializeAsString()}};
}

Effects Pinger::on_response(TimePoint now, CallId call, const Result<std::string>& response) {
  auto it = in_flight_.find(call);
  if (it == in_flight_.end()) return {};
  const InFlight sent = std::move(it->second);
  in_flight_.erase(it);

  if (!response.ok()) {
    record_failure(sent.peer, response.error().what());
    return {};
  }
  pb::PingAck ack;
  if (!ack.ParseFromString(response.value())) {
    record_failure(sent.peer,
                   make_error(errc::malformed,
                              "expected a serialized apiary.pb.PingAck from {}, got {} bytes "
                              "that do not parse; the peer may run another protocol",
                              sent.peer, response.value().size())
                       .what());
    return {};
  }
  if (ack.seq() != sent.seq) {
    record_failure(sent.peer, make_error(errc::protocol,
                                         "expected an ack echoing probe seq {} from {}, got "
                                         "seq {}; the peer answered another probe",
                                         sent.seq, sent.peer, ack.seq())
                                  .what());
    return {};
  }
  // Record the round trip.
  auto peer = peers_.find(sent.peer);
  if (peer != peers_.end()) {
    PeerStats& stats = peer->second;
    const Duration rtt = now - sent.issued_at;
    stats.answered += 1;
    stats.last_rtt = rtt;
    stats.rtts.push_back(rtt);
    if (stats.rtts.size() > config_.history) {
      stats.rtts.erase(stats.rtts.begin(),
                       stats.rtts.begin() + static_cast<std::ptrdiff_t>(stats.rtts.size() -
                                                                        config_.history));
    }
  }
  // Learn the responder and its view.
  learn(addresses_.parse(ack.responder_addr()));
  for (const auto& addr : ack.known_peers()) learn(addresses_.parse(addr));
  return {};
}

}  // namespace apiary::core::ping
