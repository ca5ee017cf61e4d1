#pragma once
/// A small in-memory network for AllReduceRunner tests: a virtual clock, events ordered
/// by (time, seq), FIFO links where each message occupies its link for `gap` and then
/// travels for `latency`, timers, streaming calls with cancel, and faults (killing a
/// peer with or without notifying its partners, slowing a peer's stream messages or its
/// answers after a number of them, cancelling a peer's round).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/averaging/allreduce.hpp"

namespace apiary::core::averaging::testing {

using namespace std::chrono_literals;

/// Fault settings of one peer.
struct PeerFaults {
  std::optional<TimePoint> kill_at;      ///< dies at this time (before start if 0)
  bool notify_partners = true;           ///< partners see their calls with it break
  std::optional<TimePoint> cancel_at;    ///< calls cancel() at this time
  std::size_t slow_sends_after = SIZE_MAX;    ///< stream messages sent at normal pace
  std::size_t slow_replies_after = SIZE_MAX;  ///< answers sent at normal pace
  Duration slow_gap = 300ms;             ///< link time of each later message
  bool reduce_fails = false;             ///< its deferred reduce jobs end in an error
};

/// The network and the runners on it.
class Net {
 public:
  Duration latency = 1ms;  ///< travel time of every message
  Duration gap = 1ms;      ///< link time of every message (serializes a link)
  /// Deferred reductions: a job's result comes back after reduce_delay plus
  /// (id % 5) ms, so later parts may finish first (as on a busy device actor).
  Duration reduce_delay = 1ms;
  /// Honours Call::landings as the gateway does: the n-th answer on a call takes the n-th
  /// landing, and a spliced answer that matches it is written into the zone and handed
  /// over as head + tail with on_message's `landed`. Off: every answer travels whole.
  bool land_answers = false;
  /// Answers that landed so far.
  std::size_t landed = 0;

  explicit Net(std::vector<AllReduceRunner> runners, std::vector<PeerFaults> faults = {})
      : runners_(std::move(runners)), faults_(std::move(faults)),
        dead_(runners_.size(), false), sends_(runners_.size(), 0), replies_(runners_.size(), 0),
        next_rid_(runners_.size(), 0) {
    faults_.resize(runners_.size());
  }

  /// Starts every runner at time 0 (after the faults due at 0) and runs to quiescence
  /// or `until`.
  void run(TimePoint until = std::chrono::seconds(30)) {
    for (std::size_t p = 0; p < runners_.size(); ++p) {
      const PeerFaults& f = faults_[p];
      if (f.kill_at && *f.kill_at == TimePoint{}) { dead_[p] = true; continue; }
      if (f.kill_at) at(*f.kill_at, [this, p] { kill(p); });
      if (f.cancel_at) at(*f.cancel_at, [this, p] { execute(p, runners_[p].cancel(now_)); });
      execute(p, runners_[p].start(now_));
    }
    while (!events_.empty() && events_.top().at <= until) {
      Event e = events_.top();
      events_.pop();
      now_ = e.at;
      e.fn();
    }
  }

  [[nodiscard]] AllReduceRunner& runner(std::size_t p) { return runners_[p]; }
  [[nodiscard]] bool dead(std::size_t p) const { return dead_[p]; }
  [[nodiscard]] TimePoint now() const { return now_; }

 private:
  struct Event {
    TimePoint at;
    std::uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Event& o) const { return std::tie(at, seq) > std::tie(o.at, o.seq); }
  };
  /// An open streaming call, by (caller, call id).
  struct Stream {
    std::size_t callee = 0;
    RequestId rid = 0;
    bool caller_open = true;  ///< the caller still hears of it
    bool callee_open = true;  ///< the callee still serves it
    bool delivered = false;   ///< the first message reached the callee
    bool cancelled = false;   ///< the caller cancelled: its queued messages are dropped
  };

  void at(TimePoint t, std::function<void()> fn) { events_.push(Event{t, seq_++, std::move(fn)}); }

  /// Delivery time of a message on link from -> to occupying it for `busy`.
  TimePoint link(std::size_t from, std::size_t to, Duration busy) {
    TimePoint& free = link_free_[{from, to}];
    free = std::max(free, now_) + busy;
    return free + latency;
  }

  static PeerAddr addr_of(std::size_t p);

  void kill(std::size_t p) {
    dead_[p] = true;
    if (!faults_[p].notify_partners) return;
    for (auto& [key, s] : streams_) {
      const std::size_t caller = key.first;
      const CallId call = key.second;
      if (caller == p && s.callee_open && s.delivered && !dead_[s.callee]) {
        s.callee_open = false;
        const std::size_t callee = s.callee;
        const RequestId rid = s.rid;
        at(now_ + latency, [this, callee, rid] {
          execute(callee, runners_[callee].on_request_message(
                              now_, rid, make_error(errc::peer_down, "caller died"), true));
        });
      } else if (s.callee == p && s.caller_open && !dead_[caller]) {
        s.caller_open = false;
        at(now_ + latency, [this, caller, call] {
          execute(caller, runners_[caller].on_response(
                              now_, call, make_error(errc::peer_down, "callee died")));
        });
      }
    }
  }

  void execute(std::size_t p, Effects fx) {
    if (dead_[p]) return;
    for (Effect& e : fx) std::visit([&](auto& x) { apply(p, x); }, e);
    for (ReduceJob& job : runners_[p].take_reduce_jobs()) {
      const Duration delay = reduce_delay + std::chrono::milliseconds(job.id % 5);
      at(now_ + delay, [this, p, job = std::move(job)]() mutable {
        if (dead_[p]) return;
        const std::uint64_t id = job.id;
        Result<ReducedPart> result = faults_[p].reduce_fails
                                         ? Result<ReducedPart>(make_error(errc::internal, "device failed"))
                                         : reduce_part(std::move(job));
        execute(p, runners_[p].on_reduced(now_, id, std::move(result)));
      });
    }
  }

  void apply(std::size_t p, Call& c) {
    const std::size_t to = std::stoul(c.peer.host().substr(std::string("10.0.0.").size()));
    streams_[{p, c.id}] = Stream{to};
    if (land_answers) landings_[{p, c.id}] = std::deque<Landing>(c.landings.begin(), c.landings.end());
    const CallId id = c.id;
    at(link(p, to, send_gap(p)), [this, p, to, id, msg = whole_message(c)] {
      Stream& s = streams_[{p, id}];
      if (dead_[p] || dead_[to] || !s.callee_open) return;
      s.rid = ++next_rid_[to];
      s.delivered = true;
      rid_owner_[{to, s.rid}] = {p, id};
      execute(to, runners_[to].on_request(now_, s.rid, addr_of(p), apiary::Buffer::copy_of(msg)));
    });
  }
  void apply(std::size_t p, Send& m) {
    const std::size_t to = streams_[{p, m.call}].callee;
    const CallId id = m.call;
    at(link(p, to, send_gap(p)), [this, p, to, id, msg = whole_message(m), last = m.last] {
      Stream& s = streams_[{p, id}];
      if (dead_[p] || dead_[to] || !s.callee_open || !s.delivered || s.cancelled) return;
      if (last) s.callee_open = false;
      execute(to, runners_[to].on_request_message(now_, s.rid, apiary::Buffer::copy_of(msg), last));
    });
  }
  void apply(std::size_t p, Reply& r) {
    auto [caller, id] = rid_owner_.at({p, r.request});
    Stream& s0 = streams_[{caller, id}];
    if (r.last || !r.response) s0.callee_open = false;
    const Duration busy = replies_[p]++ >= faults_[p].slow_replies_after ? faults_[p].slow_gap : gap;
    at(link(p, caller, busy), [this, p, caller = caller, id = id, r] {
      Stream& s = streams_[{caller, id}];
      if (dead_[p] || dead_[caller] || !s.caller_open) return;
      if (!r.response) {
        s.caller_open = false;
        landings_.erase({caller, id});
        execute(caller, runners_[caller].on_response(now_, id, r.response));
        return;
      }
      if (land(caller, id, r)) {
        execute(caller, runners_[caller].on_message(now_, id, *r.response + r.tail, true));
      } else if (const std::string message = whole_message(r); !message.empty()) {
        execute(caller, runners_[caller].on_message(now_, id, message));  // a spliced answer travels whole
      }
      if (r.last && s.caller_open) {
        s.caller_open = false;
        landings_.erase({caller, id});
        execute(caller, runners_[caller].on_response(now_, id, std::string{}));
      }
    });
  }
  void apply(std::size_t p, Cancel& c) {
    Stream& s = streams_[{p, c.call}];
    s.caller_open = false;
    s.cancelled = true;
    landings_.erase({p, c.call});
    const std::size_t to = s.callee;
    const CallId id = c.call;
    // The cancel overtakes the caller's queued messages, which are dropped.
    at(now_ + latency, [this, p, to, id] {
      Stream& st = streams_[{p, id}];
      if (dead_[to] || !st.callee_open || !st.delivered) return;
      st.callee_open = false;
      execute(to, runners_[to].on_request_message(
                      now_, st.rid, make_error(errc::cancelled, "caller cancelled"), true));
    });
  }
  void apply(std::size_t p, SetTimer& t) {
    const std::uint64_t generation = ++timer_gen_[{p, t.id}];
    at(std::max(t.at, now_), [this, p, id = t.id, generation] {
      if (timer_gen_[{p, id}] != generation || dead_[p]) return;
      execute(p, runners_[p].on_timer(now_, id));
    });
  }
  void apply(std::size_t p, CancelTimer& t) { ++timer_gen_[{p, t.id}]; }
  /// The runner makes no local calls.
  void apply(std::size_t, Complete&) {}
  void apply(std::size_t, Ask&) {}

  /// Takes the call's next landing for answer `r` and writes its body there if it matches.
  bool land(std::size_t caller, CallId id, const Reply& r) {
    auto it = landings_.find({caller, id});
    const bool message = !r.response->empty() || !r.body.empty() || !r.tail.empty();
    if (it == landings_.end() || it->second.empty() || !message) return false;
    Landing next = std::move(it->second.front());
    it->second.pop_front();
    if (next.zone.empty() || next.zone.size() != r.body.size() || (!next.any_head && next.head != *r.response) ||
        next.tail != r.tail) {
      return false;
    }
    std::memcpy(next.zone.data(), r.body.data(), r.body.size());
    ++landed;
    return true;
  }

  Duration send_gap(std::size_t p) {
    return sends_[p]++ >= faults_[p].slow_sends_after ? faults_[p].slow_gap : gap;
  }

  std::vector<AllReduceRunner> runners_;
  std::vector<PeerFaults> faults_;
  std::vector<bool> dead_;
  std::vector<std::size_t> sends_, replies_;
  std::vector<RequestId> next_rid_;
  std::map<std::pair<std::size_t, CallId>, Stream> streams_;
  std::map<std::pair<std::size_t, CallId>, std::deque<Landing>> landings_;  ///< land_answers
  std::map<std::pair<std::size_t, RequestId>, std::pair<std::size_t, CallId>> rid_owner_;
  std::map<std::pair<std::size_t, std::size_t>, TimePoint> link_free_;
  std::map<std::pair<std::size_t, TimerId>, std::uint64_t> timer_gen_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  TimePoint now_{};
  std::uint64_t seq_ = 0;
};

/// The address of test peer `p` (what Net routes by).
inline PeerAddr test_addr(std::size_t p) {
  return PeerAddr(messages::Multiaddr{"10.0.0." + std::to_string(p), false, 1, {}, {}});
}

inline PeerAddr Net::addr_of(std::size_t p) { return test_addr(p); }

}  // namespace apiary::core::averaging::testing
