#pragma once
/// The deterministic simulated world: a virtual clock starting at 0, one seeded Rng, an
/// event queue ordered by (time, seq), the network model, and the nodes' Hosts. The
/// World executes the effects hosts return: a Call is delivered after the link's delay
/// to the callee's on_request; its Reply travels back to the caller's on_response; a
/// call with no answer by its timeout gets errc::deadline_exceeded. Streaming calls
/// (Call::stream) carry Send, Reply{last = false} and Cancel as messages over the same
/// links, in order per call and direction (world_streams.cpp). Nothing the World decides
/// reads a real clock (time_hosts() only measures the hosts' handlers), so a seed replays
/// exactly, and trace_hash() proves it.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/effects.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/event.hpp"
#include "sim/host.hpp"
#include "sim/network.hpp"
#include "sim/rng.hpp"
#include "sim/trace_hash.hpp"

namespace apiary::sim {

/// Counters over a run, for checkers and summaries.
struct WorldStats {
  std::uint64_t events = 0;          ///< events popped from the queue
  std::uint64_t calls = 0;           ///< Call effects executed
  std::uint64_t requests = 0;        ///< requests handed to a live callee
  std::uint64_t responses = 0;       ///< replies handed to a waiting caller
  std::uint64_t timeouts = 0;        ///< calls failed with deadline_exceeded
  std::uint64_t lost = 0;            ///< messages dropped by link loss
  std::uint64_t to_dead = 0;         ///< messages that reached a killed node and vanished
  std::uint64_t late = 0;            ///< replies that came after their call had timed out
  std::uint64_t stream_messages = 0;  ///< stream messages and ends handed to a host
  std::uint64_t cancels = 0;          ///< Cancel effects executed on calls in flight
  std::uint64_t bytes = 0;            ///< payload bytes put on links (requests, answers, stream messages)
};

/// The processor time one event takes a node: `before` its effects leave (the work that
/// makes them: reading the request, answering it), and `after` (work the event starts
/// that nothing it sends waits for: a replica's next training step after it answered or
/// sent what its last step owed). The node and its core are busy for both.
/// `aside` is work of the node's process on other threads that neither the node nor its
/// effects wait for (its threads woken, and their polls before they sleep again): it
/// holds the machine's earliest free core, not the node.
struct CpuCharge {
  Duration before{};
  Duration after{};
  Duration aside{};
  CpuCharge() = default;
  CpuCharge(Duration b) : before(b) {}  // NOLINT: a plain duration is all `before`
  CpuCharge(Duration b, Duration a, Duration s = Duration::zero()) : before(b), after(a), aside(s) {}
};

/// What handling one event costs a node in processor time: `in` is the event (its
/// payload the bytes received), `out` what the node did about it (the bytes it sends).
/// Must be a pure function of its arguments and of what the scenario's hosts hold, so a
/// seed replays.
using CpuCost = std::function<CpuCharge(const Event& in, const core::Effects& out)>;

/// How a machine's nodes share its cores (add_machine()).
enum class CoreSharing {
  /// Each event runs to its end on one core, the earliest free; an event waits while
  /// every core is busy.
  whole_events,
  /// As an operating system's scheduler shares them in time slices: every node with work
  /// runs at once, each at cores / (work items running) of a core, at most one (a node's
  /// event, an aside charge: each an item); nothing waits for a core.
  time_slices,
};

/// A simulated world. Not copyable; pass it by reference (there are no globals).
class World {
 public:
  /// A world whose every random draw comes from `seed`.
  explicit World(std::uint64_t seed);
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  /// The seed this world was made with.
  [[nodiscard]] std::uint64_t seed() const { return seed_; }
  /// A 64-bit hash over every event processed so far; same seed and setup, same hash.
  [[nodiscard]] std::uint64_t trace_hash() const { return trace_.value(); }
  /// Virtual time now (ns since the start of the run).
  [[nodiscard]] TimePoint now() const { return now_; }
  /// The world's one random generator (for scenarios and fault injectors).
  [[nodiscard]] Rng& rng() { return rng_; }
  /// The network model; change links at any time.
  [[nodiscard]] Network& network() { return network_; }
  /// Counters so far.
  [[nodiscard]] const WorldStats& stats() const { return stats_; }
  /// Host misbehaviour seen so far (reply to an unknown request, reused call id, ...),
  /// one Error each; empty in a correct run.
  [[nodiscard]] const std::vector<Error>& anomalies() const { return anomalies_; }
  /// From now on, times every call into a host on the wall clock (host_wall()); off by
  /// default. A measurement only: nothing the World does depends on it, so trace hashes
  /// stay as they are. For `apiary sim calibrate`, whose jobs run in this process and
  /// want the roles' own work (what a real process does) without the World's (joining
  /// spliced messages, hashing and moving payloads).
  void time_hosts(bool on) { time_hosts_ = on; }
  /// Wall time spent in the hosts' handlers while time_hosts() was on.
  [[nodiscard]] Duration host_wall() const { return host_wall_; }
  /// "seed=42 trace_hash=0x... now_ns=... events=..." for logs and test output.
  [[nodiscard]] std::string summary() const;

  /// Adds node `addr` run by `host`, not yet started. Errors: empty or taken address.
  [[nodiscard]] Result<Host*> add_node(const PeerAddr& addr, std::unique_ptr<Host> host);
  /// Schedules `addr`'s Host::on_start at `at` (clamped to now). Error: unknown node.
  [[nodiscard]] Status start_node(const PeerAddr& addr, TimePoint at);
  /// Schedules a crash of `addr` at `at` (clamped to now): from then its timers and
  /// calls are forgotten and messages to it vanish, so calls to it time out.
  [[nodiscard]] Status kill_node(const PeerAddr& addr, TimePoint at);
  /// Schedules a restart of `addr` at `at` (clamped to now): a running node crashes
  /// first; then `fresh` (the node's state after a restart: nothing survives a crash
  /// unless the host brings it back) replaces its host and starts. Errors: unknown node,
  /// no host.
  [[nodiscard]] Status restart_node(const PeerAddr& addr, TimePoint at, std::unique_ptr<Host> fresh);

  /// Adds a machine of `cores` processors (>= 1) named `name`, for place(), its nodes
  /// sharing them as `sharing` says. Errors: invalid_argument (no cores, a name taken).
  [[nodiscard]] Status add_machine(const std::string& name, std::size_t cores,
                                   CoreSharing sharing = CoreSharing::whole_events);
  /// Runs node `addr` on machine `machine`, each event it handles costing `cost`: the
  /// node handles one event at a time, in the order events came, on the machine's cores,
  /// which its nodes share as the machine's CoreSharing says (whole events: each on one
  /// core, waiting for a free one; time slices: alongside everything else running);
  /// what the node does about an event (its calls, replies, timers) leaves once the
  /// event's cost before them (CpuCharge::before) has been served, and the node stays
  /// busy for the rest (CpuCharge::after). A node placed nowhere costs nothing (the
  /// default). Errors: unknown node or machine, no cost function.
  [[nodiscard]] Status place(const PeerAddr& addr, const std::string& machine, CpuCost cost);
  /// Node `addr`'s process also spends `per_second` of processor time a second while it
  /// runs, whatever it does (its threads' timed polls): charged every k_idle_tick to the
  /// node and to its machine as work aside (it occupies a core or a time slice, not the node).
  /// Errors: unknown or unplaced node, a negative load.
  [[nodiscard]] Status set_idle_load(const PeerAddr& addr, Duration per_second);
  /// Nodes `a` and `b` are roles of one process (a node proxy on its replica's gateway):
  /// the messages between them never cross the transport, which their events say
  /// (Event::local) and stays_in_process() tells of what a node sends. Errors: unknown node.
  [[nodiscard]] Status share_process(const PeerAddr& a, const PeerAddr& b);
  /// True when `effect`, made by the node handling `event` (a Call, a stream Send or a
  /// Reply), goes to a node of the same process; false for other effects and unknown peers.
  [[nodiscard]] bool stays_in_process(const Event& event, const core::Effect& effect) const;
  /// Processor time machine `name` has spent so far (0 for an unknown name).
  [[nodiscard]] Duration busy_time(const std::string& name) const;
  /// Processor time node `addr` has been charged so far (0 for an unknown or unplaced node).
  [[nodiscard]] Duration node_busy_time(const PeerAddr& addr) const;

  /// A failure detector: `after` a node is killed, every running node hears
  /// Host::on_peer_down for it (as a transport's error mode or keepalives would tell it).
  /// nullopt (the default) turns it off.
  void set_peer_down_detection(std::optional<Duration> after) { peer_down_after_ = after; }

  /// True when `addr` was started and not killed.
  [[nodiscard]] bool running(const PeerAddr& addr) const;
  /// True when `addr` was killed.
  [[nodiscard]] bool killed(const PeerAddr& addr) const;
  /// Every node's address, in the order they were added.
  [[nodiscard]] std::vector<PeerAddr> nodes() const;
  /// The Host of `addr`, or nullptr.
  [[nodiscard]] Host* host(const PeerAddr& addr) const;

  /// Executes `effects` now on behalf of running node `addr` (for inputs from outside
  /// the protocol, e.g. a local API call made by a scenario). Error: node not running.
  [[nodiscard]] Status submit(const PeerAddr& addr, core::Effects effects);
  /// Runs `action` at `at` (clamped to now), e.g. a workload step or a fault.
  void schedule(TimePoint at, std::function<void(World&)> action);

  /// Processes the earliest event; false when the queue is empty.
  bool step();
  /// Processes every event due at or before `t`, then sets the clock to `t` (if later).
  void run_until(TimePoint t);
  /// run_until(now() + d).
  void run_for(Duration d);
  /// Events waiting in the queue (stale ones included).
  [[nodiscard]] std::size_t queued() const;

 private:
  enum class NodeState { added, running, dead };
  /// PendingCall::callee of a call refused at once (no node at the address).
  static constexpr std::size_t k_no_node = static_cast<std::size_t>(-1);
  struct PendingCall {
    std::uint64_t serial = 0;  ///< world-unique id of this call
    bool stream = false;       ///< a streaming call
    bool local_end = true;     ///< stream: the caller's direction has ended
    std::size_t callee = k_no_node;  ///< stream: the callee's index
    TimePoint fifo{};          ///< stream: arrival of the latest caller -> callee message
  };
  struct InboundRequest {
    std::size_t caller = 0;
    core::CallId call = 0;
    std::uint64_t serial = 0;
    bool stream = false;  ///< a streaming call's request
    TimePoint fifo{};     ///< stream: arrival of the latest callee -> caller message
  };
  struct Node {
    PeerAddr addr;
    std::unique_ptr<Host> host;
    NodeState state = NodeState::added;
    std::map<core::TimerId, std::uint64_t> timers;     ///< armed timer -> its generation
    std::map<core::CallId, PendingCall> calls;         ///< calls awaiting an outcome
    std::map<core::RequestId, InboundRequest> inbound;  ///< requests awaiting a Reply
    std::map<std::uint64_t, core::RequestId> streams;   ///< open streaming request by call serial
    std::set<core::RequestId> ended;  ///< streaming requests the caller ended (Reply ignored)
    std::optional<std::size_t> machine;  ///< place(): index in machines_
    CpuCost cost;                        ///< place(): what each event costs it
    TimePoint busy_until{};              ///< it handles its next event from then
    Duration busy{};                     ///< processor time charged to it
    Duration idle_load{};                ///< set_idle_load(): processor time a second whatever it does
    std::size_t process = 0;             ///< share_process(): its process's id, 0 for one of its own
    std::uint64_t incarnation = 0;       ///< grows with each crash: its delayed effects are then dropped
    /// Events waiting for it (placed nodes) while it or its machine is busy: the first in
    /// the queue (seq `front`, 0 for none), the others here in the order they came, so
    /// that each goes back to the queue once, not once each time any of them is handled.
    std::uint64_t front = 0;
    std::deque<Event> waiting;
    /// CoreSharing::time_slices: the node is working on an event (its events wait
    /// untimed in `waiting` until it is done), that work's item, and the event's work
    /// after its effects left (CpuCharge::after), still to come.
    bool working = false;
    std::uint64_t job = 0;
    Duration after{};
  };
  /// Work running on a time-sliced machine: done when the service every running item
  /// has had (Machine::served) reaches `tag`; then `done` runs (none for aside work).
  struct Job {
    std::uint64_t id = 0;
    double tag = 0;
    std::size_t node = 0;
    std::function<void(World&)> done;
  };
  /// A machine's processors (place()).
  struct Machine {
    std::string name;
    std::vector<TimePoint> cores;  ///< when each core is free again (whole_events)
    Duration busy{};               ///< processor time spent
    CoreSharing sharing = CoreSharing::whole_events;
    /// time_slices: the items running, the service (ns of one core's work) each has had
    /// since the machine began, as of `served_at`, and the generation of the queued check
    /// for the next item done (an older one finds it changed and does nothing).
    std::vector<Job> jobs;
    double served = 0;
    TimePoint served_at{};
    std::uint64_t generation = 0;
  };
  /// When `event` can be handled: now, or later when its node or every core of its
  /// machine is busy (nullopt: now).
  [[nodiscard]] std::optional<TimePoint> cpu_ready(const Event& event) const;

  /// Queues `event` (returns its seq); one that waited for its busy node (`waited`) keeps
  /// when it came.
  std::uint64_t push(Event event, bool waited = false);
  /// `event` waits for its busy node or machine until `ready`: as the node's first waiting
  /// event in the queue, or behind it.
  void wait_for_node(Event event, TimePoint ready);
  /// Queues the next event waiting for `node`, once none is queued (after each event the node handles).
  void next_waiting(std::size_t node);
  void hash(const Event& event);
  void process(Event& event);
  void execute(std::size_t node, core::Effects effects);
  void execute_call(std::size_t node, core::Call call);
  void execute_reply(std::size_t node, core::Reply reply);
  void send_response(std::size_t from, std::size_t to, core::CallId call, std::uint64_t serial,
                     Result<std::string> payload);
  /// True, counted in stats().to_dead, when `event` goes to a crashed node: it hears nothing.
  bool lost_to_dead(const Event& event);
  void deliver_request(Event& event);
  void deliver_response(Event& event);
  // Streaming calls (world_streams.cpp).
  void execute_send(std::size_t node, core::Send send);
  void execute_cancel(std::size_t node, core::Cancel cancel);
  void execute_stream_reply(std::size_t node, core::RequestId id, InboundRequest& inbound,
                            core::Reply reply);
  void open_stream_request(Event& event, core::RequestId id);
  void send_stream(EventKind kind, std::size_t from, std::size_t to, core::CallId call,
                   std::uint64_t serial, Result<std::string> payload, bool last, TimePoint& fifo);
  void deliver_call_message(Event& event);
  void deliver_reply_message(Event& event);
  void expire_request(Event& event);
  void cancel_stream_on_deadline(std::size_t node, const Event& deadline, const PendingCall& call);
  void end_stream_request(Node& callee, core::RequestId id);
  void anomaly(Error error);
  [[nodiscard]] Result<std::size_t> index_of(const PeerAddr& addr) const;
  /// Queues a node event (start, kill) for `addr` at `at`.
  [[nodiscard]] Status schedule(const PeerAddr& addr, TimePoint at, EventKind kind);

  std::uint64_t seed_;
  Rng rng_;
  Network network_;
  TraceHash trace_;
  WorldStats stats_;
  std::vector<Error> anomalies_;
  TimePoint now_{};
  std::uint64_t next_seq_ = 0;
  std::uint64_t next_serial_ = 0;
  core::RequestId next_request_ = 1;
  /// The queue: a min-heap of (at, arrived, seq, slot) over events parked in `slots_`, so
  /// that ordering moves 32 bytes, not whole events. `arrived` puts what has waited longer
  /// first among events due at one time, across nodes too (who gets a freed core first).
  struct Due {
    TimePoint at{};
    TimePoint arrived{};
    std::uint64_t seq = 0;
    std::size_t slot = 0;
    /// Heap order: true when `a` is due after `b` (the earliest stays in front).
    friend bool operator<(const Due& a, const Due& b) {
      if (a.at != b.at) return a.at > b.at;
      return a.arrived != b.arrived ? a.arrived > b.arrived : a.seq > b.seq;
    }
  };
  std::vector<Due> queue_;
  /// Call deadlines, kept apart from the heap: a call's deadline outlives its answer by
  /// most of the timeout, so they would be most of the heap. Per timeout a FIFO, which
  /// (at = now + timeout, seq growing) is already in (at, seq) order; step() takes
  /// whichever of the heap's front and the FIFOs' fronts is due first, so events run in
  /// exactly the order one queue would give. A timeout met while k_deadline_fifos others
  /// have deadlines queued goes to the heap.
  struct Deadline {
    TimePoint at{};
    std::uint64_t seq = 0;
    std::size_t node = 0;
    std::size_t peer = 0;
    core::CallId call = 0;
    std::uint64_t serial = 0;
  };
  std::map<Duration, std::deque<Deadline>> deadlines_;
  /// Most FIFOs at once; deadlines of other timeouts go to the heap (same order).
  static constexpr std::size_t k_deadline_fifos = 4;
  /// Queues the deadline of `node`'s call `call` (serial `serial`, to `peer`) `timeout` from now.
  void push_deadline(Duration timeout, std::size_t node, std::size_t peer, core::CallId call, std::uint64_t serial);
  /// The FIFO whose front is due first, or nullptr when every FIFO is empty.
  [[nodiscard]] std::deque<Deadline>* next_deadlines();
  std::vector<Event> slots_;
  std::vector<std::size_t> free_slots_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<PeerAddr, std::size_t, std::hash<PeerAddr>> by_addr_;
  std::optional<Duration> peer_down_after_;
  std::vector<Machine> machines_;
  /// set_idle_load(): how often the idle loads are charged, and whether a charge is queued.
  static constexpr Duration k_idle_tick = std::chrono::milliseconds(10);
  std::size_t next_process_ = 1;  ///< share_process(): the next process id
  /// True when nodes `a` and `b` (indices) are roles of one process (share_process).
  [[nodiscard]] bool same_process(std::size_t a, std::size_t b) const;
  bool time_hosts_ = false;  ///< time_hosts()
  Duration host_wall_{};     ///< host_wall()
  /// `call()`, a call into a host; with time_hosts() on, its wall time goes to host_wall_.
  template <class F>
  core::Effects in_host(F&& call) {
    if (!time_hosts_) return call();
    const auto begin = std::chrono::steady_clock::now();
    core::Effects effects = call();
    host_wall_ += std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - begin);
    return effects;
  }
  bool idle_loads_ = false;    ///< some node has one
  bool idle_ticking_ = false;  ///< the next charge is queued
  /// Spends `work` of node `n`'s process on its machine's earliest free core (from now,
  /// or once that core is free), not holding the node (CpuCharge::aside, idle loads).
  void charge_aside(Node& n, Duration work);
  /// time_slices: a work item of `work` for node `node` on machine `m`, `done` run when
  /// it is finished (returns its id); an item's work grown by `more` (the same event's
  /// later effects); service brought up to now; the check for the next item done queued
  /// again; the items done by now finished; a killed node's items dropped.
  std::uint64_t share_add(std::size_t m, std::size_t node, Duration work, std::function<void(World&)> done);
  void share_grow(std::size_t m, std::uint64_t job, Duration more);
  [[nodiscard]] static double share_rate(const Machine& m);  ///< each item's share of a core (items running)
  void share_advance(Machine& m);
  void share_reschedule(std::size_t m);
  void share_complete(std::size_t m, std::uint64_t generation);
  void share_drop(std::size_t node);
  /// time_slices: node `node`'s event's effects leave (`held`), then its work after them
  /// runs, then the node is free for its next event; nothing for a later incarnation.
  void share_effects_done(std::size_t node, std::uint64_t incarnation, const std::shared_ptr<core::Effects>& held);
  void share_node_free(std::size_t node, std::uint64_t incarnation);
  [[nodiscard]] bool time_sliced(std::size_t node) const {
    return nodes_[node].machine && machines_[*nodes_[node].machine].sharing == CoreSharing::time_slices;
  }
  std::uint64_t next_job_ = 1;
  /// Queues the next charge of the idle loads, k_idle_tick from now (once).
  void arm_idle_tick();
  /// Charges every running node's idle load for the last k_idle_tick, and queues the
  /// next charge while anything else is queued.
  void charge_idle_loads();
  const Event* handling_ = nullptr;  ///< the event being processed (its node's effects are charged)
  std::shared_ptr<core::Effects> handled_;  ///< its node's effects, leaving once its cost has passed
};

}  // namespace apiary::sim
