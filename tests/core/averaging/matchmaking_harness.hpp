#pragma once
// A small in-memory swarm for matchmaking tests: several Matchmaking roles, a fake DHT,
// a virtual clock and one FIFO event queue ordered by (time, sequence). Calls, replies,
// stream messages, cancels, call deadlines, timers and DHT operations are delivered
// after a fixed latency, so a run is a pure function of its inputs and seed.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "averaging.pb.h"
#include "core/averaging/matchmaking.hpp"
#include "tests/support/peer_addr.hpp"

namespace apiary::test {

namespace mm = apiary::core::averaging;
using apiary::core::TimePoint;

/// The fake DHT: group key -> subkey (PeerID) -> (looking, expiration in DHT seconds).
/// A store replaces an entry only when its expiration is not older (as the real DHT).
struct FakeDht {
  std::map<std::string, std::map<std::string, std::pair<bool, double>>> table;
  std::vector<mm::DhtDeclare> stores;  ///< every store, in the order it was applied

  bool store(const mm::DhtDeclare& d) {
    stores.push_back(d);
    auto& slot = table[d.group_key];
    auto it = slot.find(d.peer);
    if (it != slot.end() && it->second.second > d.expiration) return false;
    slot[d.peer] = {d.looking, d.expiration};
    return true;
  }
  /// Peers looking under `key` whose declaration has not expired at `dht_now`.
  std::vector<mm::Averager> active(const std::string& key, double dht_now) const {
    std::vector<mm::Averager> out;
    auto it = table.find(key);
    if (it == table.end()) return out;
    for (const auto& [peer, v] : it->second) {
      if (v.first && v.second > dht_now) out.push_back({peer, v.second});
    }
    return out;
  }
};

/// A MessageFromLeader as a follower received it.
struct Delivered {
  TimePoint at{};
  std::string from;  ///< the leader
  std::string to;    ///< the follower
  int code = 0;
  std::string suggested_leader;
};

/// The swarm.
class Swarm {
 public:
  static constexpr double k_epoch = 1000.0;  ///< DHT seconds at virtual time 0

  explicit Swarm(std::uint64_t seed, TimePoint latency = std::chrono::milliseconds(10))
      : seed_(seed), latency_(latency) {}

  /// Adds an averager with PeerID `id`; returns its index.
  std::size_t add(const std::string& id) {
    auto gen = std::make_shared<std::mt19937_64>(seed_ * 1000003u + nodes_.size());
    mm::MatchmakingConfig config;
    config.peer_id = id;
    config.dht_epoch = k_epoch;
    config.address_of = [](const mm::PeerIdBytes& peer) { return test_peer(peer); };
    nodes_.push_back(std::make_unique<mm::Matchmaking>(config, [gen] { return (*gen)(); }));
    index_[test_peer(id)] = nodes_.size() - 1;
    timers_.emplace_back();
    return nodes_.size() - 1;
  }

  /// Starts a step on node `n` at virtual time `at`.
  void start_at(TimePoint at, std::size_t n, mm::StepParams params) {
    schedule(at, [this, n, params](TimePoint now) { apply(n, now, node(n).start(now, params)); });
  }

  /// Runs events until none is left or the next one is past `end`.
  void run_until(TimePoint end) {
    while (!events_.empty() && events_.top().at <= end) {
      Event e = events_.top();
      events_.pop();
      now_ = e.at;
      ++delivered_;
      e.fn(now_);
    }
  }

  mm::Matchmaking& node(std::size_t n) { return *nodes_[n]; }
  std::size_t size() const { return nodes_.size(); }
  /// The outcome of node `n`'s step and the virtual time it came, if it came.
  const std::optional<std::pair<TimePoint, apiary::Result<mm::GroupInfo>>>& outcome(std::size_t n) {
    outcomes_.resize(nodes_.size());
    return outcomes_[n];
  }
  const FakeDht& dht() const { return dht_; }
  /// The DHT, to plant declarations of peers that are not in the swarm.
  FakeDht& dht_mut() { return dht_; }
  /// The DHT's confirmation of a declaration reaches its peer `delay` after the record
  /// is stored (and visible to readers): a reply slower than the other peers' reads.
  void delay_store_acks(TimePoint delay) { ack_delay_ = delay; }
  /// Requests to node `n` are dropped unanswered from now on (a hung peer).
  void mute(std::size_t n) { muted_.insert(n); }
  const std::vector<Delivered>& leader_messages() const { return leader_messages_; }
  /// Calls the callers cancelled so far (caller index, call id).
  const std::set<std::pair<std::size_t, apiary::core::CallId>>& cancelled() const { return cancelled_; }
  /// Events delivered so far (equal runs deliver equal counts).
  std::uint64_t delivered() const { return delivered_; }

 private:
  struct Event {
    TimePoint at{};
    std::uint64_t seq = 0;
    std::function<void(TimePoint)> fn;
    bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  /// One join stream between a caller and a callee.
  struct Stream {
    std::size_t caller = 0;
    std::size_t callee = 0;
    apiary::core::CallId call = 0;
    bool open = true;
  };

  void schedule(TimePoint at, std::function<void(TimePoint)> fn) {
    events_.push(Event{at, next_seq_++, std::move(fn)});
  }

  /// Executes the effects of one input of node `n`.
  void apply(std::size_t n, TimePoint now, mm::MatchmakingEffects fx) {
    using namespace apiary::core;
    for (auto& effect : fx.rpc) {
      if (auto* c = std::get_if<Call>(&effect)) {
        call(n, now, *c);
      } else if (auto* r = std::get_if<Reply>(&effect)) {
        reply(now, *r);
      } else if (auto* x = std::get_if<Cancel>(&effect)) {
        cancel(n, now, *x);
      } else if (auto* t = std::get_if<SetTimer>(&effect)) {
        const std::uint64_t gen = ++timer_gen_;
        timers_[n][t->id] = gen;
        const TimerId id = t->id;
        schedule(std::max(now, t->at), [this, n, id, gen](TimePoint at) {
          auto it = timers_[n].find(id);
          if (it == timers_[n].end() || it->second != gen) return;
          timers_[n].erase(it);
          apply(n, at, node(n).on_timer(at, id));
        });
      } else if (auto* ct = std::get_if<CancelTimer>(&effect)) {
        timers_[n].erase(ct->id);
      }
    }
    for (auto& op : fx.dht) {
      if (auto* d = std::get_if<mm::DhtDeclare>(&op)) {
        mm::DhtDeclare decl = *d;
        schedule(now + latency_, [this, n, decl](TimePoint at) {
          const bool ok = dht_.store(decl);
          if (ack_delay_ == TimePoint{}) {
            apply(n, at, node(n).on_declared(at, decl.op, ok));
            return;
          }
          schedule(at + ack_delay_, [this, n, decl, ok](TimePoint acked) {
            apply(n, acked, node(n).on_declared(acked, decl.op, ok));
          });
        });
      } else if (auto* g = std::get_if<mm::DhtGetAveragers>(&op)) {
        mm::DhtGetAveragers get = *g;
        schedule(now + latency_, [this, n, get](TimePoint at) {
          auto found = dht_.active(get.group_key, core::to_seconds(at) + k_epoch);
          apply(n, at, node(n).on_averagers(at, get.op, std::move(found)));
        });
      }
    }
    if (fx.outcome) {
      outcomes_.resize(nodes_.size());
      outcomes_[n].emplace(now, std::move(*fx.outcome));
    }
  }

  void call(std::size_t n, TimePoint now, const apiary::core::Call& c) {
    auto it = index_.find(c.peer);
    const apiary::core::CallId id = c.id;
    if (it == index_.end()) {
      schedule(now + latency_, [this, n, id](TimePoint at) {
        apply(n, at, node(n).on_response(at, id, apiary::Error{apiary::errc::unavailable, "no peer"}));
      });
      return;
    }
    const apiary::core::RequestId req = next_request_++;
    streams_[req] = Stream{n, it->second, id, true};
    const std::string caller = c.caller, body = c.request;
    schedule(now + latency_, [this, req, caller, body](TimePoint at) {
      if (!streams_[req].open) return;
      const std::size_t callee = streams_[req].callee;
      if (muted_.count(callee) != 0) return;
      apply(callee, at, node(callee).on_request(at, req, caller, body));
    });
    // The call's own deadline.
    schedule(now + c.timeout, [this, req](TimePoint at) {
      Stream& s = streams_[req];
      if (!s.open) return;
      s.open = false;
      const apiary::Error e{apiary::errc::deadline_exceeded, "join call deadline"};
      apply(s.caller, at, node(s.caller).on_response(at, s.call, e));
      apply(s.callee, at, node(s.callee).on_request_message(at, req, e, true));
    });
  }

  void reply(TimePoint now, const apiary::core::Reply& r) {
    Stream& s = streams_[r.request];
    if (!s.open) return;
    if (r.last) s.open = false;
    const Stream copy = s;
    if (!r.response.ok()) {
      s.open = false;
      const apiary::Error e = r.response.error();
      schedule(now + latency_, [this, copy, e](TimePoint at) {
        apply(copy.caller, at, node(copy.caller).on_response(at, copy.call, e));
      });
      return;
    }
    const std::string msg = r.response.value();
    const bool last = r.last;
    schedule(now + latency_, [this, copy, msg, last](TimePoint at) {
      if (cancelled_.count({copy.caller, copy.call}) != 0) return;
      apiary::pb::MessageFromLeader m;
      if (m.ParseFromString(msg)) {
        leader_messages_.push_back(Delivered{at, node(copy.callee).peer_id(),
                                             node(copy.caller).peer_id(), m.code(),
                                             m.suggested_leader()});
      }
      apply(copy.caller, at, node(copy.caller).on_message(at, copy.call, msg));
      if (last) apply(copy.caller, at, node(copy.caller).on_response(at, copy.call, std::string{}));
    });
  }

  void cancel(std::size_t n, TimePoint now, const apiary::core::Cancel& x) {
    cancelled_.insert({n, x.call});
    for (auto& [req, s] : streams_) {
      if (s.caller != n || s.call != x.call || !s.open) continue;
      s.open = false;
      const apiary::core::RequestId id = req;
      const std::size_t callee = s.callee;
      schedule(now + latency_, [this, id, callee](TimePoint at) {
        const apiary::Error e{apiary::errc::cancelled, "caller cancelled"};
        apply(callee, at, node(callee).on_request_message(at, id, e, true));
      });
    }
  }

  std::uint64_t seed_;
  TimePoint latency_;
  TimePoint ack_delay_{};
  TimePoint now_{};
  std::vector<std::unique_ptr<mm::Matchmaking>> nodes_;
  std::map<apiary::core::PeerAddr, std::size_t> index_;  ///< by address (test_peer of the id)
  std::vector<std::map<apiary::core::TimerId, std::uint64_t>> timers_;
  std::vector<std::optional<std::pair<TimePoint, apiary::Result<mm::GroupInfo>>>> outcomes_;
  std::map<apiary::core::RequestId, Stream> streams_;
  std::set<std::pair<std::size_t, apiary::core::CallId>> cancelled_;
  std::set<std::size_t> muted_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<Delivered> leader_messages_;
  FakeDht dht_;
  std::uint64_t next_seq_ = 1;
  std::uint64_t timer_gen_ = 0;
  std::uint64_t delivered_ = 0;
  apiary::core::RequestId next_request_ = 1;
};

}  // namespace apiary::test
