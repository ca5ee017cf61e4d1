#include "sim/world.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <variant>
#include <utility>

#include <fmt/format.h>

namespace apiary::sim {

World::World(std::uint64_t seed) : seed_(seed), rng_(seed) { trace_.add_u64(seed); }

std::string World::summary() const {
  return fmt::format("seed={} trace_hash=0x{:016x} now_ns={} events={}", seed_, trace_hash(),
                     now_.count(), stats_.events);
}

Result<std::size_t> World::index_of(const PeerAddr& addr) const {
  auto it = by_addr_.find(addr);
  if (it == by_addr_.end()) {
    return make_error(errc::not_found, "expected a node added to the world, got unknown '{}'; "
                                       "call add_node first", addr);
  }
  return it->second;
}

Result<Host*> World::add_node(const PeerAddr& addr, std::unique_ptr<Host> host) {
  if (addr.empty() || !host) {
    return make_error(errc::invalid_argument,
                      "expected a non-empty address and a host, got address '{}' and {} host; "
                      "pass both", addr, host ? "a" : "no");
  }
  if (by_addr_.count(addr) != 0) {
    return make_error(errc::invalid_argument,
                      "expected a free address, got '{}' which node {} already uses; pick "
                      "another", addr, by_addr_.at(addr));
  }
  by_addr_.emplace(addr, nodes_.size());
  Node node;
  node.addr = addr;
  node.host = std::move(host);
  nodes_.push_back(std::move(node));
  return nodes_.back().host.get();
}

Status World::start_node(const PeerAddr& addr, TimePoint at) { return schedule(addr, at, EventKind::start); }

Status World::kill_node(const PeerAddr& addr, TimePoint at) { return schedule(addr, at, EventKind::kill); }

Status World::restart_node(const PeerAddr& addr, TimePoint at, std::unique_ptr<Host> fresh) {
  auto idx = index_of(addr);
  if (!idx) return idx.error();
  if (!fresh) return make_error(errc::invalid_argument, "expected a host to restart '{}' with, got none", addr);
  if (auto st = kill_node(addr, at); !st) return st;  // a running node crashes first
  const std::size_t i = *idx;
  auto holder = std::make_shared<std::unique_ptr<Host>>(std::move(fresh));
  schedule(std::max(at, now_), [i, holder](World& w) {
    Node& node = w.nodes_[i];
    node.host = std::move(*holder);
    node.state = NodeState::running;
    w.execute(i, w.in_host([&] { return node.host->on_start(w.now_); }));
  });
  return ok_status();
}

Status World::add_machine(const std::string& name, std::size_t cores, CoreSharing sharing) {
  if (cores == 0) return make_error(errc::invalid_argument, "machine '{}': expected >= 1 cores, got 0", name);
  for (const auto& m : machines_) {
    if (m.name == name) return make_error(errc::invalid_argument, "machine '{}': the name is taken", name);
  }
  Machine m;
  m.name = name;
  m.cores.assign(cores, TimePoint{});
  m.sharing = sharing;
  machines_.push_back(std::move(m));
  return ok_status();
}

Status World::place(const PeerAddr& addr, const std::string& machine, CpuCost cost) {
  auto idx = index_of(addr);
  if (!idx) return idx.error();
  if (!cost) return make_error(errc::invalid_argument, "expected a cost function to place '{}' with, got none", addr);
  for (std::size_t m = 0; m < machines_.size(); ++m) {
    if (machines_[m].name != machine) continue;
    nodes_[*idx].machine = m;
    nodes_[*idx].cost = std::move(cost);
    return ok_status();
  }
  return make_error(errc::not_found, "expected a machine named '{}' (add_machine) to place '{}' on, got none", machine,
                    addr);
}

Status World::set_idle_load(const PeerAddr& addr, Duration per_second) {
  auto idx = index_of(addr);
  if (!idx) return idx.error();
  if (!nodes_[*idx].machine) {
    return make_error(errc::invalid_argument, "expected '{}' placed on a machine (place) before its idle load, got "
                      "none", addr);
  }
  if (per_second < Duration::zero()) {
    return make_error(errc::invalid_argument, "expected an idle load >= 0 for '{}', got {} ns a second", addr,
                      per_second.count());
  }
  nodes_[*idx].idle_load = per_second;
  idle_loads_ = idle_loads_ || per_second > Duration::zero();
  arm_idle_tick();
  return ok_status();
}

Status World::share_process(const PeerAddr& a, const PeerAddr& b) {
  auto ia = index_of(a);
  if (!ia) return ia.error();
  auto ib = index_of(b);
  if (!ib) return ib.error();
  std::size_t& pa = nodes_[*ia].process;
  const std::size_t pb = nodes_[*ib].process;
  if (pa == 0) pa = pb != 0 ? pb : next_process_++;
  if (pb != 0 && pb != pa) {
    for (Node& n : nodes_) {
      if (n.process == pb) n.process = pa;  // b's process joins a's
    }
  }
  nodes_[*ib].process = pa;
  return ok_status();
}

bool World::same_process(std::size_t a, std::size_t b) const {
  return a == b || (nodes_[a].process != 0 && nodes_[a].process == nodes_[b].process);
}

bool World::stays_in_process(const Event& event, const core::Effect& effect) const {
  if (event.node >= nodes_.size()) return false;
  const Node& n = nodes_[event.node];
  std::optional<std::size_t> to;
  if (const auto* call = std::get_if<core::Call>(&effect)) {
    auto it = by_addr_.find(call->peer);
    if (it != by_addr_.end()) to = it->second;
  } else if (const auto* send = std::get_if<core::Send>(&effect)) {
    auto it = n.calls.find(send->call);
    if (it != n.calls.end() && it->second.callee != k_no_node) to = it->second.callee;
  } else if (const auto* reply = std::get_if<core::Reply>(&effect)) {
    auto it = n.inbound.find(reply->request);
    if (it != n.inbound.end()) to = it->second.caller;
  }
  return to.has_value() && same_process(event.node, *to);
}

void World::arm_idle_tick() {
  if (!idle_loads_ || idle_ticking_) return;
  idle_ticking_ = true;
  schedule(now_ + k_idle_tick, [](World& w) {
    w.idle_ticking_ = false;
    w.charge_idle_loads();
  });
}

void World::charge_idle_loads() {
  constexpr double share = std::chrono::duration<double>(k_idle_tick).count();  // of a second
  for (Node& n : nodes_) {
    if (!n.machine || n.state != NodeState::running || n.idle_load <= Duration::zero()) continue;
    charge_aside(n, Duration(static_cast<Duration::rep>(std::llround(static_cast<double>(n.idle_load.count()) * share))));
  }
  // Only while anything else is queued: a world with nothing left to do stops (a later
  // event queues the next charge again).
  if (queued() > 0) arm_idle_tick();
}

void World::charge_aside(Node& n, Duration work) {
  if (!n.machine || work <= Duration::zero()) return;
  Machine& machine = machines_[*n.machine];
  if (machine.sharing == CoreSharing::time_slices) {
    machine.busy += work;
    n.busy += work;
    (void)share_add(*n.machine, static_cast<std::size_t>(&n - nodes_.data()), work, nullptr);
    return;
  }
  auto core = std::min_element(machine.cores.begin(), machine.cores.end());
  *core = std::max(*core, now_) + work;
  machine.busy += work;
  n.busy += work;
}

std::uint64_t World::share_add(std::size_t m, std::size_t node, Duration work, std::function<void(World&)> done) {
  Machine& machine = machines_[m];
  share_advance(machine);
  Job job;
  job.id = next_job_++;
  job.tag = machine.served + static_cast<double>(std::max(Duration::zero(), work).count());
  job.node = node;
  job.done = std::move(done);
  machine.jobs.push_back(std::move(job));
  share_reschedule(m);
  return machine.jobs.back().id;
}

void World::share_grow(std::size_t m, std::uint64_t id, Duration more) {
  Machine& machine = machines_[m];
  share_advance(machine);
  for (Job& job : machine.jobs) {
    if (job.id == id) job.tag += static_cast<double>(std::max(Duration::zero(), more).count());
  }
  share_reschedule(m);
}

double World::share_rate(const Machine& m) {
  // Every running item gets cores / items of a core, at most a whole one.
  return std::min(1.0, static_cast<double>(m.cores.size()) / static_cast<double>(m.jobs.size()));
}

void World::share_advance(Machine& m) {
  if (!m.jobs.empty() && now_ > m.served_at) m.served += share_rate(m) * static_cast<double>((now_ - m.served_at).count());
  m.served_at = now_;
}

void World::share_reschedule(std::size_t m) {
  Machine& machine = machines_[m];
  const std::uint64_t generation = ++machine.generation;
  if (machine.jobs.empty()) return;
  double first = machine.jobs.front().tag;
  for (const Job& job : machine.jobs) first = std::min(first, job.tag);
  const double wait = std::max(0.0, std::ceil((first - machine.served) / share_rate(machine)));
  schedule(now_ + Duration(static_cast<Duration::rep>(wait)),
           [m, generation](World& w) { w.share_complete(m, generation); });
}

void World::share_complete(std::size_t m, std::uint64_t generation) {
  Machine& machine = machines_[m];
  if (machine.generation != generation) return;  // the items changed since: a later check is queued
  share_advance(machine);
  // What is done (within half a nanosecond of service: the wait was rounded up), in the
  // order of its tags, then of its start.
  std::vector<Job> done;
  auto finished = [&machine](const Job& job) { return job.tag <= machine.served + 0.5; };
  for (Job& job : machine.jobs) {
    if (finished(job)) done.push_back(std::move(job));
  }
  machine.jobs.erase(std::remove_if(machine.jobs.begin(), machine.jobs.end(), finished), machine.jobs.end());
  std::stable_sort(done.begin(), done.end(), [](const Job& a, const Job& b) { return a.tag < b.tag; });
  share_reschedule(m);
  for (Job& job : done) {
    if (job.done) job.done(*this);
  }
}

void World::share_drop(std::size_t node) {
  Node& n = nodes_[node];
  n.working = false;
  n.after = Duration::zero();
  if (!n.machine || machines_[*n.machine].sharing != CoreSharing::time_slices) return;
  Machine& machine = machines_[*n.machine];
  share_advance(machine);
  machine.jobs.erase(std::remove_if(machine.jobs.begin(), machine.jobs.end(),
                                    [node](const Job& job) { return job.node == node; }),
                     machine.jobs.end());
  share_reschedule(*n.machine);
}

void World::share_effects_done(std::size_t node, std::uint64_t incarnation,
                               const std::shared_ptr<core::Effects>& held) {
  Node& n = nodes_[node];
  if (n.state != NodeState::running || n.incarnation != incarnation) return;
  execute(node, std::move(*held));
  if (n.after > Duration::zero()) {
    const Duration after = std::exchange(n.after, Duration::zero());
    n.job = share_add(*n.machine, node, after, [node, incarnation](World& w) { w.share_node_free(node, incarnation); });
    return;
  }
  share_node_free(node, incarnation);
}

void World::share_node_free(std::size_t node, std::uint64_t incarnation) {
  Node& n = nodes_[node];
  if (n.state != NodeState::running || n.incarnation != incarnation) return;
  n.working = false;
  n.job = 0;
  n.busy_until = now_;
  next_waiting(node);
}

Duration World::node_busy_time(const PeerAddr& addr) const {
  auto idx = index_of(addr);
  return idx ? nodes_[*idx].busy : Duration::zero();
}

Duration World::busy_time(const std::string& name) const {
  for (const auto& m : machines_) {
    if (m.name == name) return m.busy;
  }
  return Duration::zero();
}

std::optional<TimePoint> World::cpu_ready(const Event& event) const {
  if (event.kind == EventKind::action || event.kind == EventKind::kill) return std::nullopt;
  const Node& node = nodes_[event.node];
  if (!node.machine || node.state == NodeState::dead) return std::nullopt;
  // Time-sliced cores are never all busy; a working node's events wait untimed (step()).
  if (machines_[*node.machine].sharing == CoreSharing::time_slices) return std::nullopt;
  const auto& cores = machines_[*node.machine].cores;
  const TimePoint ready = std::max(node.busy_until, *std::min_element(cores.begin(), cores.end()));
  if (ready <= now_) return std::nullopt;
  return ready;
}

Status World::schedule(const PeerAddr& addr, TimePoint at, EventKind kind) {
  auto idx = index_of(addr);
  if (!idx) return idx.error();
  Event event;
  event.at = at;
  event.kind = kind;
  event.node = *idx;
  push(std::move(event));
  return ok_status();
}

bool World::running(const PeerAddr& addr) const {
  auto idx = index_of(addr);
  return idx && nodes_[*idx].state == NodeState::running;
}

bool World::killed(const PeerAddr& addr) const {
  auto idx = index_of(addr);
  return idx && nodes_[*idx].state == NodeState::dead;
}

std::vector<PeerAddr> World::nodes() const {
  std::vector<PeerAddr> out;
  out.reserve(nodes_.size());
  for (const auto& node : nodes_) out.push_back(node.addr);
  return out;
}

Host* World::host(const PeerAddr& addr) const {
  auto idx = index_of(addr);
  return idx ? nodes_[*idx].host.get() : nullptr;
}

Status World::submit(const PeerAddr& addr, core::Effects effects) {
  auto idx = index_of(addr);
  if (!idx) return idx.error();
  if (nodes_[*idx].state != NodeState::running) {
    return make_error(errc::unavailable,
                      "expected a running node to act for, got '{}' which is {}; start it "
                      "first", addr,
                      nodes_[*idx].state == NodeState::dead ? "killed" : "not started");
  }
  execute(*idx, std::move(effects));
  return ok_status();
}

void World::schedule(TimePoint at, std::function<void(World&)> action) {
  Event event;
  event.at = at;
  event.kind = EventKind::action;
  event.action = std::move(action);
  push(std::move(event));
}

std::uint64_t World::push(Event event, bool waited) {
  event.at = std::max(event.at, now_);
  if (!waited) event.arrived = event.at;
  event.seq = next_seq_++;
  const std::uint64_t seq = event.seq;
  std::size_t slot = slots_.size();
  if (free_slots_.empty()) {
    slots_.push_back(std::move(event));
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
    slots_[slot] = std::move(event);
  }
  const Event& parked = slots_[slot];
  queue_.push_back(Due{parked.at, parked.arrived, parked.seq, slot});
  std::push_heap(queue_.begin(), queue_.end());
  arm_idle_tick();
  return seq;
}

void World::wait_for_node(Event event, TimePoint ready) {
  event.at = ready;
  nodes_[event.node].front = push(std::move(event), true);
}

void World::next_waiting(std::size_t node) {
  Node& n = nodes_[node];
  if (n.front != 0 || n.waiting.empty() || n.working) return;
  Event next = std::move(n.waiting.front());
  n.waiting.pop_front();
  next.at = cpu_ready(next).value_or(now_);
  n.front = push(std::move(next), true);
}

void World::push_deadline(Duration timeout, std::size_t node, std::size_t peer, core::CallId call,
                          std::uint64_t serial) {
  auto fifo = deadlines_.find(timeout);
  if (fifo == deadlines_.end() && deadlines_.size() < k_deadline_fifos) {
    fifo = deadlines_.emplace(timeout, std::deque<Deadline>{}).first;
  }
  if (fifo != deadlines_.end()) {
    fifo->second.push_back(Deadline{now_ + timeout, next_seq_++, node, peer, call, serial});
    return;
  }
  // A timeout of its own (a caller that computes one per call): the heap keeps it.
  Event deadline;
  deadline.at = now_ + timeout;
  deadline.kind = EventKind::deadline;
  deadline.node = node;
  deadline.peer = peer;
  deadline.call = call;
  deadline.serial = serial;
  push(std::move(deadline));
}

std::deque<World::Deadline>* World::next_deadlines() {
  std::deque<Deadline>* next = nullptr;
  for (auto& [timeout, fifo] : deadlines_) {
    if (fifo.empty()) continue;
    const Deadline& d = fifo.front();
    if (next == nullptr || d.at < next->front().at || (d.at == next->front().at && d.seq < next->front().seq)) {
      next = &fifo;
    }
  }
  return next;
}

std::size_t World::queued() const {
  std::size_t n = queue_.size();
  for (const Node& node : nodes_) n += node.waiting.size();
  for (const auto& [timeout, fifo] : deadlines_) n += fifo.size();
  return n;
}

bool World::step() {
  std::deque<Deadline>* deadlines = next_deadlines();
  if (queue_.empty() && deadlines == nullptr) return false;
  Event event;
  // The deadline goes first when the heap's front is due after it (a deadline comes due at
  // its time: arrived == at; at the same time, an event that waited for its node came earlier).
  const auto deadline_first = [&] {
    if (queue_.empty()) return true;
    const Deadline& d = deadlines->front();
    return queue_.front() < Due{d.at, d.at, d.seq, 0};
  };
  if (deadlines != nullptr && deadline_first()) {
    const Deadline d = deadlines->front();
    deadlines->pop_front();
    if (deadlines->empty()) {
      // An emptied FIFO frees its place for another timeout.
      for (auto it = deadlines_.begin(); it != deadlines_.end(); ++it) {
        if (&it->second == deadlines) {
          deadlines_.erase(it);
          break;
        }
      }
    }
    event.at = d.at;
    event.arrived = d.at;
    event.seq = d.seq;
    event.kind = EventKind::deadline;
    event.node = d.node;
    event.peer = d.peer;
    event.call = d.call;
    event.serial = d.serial;
  } else {
    std::pop_heap(queue_.begin(), queue_.end());
    const std::size_t slot = queue_.back().slot;
    queue_.pop_back();
    event = std::move(slots_[slot]);
    free_slots_.push_back(slot);
  }
  now_ = event.at;
  stats_.events += 1;
  hash(event);
  const bool placed = event.kind != EventKind::action && event.kind != EventKind::kill && nodes_[event.node].machine;
  if (placed) {
    Node& node = nodes_[event.node];
    if (node.front == event.seq) {
      node.front = 0;
      if (node.working) {  // came first of its node's waiting events: stays first
        node.waiting.push_front(std::move(event));
        return true;
      }
    } else if (node.front != 0) {
      node.waiting.push_back(std::move(event));  // behind the events that came before it
      return true;
    }
  }
  if (placed && nodes_[event.node].working) {
    // A time-sliced node still working on an event: this one waits until it is done,
    // behind what came before it (share_node_free() queues the first of them).
    nodes_[event.node].waiting.push_back(std::move(event));
    return true;
  }
  if (auto ready = cpu_ready(event)) {
    // Its node, or every core of its machine, is busy: it waits its turn, behind what
    // came before it (a stream's messages keep their order).
    wait_for_node(std::move(event), *ready);
    return true;
  }
  // What a placed node's CpuCost reads of how the event came (unplaced nodes cost nothing).
  if (placed) {
    const Node& node = nodes_[event.node];
    event.woke = node.busy_until < now_;
    const bool message = event.kind == EventKind::request || event.kind == EventKind::response ||
                         event.kind == EventKind::call_message || event.kind == EventKind::reply_message;
    event.local = message && event.peer < nodes_.size() && same_process(event.node, event.peer);
  }
  handling_ = &event;
  process(event);
  handling_ = nullptr;
  handled_.reset();
  if (placed) next_waiting(event.node);
  return true;
}

void World::run_until(TimePoint t) {
  for (;;) {
    const std::deque<Deadline>* deadlines = next_deadlines();
    const bool due = (!queue_.empty() && queue_.front().at <= t) ||
                     (deadlines != nullptr && deadlines->front().at <= t);
    if (!due) break;
    step();
  }
  now_ = std::max(now_, t);
}

void World::run_for(Duration d) { run_until(now_ + d); }

void World::hash(const Event& event) {
  trace_.add_u64(static_cast<std::uint64_t>(event.at.count()));
  trace_.add_u64(event.seq);
  trace_.add_u64(static_cast<std::uint64_t>(event.kind));
  trace_.add_u64(event.node);
  trace_.add_u64(event.peer);
  trace_.add_u64(event.call);
  trace_.add_u64(event.serial);
  trace_.add_u64(event.timer);
  trace_.add_u64(event.generation);
  trace_.add_string(event.handle);
  if (event.payload.ok()) {
    trace_.add_u64(0);
    trace_.add_string(event.payload.value());
  } else {
    trace_.add_u64(static_cast<std::uint64_t>(event.payload.error().code));
    trace_.add_string(event.payload.error().message);
  }
  // Only streaming events fold their flags, so runs of unary calls keep their hashes.
  if (event.stream) {
    trace_.add_u64(event.last ? 3 : 1);
    trace_.add_u64(static_cast<std::uint64_t>(event.timeout.count()));
  }
}

void World::anomaly(Error error) { anomalies_.push_back(std::move(error)); }

void World::process(Event& event) {
  if (event.kind == EventKind::action) {
    if (event.action) event.action(*this);
    return;
  }
  Node& node = nodes_[event.node];
  switch (event.kind) {
    case EventKind::start:
      if (node.state != NodeState::added) {
        anomaly(make_error(errc::invalid_argument,
                           "expected to start a fresh node, got '{}' already started or killed;"
                           " start each node once", node.addr));
        return;
      }
      node.state = NodeState::running;
      execute(event.node, in_host([&] { return node.host->on_start(now_); }));
      return;
    case EventKind::kill: {
      // A crash: everything the node was waiting for is forgotten.
      if (node.state == NodeState::dead) return;
      node.state = NodeState::dead;
      node.incarnation += 1;
      node.busy_until = now_;
      share_drop(event.node);
      // What waited for it now finds it dead, in the order it came.
      node.front = 0;
      while (!node.waiting.empty()) {
        push(std::move(node.waiting.front()), true);
        node.waiting.pop_front();
      }
      node.timers.clear();
      node.calls.clear();
      node.inbound.clear();
      node.streams.clear();
      node.ended.clear();
      if (peer_down_after_) {
        const PeerAddr victim = node.addr;
        schedule(now_ + *peer_down_after_, [victim](World& w) {
          for (std::size_t i = 0; i < w.nodes_.size(); ++i) {
            if (w.nodes_[i].state != NodeState::running || w.nodes_[i].addr == victim) continue;
            w.execute(i, w.in_host([&] { return w.nodes_[i].host->on_peer_down(w.now_, victim); }));
          }
        });
      }
      return;
    }
    case EventKind::timer: {
      if (node.state != NodeState::running) return;
      auto it = node.timers.find(event.timer);
      if (it == node.timers.end() || it->second != event.generation) return;  // re-armed or cancelled
      node.timers.erase(it);
      execute(event.node, in_host([&] { return node.host->on_timer(now_, event.timer); }));
      return;
    }
    case EventKind::deadline: {
      if (node.state != NodeState::running) return;
      auto it = node.calls.find(event.call);
      if (it == node.calls.end() || it->second.serial != event.serial) return;  // answered
      const PendingCall call = it->second;
      node.calls.erase(it);
      stats_.timeouts += 1;
      if (call.stream) cancel_stream_on_deadline(event.node, event, call);
      Error none = make_error(errc::deadline_exceeded,
                              "expected a reply from '{}' within the call's timeout, got none by {} ns; the peer "
                              "may be down or the link lossy",
                              nodes_[event.peer].addr, now_.count());
      execute(event.node, in_host([&] { return node.host->on_response(now_, event.call, std::move(none)); }));
      return;
    }
    case EventKind::request:
      deliver_request(event);
      return;
    case EventKind::response:
      deliver_response(event);
      return;
    case EventKind::call_message:
      deliver_call_message(event);
      return;
    case EventKind::reply_message:
      deliver_reply_message(event);
      return;
    case EventKind::request_deadline:
      expire_request(event);
      return;
    case EventKind::action:
      return;
  }
}

}  // namespace apiary::sim
