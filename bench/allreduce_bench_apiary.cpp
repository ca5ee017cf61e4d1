// apiary's rank of `apiary bench allreduce`: the driver actor around AllReduceRunner.
#include "bench/allreduce_bench_apiary.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/device/device_actor.hpp"
#include "actors/effects_executor.hpp"
#include "actors/type_ids.hpp"
#include "bench/allreduce_bench_timers.hpp"
#include "bench/allreduce_workload.hpp"
#include "bench/transport_bench_apiary.hpp"
#include "core/averaging/allreduce.hpp"

namespace apiary::bench {
namespace {

namespace wl = allreduce_workload;
namespace av = core::averaging;
using Clock = std::chrono::steady_clock;
using Figures = std::vector<wl::RankFigure>;

/// Tells the driver that every rank serves its handles: start the first op.
using go_atom = caf::atom_constant<caf::atom("go")>;

/// Call and timer ids of op `seq` start at (seq + 1) << k_id_shift: a runner uses
/// 2 + 2 * group size ids, so 16 bits leave room for any group here.
constexpr int k_id_shift = 16;

/// The part-stream handle of op `seq`. Two ops alternate, so that the streams of the
/// next op (a faster rank may open them before this rank finished the current one) are
/// told apart without parsing them.
std::string handle_of(std::size_t seq) {
  return fmt::format("bench{}::{}", seq % 2, av::k_aggregate_part_handle);
}

struct driver_state {
  AllReduceRankOptions opt;
  std::vector<core::PeerAddr> peers;                      ///< multiaddr per rank
  std::unordered_map<std::string, core::PeerAddr> addr_of;  ///< "host:port" -> multiaddr
  std::unique_ptr<actors::EffectExecutor> fx;
  std::size_t size_index = 0;  ///< index into opt.sizes
  std::size_t op = 0;          ///< within the size: 0 checked, then warm-up, then timed
  std::size_t seq = 0;         ///< ops run so far, every size
  std::string handle;          ///< handle_of(seq)
  std::vector<float> tensor;
  std::optional<av::AllReduceRunner> runner;
  std::vector<actors::Delivery> held;               ///< deliveries of the next op's streams
  std::unordered_set<actors::CallId> held_calls;    ///< their calls
  bool checked_ok = false;
  Clock::time_point t0;
  wl::Switches s0;
  Figures figures;
  std::shared_ptr<std::promise<Result<Figures>>> done;
  DeadlineSet deadlines;  ///< the runner's timers with --one-timer
  std::optional<actors::device_actor> device;  ///< --device-reductions
};
using driver = caf::stateful_actor<driver_state>;

/// Ends the run with `r`; on an error, the sizes finished before it are printed first.
void finish(driver* self, Result<Figures> r) {
  auto& st = self->state;
  if (!st.done) return;
  if (!r)
    for (const auto& f : st.figures) wl::print_figure(f);
  st.done->set_value(std::move(r));
  st.done.reset();
  st.runner.reset();
  if (st.device) self->send_exit(*st.device, caf::exit_reason::user_shutdown);
}

void advance(driver* self);

/// Asks CAF for the wake-up of `at` (--one-timer).
void schedule_wake(driver* self, core::TimePoint at) {
  const auto delay = std::max(core::Duration::zero(), at - actors::core_now());
  self->delayed_send(self, delay, actors::timer_atom::value, self->state.deadlines.generation());
}

/// Keeps the runner's timers in st.deadlines instead of the executor (--one-timer).
void take_timers(driver* self, core::Effects& effects) {
  core::Effects rest;
  rest.reserve(effects.size());
  for (auto& e : effects) {
    if (auto* set = std::get_if<core::SetTimer>(&e)) {
      if (auto wake = self->state.deadlines.arm(set->id, set->at)) schedule_wake(self, *wake);
    } else if (auto* cancel = std::get_if<core::CancelTimer>(&e)) {
      self->state.deadlines.disarm(cancel->id);
    } else {
      rest.push_back(std::move(e));
    }
  }
  effects = std::move(rest);
}

/// Executes effects; calls that fail on the spot go straight back to the runner.
void run(driver* self, core::Effects effects) {
  auto& st = self->state;
  if (st.opt.one_timer) take_timers(self, effects);
  if (!st.opt.timers) {
    effects.erase(std::remove_if(effects.begin(), effects.end(),
                                 [](const core::Effect& e) {
                                   return std::holds_alternative<core::SetTimer>(e) ||
                                          std::holds_alternative<core::CancelTimer>(e);
                                 }),
                  effects.end());
  }
  for (auto& r : st.fx->execute(std::move(effects))) run(self, st.runner->on_response(actors::core_now(), r.call, r.result));
  if (!st.device || !st.runner) return;
  // --device-reductions: each settled part goes to the device actor; its answer comes back
  // to the runner of the same op.
  for (auto& job : st.runner->take_reduce_jobs()) {
    const std::uint64_t id = job.id;
    const std::size_t seq = st.seq;
    self->request(*st.device, caf::infinite, actors::reduce_part_request{std::move(job)})
        .then(
            [self, id, seq](Result<av::ReducedPart>& r) {
              auto& s = self->state;
              if (!s.runner || s.seq != seq) return;
              run(self, s.runner->on_reduced(actors::core_now(), id, std::move(r)));
              advance(self);
            },
            [self](caf::error& e) {
              finish(self, make_error(errc::internal, "the device actor failed a part reduction: {}",
                                      self->system().render(e)));
            });
  }
}

/// Appends `more` to `fx`.
void append(core::Effects& fx, core::Effects more) {
  for (auto& e : more) fx.push_back(std::move(e));
}

/// Feeds one delivery to the runner, in the order effects_executor.hpp asks for. The
/// effects of the (up to two) inputs one delivery holds run as one batch, so that a
/// reducer's last answer and its end of stream go out as one frame (the executor folds
/// them, actors::fold_stream_ends); the
/// runner ignores an input for a stream its own earlier answer closed.
void feed(driver* self, actors::Delivery& d) {
  auto& st = self->state;
  auto& fx = *st.fx;
  core::Effects batch;
  if (auto req = fx.request_view_of(d)) {
    auto from = st.addr_of.find(d.peer_listen_addr);
    const core::PeerAddr name = from == st.addr_of.end() ? core::PeerAddr{} : from->second;
    append(batch, st.runner->on_request(actors::core_now(), req->id, name, std::move(req->body)));
  }
  if (auto m = fx.request_message_view_of(d))
    append(batch, st.runner->on_request_message(actors::core_now(), m->request, std::move(m->message), m->last));
  if (auto m = fx.message_view_of(d))
    append(batch, st.runner->on_message(actors::core_now(), m->call, m->message.view(), m->landed));
  if (auto r = fx.response_of(d)) append(batch, st.runner->on_response(actors::core_now(), r->call, r->result));
  run(self, std::move(batch));
}

/// Holds a delivery that belongs to the next op (or arrives before the first); true if held.
bool hold_if_early(driver* self, actors::Delivery& d) {
  auto& st = self->state;
  const bool opens_other = d.kind == actors::DeliveryKind::open && d.handle != st.handle;
  if (!st.runner || opens_other || st.held_calls.count(d.call) > 0) {
    st.held_calls.insert(d.call);
    st.held.push_back(std::move(d));
    return true;
  }
  return false;
}

void start_op(driver* self) {
  auto& st = self->state;
  const std::size_t bytes = st.opt.sizes[st.size_index];
  const std::size_t iters = wl::iters_for(bytes, st.opt.quick);
  if (st.op == 0) {
    st.tensor.assign(bytes / sizeof(float), 0.0f);
    wl::fill_inputs(st.tensor, st.opt.rank);
  }
  if (st.op == 1 + wl::warmup_for(iters)) {
    st.s0 = wl::switches_now();
    st.t0 = Clock::now();
  }
  av::AllReduceConfig c;
  c.group_id = fmt::format("bench-{}", st.seq);
  c.peers = st.peers;
  c.self = st.opt.rank;
  c.modes.assign(st.peers.size(), av::AveragingMode::node);
  c.tensor_sizes = {static_cast<std::int64_t>(st.tensor.size())};
  c.peer_fractions.assign(st.peers.size(), 1.0);
  c.part_size_bytes = st.opt.part_size_bytes;
  // Generous: a loaded 2-core machine must not turn into a fault-tolerance test.
  c.sender_timeout = std::chrono::seconds(30);
  c.reducer_timeout = std::chrono::seconds(60);
  c.call_timeout = std::chrono::seconds(120);
  c.handle = st.handle = handle_of(st.seq);
  c.id_base = static_cast<std::uint64_t>(st.seq + 1) << k_id_shift;
  c.deferred_reductions = st.device.has_value();
  // As MPI_Allreduce in place: the buffer goes to the runner and comes back averaged.
  c.averages_in_place = true;
  c.splice_parts = true;  // parts leave as views of the tensors (the gateway sends the pieces)
  // Answers carry the averages, copied into place: every replica holds the same bits.
  c.answer_averages = true;
  std::vector<std::vector<float>> tensors;
  tensors.push_back(std::move(st.tensor));
  auto runner = av::AllReduceRunner::create(std::move(c), std::move(tensors));
  if (!runner) return finish(self, runner.error());
  st.runner.emplace(std::move(*runner));
  run(self, st.runner->start(actors::core_now()));
  // Streams of this op that arrived early, in arrival order.
  auto held = std::move(st.held);
  st.held.clear();
  st.held_calls.clear();
  for (auto& d : held)
    if (!hold_if_early(self, d)) feed(self, d);
}

/// Applies the finished op, records figures, and starts the next one.
void finish_op(driver* self) {
  auto& st = self->state;
  auto out = st.runner->take_outcome();
  if (!out.status || !out.failed_senders.empty() || !out.failed_reducers.empty()) {
    return finish(self, make_error(errc::internal, "op {} ({} B): expected every peer to take part, got "
                                   "status '{}', {} failed senders, {} failed reducers (a stream that stalled or ended early: "
                                   "an overloaded machine?)",
                                   st.seq, st.opt.sizes[st.size_index], out.status ? "ok" : out.status.error().message,
                                   out.failed_senders.size(), out.failed_reducers.size()));
  }
  st.tensor = std::move(out.averages.at(0));
  const std::size_t n = st.peers.size();
  const auto is_mean = [&] {
    return wl::first_mismatch(st.tensor, [&](std::size_t j) { return wl::expected_mean(n, j); }) == st.tensor.size();
  };
  const std::size_t bytes = st.opt.sizes[st.size_index];
  const std::size_t iters = wl::iters_for(bytes, st.opt.quick);
  if (st.op == 0) st.checked_ok = is_mean();
  ++st.seq;
  st.runner.reset();
  if (st.op == wl::warmup_for(iters) + iters) {
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - st.t0).count();
    const auto s1 = wl::switches_now();
    wl::RankFigure f;
    f.system = "apiary-" + st.opt.mode;
    f.rank = st.opt.rank;
    f.ranks = n;
    f.bytes = bytes;
    f.iters = iters;
    f.us_per_op = us / static_cast<double>(iters);
    f.set_counters(st.s0, s1);
    f.ok = st.checked_ok && is_mean();  // averaging equal tensors keeps them equal
    st.figures.push_back(f);
    st.op = 0;
    if (++st.size_index == st.opt.sizes.size()) return finish(self, st.figures);
  } else {
    ++st.op;
  }
  start_op(self);
}

/// Finishes every op the inputs so far completed.
void advance(driver* self) {
  while (self->state.runner && self->state.runner->finished()) finish_op(self);
}

caf::behavior driver_actor(driver* self, std::shared_ptr<actors::Gateway> gw, AllReduceRankOptions opt,
                           std::shared_ptr<std::promise<Result<Figures>>> done) {
  auto& st = self->state;
  for (const int port : opt.ports) {
    st.peers.push_back(core::PeerAddr(messages::Multiaddr{"127.0.0.1", false, static_cast<std::uint16_t>(port), {}, {}}));
    st.addr_of.emplace(fmt::format("127.0.0.1:{}", port), st.peers.back());
  }
  st.opt = std::move(opt);
  st.fx = std::make_unique<actors::EffectExecutor>(self, std::move(gw));
  if (st.opt.device_reductions) st.device = actors::spawn_device_actor(self->system());
  st.done = std::move(done);
  st.handle = handle_of(0);
  return {
      [self](go_atom) {
        start_op(self);
        advance(self);
      },
      [self](actors::Delivery& d) {
        if (!self->state.done || hold_if_early(self, d)) return;
        feed(self, d);
        advance(self);
      },
      [self](actors::timer_atom, std::uint64_t generation) {  // --one-timer
        auto& st = self->state;
        const auto now = actors::core_now();
        for (const auto id : st.deadlines.fired(generation, now))
          if (st.runner) run(self, st.runner->on_timer(now, id));
        if (auto wake = st.deadlines.next_wake()) schedule_wake(self, *wake);
        advance(self);
      },
      [self](actors::timer_atom, core::TimerId id, std::uint64_t generation) {
        auto& st = self->state;
        if (!st.runner || !st.fx->timer_is_current(id, generation)) return;
        run(self, st.runner->on_timer(actors::core_now(), id));
        advance(self);
      },
  };
}

/// Writes `<dir>/<name>.<rank>` and waits until every rank wrote its own.
Status meet(const AllReduceRankOptions& o, const std::string& name) {
  const auto file = [&](std::size_t r) { return fmt::format("{}/{}.{}", o.barrier_dir, name, r); };
  if (!std::ofstream(file(o.rank)))
    return make_error(errc::io, "cannot write {}; expected a writable directory shared by the ranks", file(o.rank));
  const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  for (std::size_t r = 0; r < o.ports.size(); ++r) {
    while (!std::ifstream(file(r))) {
      if (Clock::now() > deadline)
        return make_error(errc::deadline_exceeded, "rank {} did not reach '{}' within {} s; did it fail to start?", r,
                          name, o.timeout_s);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  return ok_status();
}

/// Starts the gateway and the driver, meets the other ranks, runs every size.
Result<Figures> run_rank(const AllReduceRankOptions& o) {
  caf::actor_system_config cfg;
  transport_bench::apply_caf_config(cfg);
  caf::actor_system sys{cfg};
  actors::GatewayConfig gc;
  gc.transport.mode = o.mode == "shm" ? transport::Mode::shm : transport::Mode::tcp;
  // Plaintext, as the peers it is measured beside run (`apiary bench transport --secure`
  // measures what encryption costs).
  gc.transport.insecure = true;
  gc.port = static_cast<std::uint16_t>(o.ports[o.rank]);
  gc.transport.busy_poll = std::chrono::microseconds(o.busy_poll_us);
  auto gw = actors::Gateway::start(sys, gc);
  if (!gw) return gw.error();
  auto done = std::make_shared<std::promise<Result<Figures>>>();
  auto result = done->get_future();
  auto a = sys.spawn(driver_actor, *gw, o, done);
  for (std::size_t seq = 0; seq < 2; ++seq) (*gw)->serve(handle_of(seq), a);
  (void)(*gw)->describe("").get();  // the transport thread has taken both serve() calls
  Result<Figures> out = make_error(errc::internal, "not run");
  if (auto met = meet(o, "ready"); !met) {
    out = met.error();
  } else {
    caf::anon_send(a, go_atom::value);
    if (result.wait_for(std::chrono::seconds(o.timeout_s)) == std::future_status::ready) {
      out = result.get();
    } else {
      out = make_error(errc::deadline_exceeded, "the ops did not finish within {} s", o.timeout_s);
    }
    // Nobody stops its gateway while another rank may still wait for its last answers.
    if (auto met_done = meet(o, "done"); !met_done && out) out = met_done.error();
  }
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  (*gw)->stop();
  return out;
}

}  // namespace

bool parse_allreduce_rank_options(int argc, char** argv, AllReduceRankOptions& o) {
  o.rank = static_cast<std::size_t>(std::strtoull(wl::flag_value(argc, argv, "--rank", "0").c_str(), nullptr, 10));
  o.ports.clear();
  for (const auto p : wl::parse_sizes(wl::flag_value(argc, argv, "--ports"))) o.ports.push_back(static_cast<int>(p));
  o.mode = wl::flag_value(argc, argv, "--mode", "tcp");
  o.sizes = wl::parse_sizes(wl::flag_value(argc, argv, "--sizes"));
  o.part_size_bytes = std::strtoll(wl::flag_value(argc, argv, "--part-size", "524288").c_str(), nullptr, 10);
  o.barrier_dir = wl::flag_value(argc, argv, "--barrier");
  o.quick = wl::has_flag(argc, argv, "--quick");
  o.timers = !wl::has_flag(argc, argv, "--no-timers");
  o.one_timer = wl::has_flag(argc, argv, "--one-timer");
  o.device_reductions = wl::has_flag(argc, argv, "--device-reductions");
  o.busy_poll_us = std::atoi(wl::flag_value(argc, argv, "--busy-poll-us", "0").c_str());
  o.timeout_s = std::atoi(wl::flag_value(argc, argv, "--timeout-s", "300").c_str());
  std::string why;
  if (o.ports.size() < 2 || o.rank >= o.ports.size()) why = "expected --ports with >= 2 ports and --rank below their count";
  if (o.mode != "tcp" && o.mode != "shm") why = "expected --mode tcp or shm, got '" + o.mode + "'";
  if (o.sizes.empty()) why = "expected --sizes B1,B2,... (bytes)";
  for (const auto b : o.sizes)
    if (b % sizeof(float) != 0) why = fmt::format("expected sizes that are multiples of 4 bytes, got {}", b);
  if (o.part_size_bytes <= 0) why = "expected --part-size > 0 (bytes)";
  if (o.barrier_dir.empty()) why = "expected --barrier DIR (a directory shared by the ranks)";
  if (o.timeout_s <= 0) why = "expected --timeout-s > 0";
  if (o.busy_poll_us < 0) why = "expected --busy-poll-us >= 0";
  if (why.empty()) return true;
  std::fprintf(stderr, "apiary bench allreduce-rank: %s\n", why.c_str());
  return false;
}

int run_allreduce_rank(int argc, char** argv) {
  AllReduceRankOptions o;
  if (!parse_allreduce_rank_options(argc, argv, o)) return 2;
  auto figures = run_rank(o);
  if (!figures) {
    std::printf("allreduce_error system=apiary-%s rank=%zu message=%s\n", o.mode.c_str(), o.rank,
                figures.error().message.c_str());
    std::fflush(stdout);
    return 1;
  }
  bool ok = true;
  for (const auto& f : *figures) {
    wl::print_figure(f);
    ok = ok && f.ok;
  }
  return ok ? 0 : 1;
}

}  // namespace apiary::bench

