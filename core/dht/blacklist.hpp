#pragma once
/// Peers that failed to answer a find, banned with exponential backoff (hivemind's
/// DHTNode.Blacklist): the n-th consecutive failure bans for base * rate^(n-1) seconds;
/// a success clears the record. Pure: times are DHT seconds passed in.
#include <cmath>
#include <cstddef>
#include <map>
#include <string>

#include "messages/identity/peer_address.hpp"

namespace apiary::core::dht {

class Blacklist {
 public:
  /// `base_seconds` > 0 is the first ban; `rate` >= 1 multiplies each following one.
  Blacklist(double base_seconds, double rate) : base_(base_seconds), rate_(rate) {}

  /// Records a failure of `peer` at `now`; returns when its ban ends.
  double ban(double now, const messages::PeerAddress& peer) {
    auto& e = entries_[peer];
    e.until = now + base_ * std::pow(rate_, static_cast<double>(e.failures));
    ++e.failures;
    return e.until;
  }
  /// True while `peer` is banned at `now`.
  [[nodiscard]] bool is_banned(double now, const messages::PeerAddress& peer) const {
    auto it = entries_.find(peer);
    return it != entries_.end() && now < it->second.until;
  }
  /// `peer` answered: its failures are forgiven.
  void clear(const messages::PeerAddress& peer) { entries_.erase(peer); }
  /// Consecutive failures recorded for `peer` (0 if none).
  [[nodiscard]] std::size_t failures(const messages::PeerAddress& peer) const {
    auto it = entries_.find(peer);
    return it == entries_.end() ? 0 : it->second.failures;
  }
  /// Peers with a failure on record (banned now or before).
  [[nodiscard]] std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    double until = 0;
    std::size_t failures = 0;
  };
  double base_;
  double rate_;
  std::map<messages::PeerAddress, Entry> entries_;
};

}  // namespace apiary::core::dht
