// The collective actor: hosts the barrier and one AllReduceRunner at a time over the
// gateway, holding the streams of an op that a faster member opened early.
#include "actors/collective/collective_actor.hpp"

#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/effects_executor.hpp"
#include "actors/type_ids.hpp"
#include "core/averaging/allreduce.hpp"
#include "core/collective/barrier.hpp"
#include "core/collective/exchange.hpp"

namespace apiary::actors {
namespace {

namespace av = core::averaging;
namespace cc = core::collective;

/// Barrier call and timer ids live above every runner's ((op + 1) << k_op_shift + ...).
constexpr std::uint64_t k_barrier_base = std::uint64_t{1} << 62;
/// Exchange call and timer ids live between the runners' and the barrier's.
constexpr std::uint64_t k_exchange_base = std::uint64_t{1} << 61;
/// A runner uses 2 + 2 * group size ids; 20 bits leave room for any group here.
constexpr int k_op_shift = 20;

struct collective_state {
  CollectiveActorConfig config;
  std::unique_ptr<EffectExecutor> fx;
  std::optional<cc::Barrier> barrier;
  std::string barrier_handle;
  std::optional<cc::Exchange> exchange;
  std::string exchange_handle;
  std::unordered_map<std::string, core::PeerAddr> addr_of;  ///< "host:port" -> multiaddr
  std::uint64_t ops = 0;                                    ///< all-reduce ops started so far
  std::string part_handle;                                  ///< the running (or next) op's part handle
  std::optional<av::AllReduceRunner> runner;
  std::shared_ptr<std::promise<CollectiveResult>> done;  ///< the running op's owner
  bool barrier_running = false;
  std::vector<Delivery> held;             ///< early streams of the next op
  std::unordered_set<CallId> held_calls;  ///< their calls
};
using collective_actor = caf::stateful_actor<collective_state>;

void on_response(collective_actor* self, core::CallId call, const Result<std::string>& result);

/// Executes effects; calls that fail on the spot go straight back to their core.
void run(collective_actor* self, core::Effects effects) {
  for (auto& r : self->state.fx->execute(std::move(effects))) on_response(self, r.call, r.result);
}

void on_response(collective_actor* self, core::CallId call, const Result<std::string>& result) {
  auto& st = self->state;
  if (call >= k_barrier_base) {
    run(self, st.barrier->on_response(core_now(), call, result));
  } else if (st.exchange->owns_call(call)) {
    run(self, st.exchange->on_response(core_now(), call, result));
  } else if (st.runner) {
    run(self, st.runner->on_response(core_now(), call, result));
  }
}

/// Feeds one delivery to its core, in the executor's order.
void feed(collective_actor* self, Delivery& d) {
  auto& st = self->state;
  auto& fx = *st.fx;
  if (auto req = fx.request_view_of(d)) {
    if (req->handle == st.barrier_handle) {
      run(self, st.barrier->on_request(core_now(), req->id, std::string(req->body.view())));
    } else if (req->handle == st.exchange_handle) {
      run(self, st.exchange->on_request(core_now(), req->id, std::string(req->body.view())));
    } else if (st.runner) {
      auto from = st.addr_of.find(d.peer_listen_addr);
      const core::PeerAddr name = from == st.addr_of.end() ? core::PeerAddr{} : from->second;
      run(self, st.runner->on_request(core_now(), req->id, name, std::move(req->body)));
    }
  }
  if (auto m = fx.request_message_view_of(d); m && st.runner)
    run(self, st.runner->on_request_message(core_now(), m->request, std::move(m->message), m->last));
  if (auto m = fx.message_view_of(d); m && st.runner)
    run(self, st.runner->on_message(core_now(), m->call, m->message.view(), m->landed));
  if (auto r = fx.response_of(d)) on_response(self, r->call, r->result);
}

/// Holds an inbound part stream that belongs to an op not started yet; true if held.
bool hold_if_early(collective_actor* self, Delivery& d) {
  auto& st = self->state;
  const bool part_open =
      d.kind == DeliveryKind::open && d.handle != st.barrier_handle && d.handle != st.exchange_handle;
  if ((part_open && (!st.runner || d.handle != st.part_handle)) || st.held_calls.count(d.call) > 0) {
    st.held_calls.insert(d.call);
    st.held.push_back(std::move(d));
    return true;
  }
  return false;
}

/// The outcome of the finished runner: the averaged tensors, or an error naming every
/// member that did not take part.
CollectiveResult outcome_of(collective_state& st) {
  auto out = st.runner->take_outcome();
  const std::uint64_t op = st.ops - 1;
  if (!out.status) return out.status.error();
  if (!out.failed_senders.empty() || !out.failed_reducers.empty()) {
    auto names = [&](const std::vector<core::PeerAddr>& peers) {
      std::string s;
      for (const auto& p : peers) {
        std::size_t rank = 0;
        while (rank < st.config.members.size() && st.config.members[rank] != p) ++rank;
        s += fmt::format("{}rank {} ({})", s.empty() ? "" : ", ", rank, p);
      }
      return s.empty() ? std::string("none") : s;
    };
    return make_error(errc::peer_down,
                      "all-reduce op {} of job {}: expected every member to take part, but these failed as "
                      "reducers: {}; as senders: {} (a member died, or stalled longer than the {} ms timeout)",
                      op, st.config.job, names(out.failed_reducers), names(out.failed_senders),
                      st.config.timeout.count());
  }
  return CollectiveOutput{std::move(out.averages), {}};
}

/// Ends the running op once its core is done.
void advance(collective_actor* self) {
  auto& st = self->state;
  if (st.barrier_running && st.barrier->finished()) {
    st.barrier_running = false;
    const auto& s = st.barrier->status();
    st.done->set_value(s ? CollectiveResult(CollectiveOutput{}) : CollectiveResult(s.error()));
    st.done.reset();
  }
  if (st.exchange->has_result() && st.done) {
    auto r = st.exchange->take_result();
    ++st.ops;
    st.part_handle = collective_part_handle(st.config.job, st.ops);
    run(self, st.barrier->reach(st.ops));
    st.done->set_value(r ? CollectiveResult(CollectiveOutput{std::move(r->tensors), std::move(r->gathered)})
                         : CollectiveResult(r.error()));
    st.done.reset();
  }
  if (st.runner && st.runner->finished()) {
    auto result = outcome_of(st);
    st.runner.reset();
    st.part_handle = collective_part_handle(st.config.job, st.ops);
    run(self, st.barrier->reach(st.ops));
    st.done->set_value(std::move(result));
    st.done.reset();
  }
}

/// Starts all-reduce op st.ops, then replays the streams it already received.
void start_allreduce(collective_actor* self, collective_op_message& m) {
  auto& st = self->state;
  av::AllReduceConfig c;
  c.group_id = fmt::format("{}/{}", st.config.job, st.ops);
  c.peers = st.config.members;
  c.self = st.config.rank;
  c.modes.assign(c.peers.size(), av::AveragingMode::node);
  c.weight = m.weight;
  for (const auto& t : m.tensors) c.tensor_sizes.push_back(static_cast<std::int64_t>(t.size()));
  c.codecs = m.codecs.empty() ? std::vector<pb::CompressionType>{pb::NONE} : m.codecs;
  c.peer_fractions.assign(c.peers.size(), 1.0);
  c.part_size_bytes = st.config.part_size_bytes;
  c.sender_timeout = st.config.timeout;
  c.reducer_timeout = 2 * st.config.timeout;
  c.call_timeout = 4 * st.config.timeout;
  c.handle = st.part_handle = collective_part_handle(st.config.job, st.ops);
  c.id_base = (st.ops + 1) << k_op_shift;
  // The tensors go to the runner and come back averaged (no copy, no deltas).
  c.averages_in_place = true;
  c.splice_parts = true;  // parts leave as views of the tensors (the gateway sends the pieces)
  // Answers carry the averages, copied into place: every replica holds the same bits.
  c.answer_averages = true;
  auto runner = av::AllReduceRunner::create(std::move(c), std::move(m.tensors));
  if (!runner) {
    m.done->set_value(runner.error());
    return;
  }
  ++st.ops;
  st.done = std::move(m.done);
  st.runner.emplace(std::move(*runner));
  run(self, st.runner->start(core_now()));
  auto held = std::move(st.held);
  st.held.clear();
  st.held_calls.clear();
  for (auto& d : held) {
    if (!hold_if_early(self, d)) feed(self, d);
  }
}

caf::behavior collective_behavior(collective_actor* self, std::shared_ptr<Gateway> gw, CollectiveActorConfig config) {
  auto& st = self->state;
  for (const auto& m : config.members) {
    if (auto key = peer_key_of(m)) st.addr_of.emplace(*key, m);
  }
  st.barrier_handle = collective_barrier_handle(config.job);
  st.part_handle = collective_part_handle(config.job, 0);
  cc::BarrierConfig bc;
  bc.peers = config.members;
  bc.self = config.rank;
  bc.handle = st.barrier_handle;
  bc.id_base = k_barrier_base;
  st.barrier.emplace(std::move(bc));
  st.exchange_handle = collective_exchange_handle(config.job);
  cc::ExchangeConfig ec;
  ec.peers = config.members;
  ec.self = config.rank;
  ec.handle = st.exchange_handle;
  ec.id_base = k_exchange_base;
  ec.timeout = config.timeout;
  st.exchange.emplace(std::move(*cc::Exchange::create(std::move(ec))));
  st.config = std::move(config);
  st.fx = std::make_unique<EffectExecutor>(self, std::move(gw));
  return {
      [self](collective_op_message& m) {
        auto& st = self->state;
        if (m.kind == collective_op_message::Kind::abandon) {
          // Members still calling hear why this one left, not just that it is gone.
          run(self, st.exchange->stop(make_error(errc::unavailable, "{}", m.payload)));
          return;
        }
        if (st.done) {
          m.done->set_value(make_error(errc::protocol, "collective: expected one op at a time, got a second one"));
          return;
        }
        if (m.kind == collective_op_message::Kind::barrier) {
          st.done = std::move(m.done);
          st.barrier_running = true;
          run(self, st.barrier->start(core_now(), m.level, core_now() + m.patience));
        } else if (m.kind == collective_op_message::Kind::mean) {
          st.done = std::move(m.done);
          run(self, st.exchange->start_mean(core_now(), std::move(m.tensors), m.weight, m.codecs));
        } else if (m.kind == collective_op_message::Kind::gather) {
          st.done = std::move(m.done);
          run(self, st.exchange->start_gather(core_now(), std::move(m.payload)));
        } else {
          start_allreduce(self, m);
        }
        advance(self);
      },
      [self](Delivery& d) {
        if (hold_if_early(self, d)) return;
        feed(self, d);
        advance(self);
      },
      [self](timer_atom, core::TimerId id, std::uint64_t generation) {
        auto& st = self->state;
        if (!st.fx->timer_is_current(id, generation)) return;
        if (id >= k_barrier_base) {
          run(self, st.barrier->on_timer(core_now(), id));
        } else if (st.exchange->owns_timer(id)) {
          run(self, st.exchange->on_timer(core_now(), id));
        } else if (st.runner) {
          run(self, st.runner->on_timer(core_now(), id));
        }
        advance(self);
      },
  };
}

}  // namespace

std::string collective_barrier_handle(const std::string& job) { return job + "::Collective.rpc_barrier"; }

std::string collective_exchange_handle(const std::string& job) { return job + "::Collective.rpc_exchange"; }

std::string collective_part_handle(const std::string& job, std::uint64_t op) {
  return fmt::format("{}/{}::{}", job, op % 2, av::k_aggregate_part_handle);
}

caf::actor spawn_collective_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, CollectiveActorConfig config) {
  const std::string job = config.job;
  auto actor = sys.spawn(collective_behavior, gw, std::move(config));
  gw->serve(collective_barrier_handle(job), actor);
  gw->serve(collective_exchange_handle(job), actor);
  for (std::uint64_t op = 0; op < 2; ++op) gw->serve(collective_part_handle(job, op), actor);
  (void)gw->describe("").get();  // the transport thread has taken the serve() calls
  return actor;
}

void stop_collective_actor(Gateway& gw, const std::string& job, const caf::actor& actor) {
  gw.unserve(collective_barrier_handle(job));
  gw.unserve(collective_exchange_handle(job));
  for (std::uint64_t op = 0; op < 2; ++op) gw.unserve(collective_part_handle(job, op));
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
}

}  // namespace apiary::actors
