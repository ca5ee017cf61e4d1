#include "bench/transport_bench_apiary.hpp"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <numeric>
#include <random>
#include <thread>
#include <unordered_map>

#include <caf/all.hpp>

#include "actors/role_host.hpp"
#include "actors/rpc.hpp"
#include "actors/type_ids.hpp"
#include "bench/transport_bench_roles.hpp"
#include "core/rpc/auth.hpp"
#include "messages/identity/key_file.hpp"
#include "messages/identity/multiaddr.hpp"
#include "messages/identity/peer_id.hpp"

namespace apiary::bench::transport_bench {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

/// Deadline of every benchmark call; generous, since a 16 MiB call on a loaded box can
/// take a while, and a late reply is an error rather than a figure.
constexpr std::chrono::seconds k_call_timeout{20};

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct driver_state {
  std::shared_ptr<actors::Gateway> gw;
  DriveSpec spec;
  std::size_t issued = 0;
  std::size_t finished = 0;
  std::unordered_map<actors::CallId, Clock::time_point> started;
  Clock::time_point first;
  CallRun run;
  std::shared_ptr<std::promise<Result<CallRun>>> done;
};

using driver_actor = caf::stateful_actor<driver_state>*;

void issue(driver_actor self) {
  auto& st = self->state;
  const auto t = Clock::now();
  const auto id = st.gw->unary(caf::actor_cast<caf::actor>(self), st.spec.peer, st.spec.handle,
                               st.spec.payload, k_call_timeout);
  st.started.emplace(id, t);
  ++st.issued;
}

void finish(driver_actor self, Result<CallRun> result) {
  self->state.done->set_value(std::move(result));
  self->quit();
}

/// Issues the first `window` calls at start, then one more from the handler of every
/// reply, so the window stays full; timestamps are taken in this actor, so a round trip
/// includes both hops between the gateway thread and the actors.
caf::behavior call_driver(driver_actor self, std::shared_ptr<actors::Gateway> gw, DriveSpec spec,
                          std::shared_ptr<std::promise<Result<CallRun>>> done) {
  auto& st = self->state;
  st.gw = std::move(gw);
  st.spec = std::move(spec);
  st.done = std::move(done);
  st.run.rtt_us.reserve(st.spec.calls);
  st.first = Clock::now();
  while (st.issued < std::min(st.spec.window, st.spec.calls)) issue(self);
  return {
      [self](actors::Delivery& d) {
        const auto now = Clock::now();
        auto& st = self->state;
        auto it = st.started.find(d.call);
        if (it == st.started.end()) return;
        if (d.kind == actors::DeliveryKind::error) {
          finish(self, make_error(d.error.code, "call {} of {} to '{}' at {} failed: {}", st.finished + 1,
                                  st.spec.calls, st.spec.handle, st.spec.peer, d.error.message));
          return;
        }
        if (!d.final) return;  // a unary reply ends the call; nothing else is expected
        if (d.data.size() != st.spec.reply_bytes) {
          finish(self, make_error(errc::protocol, "'{}' answered {} bytes, expected {}; is the server an "
                                  "apiary transport-server of the same build?",
                                  st.spec.handle, d.data.size(), st.spec.reply_bytes));
          return;
        }
        st.run.rtt_us.push_back(micros(now - it->second));
        st.started.erase(it);
        ++st.finished;
        if (st.issued < st.spec.calls) {
          issue(self);
        } else if (st.finished == st.spec.calls) {
          st.run.seconds = std::chrono::duration<double>(now - st.first).count();
          finish(self, std::move(st.run));
        }
      },
  };
}

/// The server's context switches, through its stats handle.
std::optional<ProcessCounters> server_counters(caf::actor_system& sys, actors::Gateway& gw,
                                               const std::string& peer) {
  caf::scoped_actor self{sys};
  auto r = actors::call_unary(self, gw, peer, k_stats_handle, Buffer{}, 5000ms);
  if (!r || r->size() != 32) return std::nullopt;
  ProcessCounters c;
  std::memcpy(&c.voluntary, r->data(), 8);
  std::memcpy(&c.involuntary, r->data() + 8, 8);
  std::memcpy(&c.minor_faults, r->data() + 16, 8);
  std::memcpy(&c.cpu_us, r->data() + 24, 8);
  return c;
}

Buffer pattern(std::size_t size) {
  Buffer b = Buffer::allocate(size);
  if (size > 0) std::memset(b.data(), 0xa5, size);
  return b;
}

RttFigure summarize(std::vector<double> us) {
  RttFigure f;
  f.iters = us.size();
  if (us.empty()) return f;
  std::sort(us.begin(), us.end());
  f.median_us = us[us.size() / 2];
  f.p99_us = us[std::min(us.size() - 1, (us.size() * 99 + 99) / 100 - 1)];
  f.mean_us = std::accumulate(us.begin(), us.end(), 0.0) / static_cast<double>(us.size());
  return f;
}

void measure(caf::actor_system& sys, const std::shared_ptr<actors::Gateway>& gw, const std::string& peer,
             const SessionPlan& plan, SessionFigures& out) {
  const Buffer small = pattern(64);
  const auto patience = 120s;
  const auto echo_rtt = plan.direct ? drive_on_transport_thread : drive_calls;
  // Warm-up: connects, and lets both processes fault in their pages and caches.
  auto warm = echo_rtt(sys, gw, {peer, k_echo_handle, small, 64, std::max<std::size_t>(plan.rtt_iters / 10, 50), 1},
                       patience);
  if (!warm) {
    Error e{warm.error().code, "warm-up calls failed: " + warm.error().message};
    out.fail(e);
    return;
  }
  // Sequential round trips, with the context switches and processor time they cost on both sides.
  const auto server_before = server_counters(sys, *gw, peer);
  const auto client_before = process_counters();
  auto rtt = echo_rtt(sys, gw, {peer, k_echo_handle, small, 64, plan.rtt_iters, 1}, patience);
  const auto client_after = process_counters();
  const auto server_after = server_counters(sys, *gw, peer);
  if (rtt) {
    RttFigure f = summarize(std::move(rtt->rtt_us));
    const double n = static_cast<double>(std::max<std::size_t>(f.iters, 1));
    f.client_switches_per_call = static_cast<double>(client_after.voluntary - client_before.voluntary) / n;
    if (server_before && server_after) {
      f.server_switches_per_call = static_cast<double>(server_after->voluntary - server_before->voluntary) / n;
      f.cpu_us_per_call = static_cast<double>(client_after.cpu_us - client_before.cpu_us + server_after->cpu_us -
                                              server_before->cpu_us) / n;
    }
    out.rtt = f;
  } else {
    out.rtt = rtt.error();
  }
  // Calls per second with a full window.
  if (plan.rate_calls > 0 && !plan.direct) {
    const auto server_start = server_counters(sys, *gw, peer);
    const auto client_start = process_counters();
    auto rate = drive_calls(sys, gw, {peer, k_echo_handle, small, 64, plan.rate_calls, plan.rate_in_flight}, patience);
    const auto client_end = process_counters();
    const auto server_end = server_counters(sys, *gw, peer);
    if (rate && server_start && server_end) {
      out.rate_cpu_us_per_call = static_cast<double>(client_end.cpu_us - client_start.cpu_us +
                                                     server_end->cpu_us - server_start->cpu_us) /
                                 static_cast<double>(plan.rate_calls);
    }
    if (rate) {
      out.calls_per_s = static_cast<double>(plan.rate_calls) / rate->seconds;
      out.rate_call_max_us = *std::max_element(rate->rtt_us.begin(), rate->rtt_us.end());
      out.rate_call_p99_us = summarize(std::move(rate->rtt_us)).p99_us;
    } else {
      out.calls_per_s = rate.error();
    }
  }
  // One-way bandwidth to the sink, 4 payloads in flight (one buffer, reused, as perftest does).
  if (plan.bw_iters > 0 && !plan.direct) {
    const Buffer big = pattern(plan.bw_size);
    auto bw_warm = drive_calls(sys, gw, {peer, k_sink_handle, big, 8, 8, 4}, patience);  // warm-up at the same window
    const auto server_before = server_counters(sys, *gw, peer);
    const auto client_before = process_counters();
    auto bw = bw_warm ? drive_calls(sys, gw, {peer, k_sink_handle, big, 8, plan.bw_iters, 4}, patience) : bw_warm;
    const auto client_after = process_counters();
    const auto server_after = server_counters(sys, *gw, peer);
    const double n = static_cast<double>(plan.bw_iters);
    out.client_faults_per_payload = static_cast<double>(client_after.minor_faults - client_before.minor_faults) / n;
    if (server_before && server_after)
      out.server_faults_per_payload = static_cast<double>(server_after->minor_faults - server_before->minor_faults) / n;
    if (bw) {
      const double bytes = static_cast<double>(plan.bw_iters) * static_cast<double>(plan.bw_size);
      out.mib_per_s = bytes / bw->seconds / (1024.0 * 1024.0);
      if (server_before && server_after) {
        out.bw_cpu_ns_per_byte = static_cast<double>(client_after.cpu_us - client_before.cpu_us +
                                                     server_after->cpu_us - server_before->cpu_us) *
                                 1e3 / bytes;
      }
    } else {
      out.mib_per_s = bw.error();
    }
  }
  // Then both processes, connected, idle: what their threads' polls cost a second.
  if (plan.idle.count() > 0) {
    const auto server_idle = server_counters(sys, *gw, peer);
    const auto client_idle = process_counters();
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(plan.idle);
    const auto client_woke = process_counters();
    const auto server_woke = server_counters(sys, *gw, peer);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (server_idle && server_woke) {
      out.idle_cpu_us_per_s = static_cast<double>(client_woke.cpu_us - client_idle.cpu_us + server_woke->cpu_us -
                                                  server_idle->cpu_us) / 2.0 / seconds;
    }
  }
}

/// Pins the calling thread (and so the threads and processes it starts) to `cpu`.
void pin_calling_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ::sched_setaffinity(0, sizeof set, &set);  // best effort: unpinned figures are still figures
}

}  // namespace

void apply_caf_config(caf::actor_system_config& cfg) {
  cfg.set("work-stealing.moderate-poll-attempts", 0);
}

std::string caf_config_line() {
  return "scheduler.policy=stealing (default), work-stealing.moderate-poll-attempts=0; same in both processes";
}

ProcessCounters process_counters() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);  // RUSAGE_SELF sums every thread of the process
  const auto us = [](const timeval& t) {
    return static_cast<std::uint64_t>(t.tv_sec) * 1000000U + static_cast<std::uint64_t>(t.tv_usec);
  };
  return {static_cast<std::uint64_t>(ru.ru_nvcsw), static_cast<std::uint64_t>(ru.ru_nivcsw),
          static_cast<std::uint64_t>(ru.ru_minflt), us(ru.ru_utime) + us(ru.ru_stime)};
}

Result<CallRun> drive_calls(caf::actor_system& sys, const std::shared_ptr<actors::Gateway>& gw,
                            const DriveSpec& spec, std::chrono::seconds patience) {
  if (spec.calls == 0 || spec.window == 0)
    return make_error(errc::invalid_argument, "expected calls and window > 0, got {} and {}", spec.calls,
                      spec.window);
  auto done = std::make_shared<std::promise<Result<CallRun>>>();
  auto result = done->get_future();
  auto driver = sys.spawn(call_driver, gw, spec, done);
  if (result.wait_for(patience) != std::future_status::ready) {
    caf::anon_send_exit(driver, caf::exit_reason::kill);
    return make_error(errc::deadline_exceeded, "{} calls to '{}' at {} did not finish within {} s; is the "
                      "machine overloaded?", spec.calls, spec.handle, spec.peer, patience.count());
  }
  return result.get();
}

Result<CallRun> drive_on_transport_thread(caf::actor_system& sys, const std::shared_ptr<actors::Gateway>& gw,
                                          const DriveSpec& spec, std::chrono::seconds patience) {
  if (spec.window != 1)
    return make_error(errc::invalid_argument, "the transport-thread driver runs one call at a time, got window {}",
                      spec.window);
  auto peer = messages::Multiaddr::from_host_port(spec.peer, "benchmark server");
  if (!peer) return peer.error();
  DriveOrder order{core::PeerAddr(*peer), spec.handle, std::string(spec.payload.view()), spec.reply_bytes, spec.calls,
                   k_call_timeout};
  auto driver = actors::spawn_role(sys, gw, make_driver_role(), core::HostKind::transport_thread);
  const auto start = Clock::now();
  auto answer = actors::call_role(driver, "", "drive", core::Value::of(std::move(order)));
  const bool ready = answer.wait_for(patience) == std::future_status::ready;
  const auto end = Clock::now();
  actors::stop_role(*gw, driver, {});  // a run still going hears errc::cancelled
  if (!ready)
    return make_error(errc::deadline_exceeded, "{} calls to '{}' at {} from the transport thread did not finish "
                      "within {} s; is the machine overloaded?", spec.calls, spec.handle, spec.peer, patience.count());
  auto value = answer.get();
  if (!value) return value.error();
  CallRun run;
  run.rtt_us = std::move(*value->as<std::vector<double>>());
  run.seconds = std::chrono::duration<double>(end - start).count();
  return run;
}

void use_identity(actors::GatewayConfig& gc, const messages::Ed25519PrivateKey& identity) {
  gc.transport.identity = identity;
  gc.transport.peer_id = messages::PeerId::from_public_key(identity.public_key()).bytes();
}

Status authorize_gateway(actors::Gateway& gw, const messages::Ed25519PrivateKey& identity,
                         const std::string& authority_file) {
  auto authority = messages::load_key_file(authority_file);
  if (!authority) return authority.error();
  auto rng = std::make_shared<std::mt19937_64>(std::random_device{}());
  auto authorizer = core::rpc::shared_authority_authorizer(*authority, identity, "bench", [rng] {
    std::string nonce(core::rpc::k_auth_nonce_size, '\0');
    const std::uint64_t bits = (*rng)();
    for (std::size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<char>((bits >> (8 * i)) & 0xff);
    return nonce;
  });
  if (!authorizer) return authorizer.error();
  gw.authorize(std::move(*authorizer));
  return ok_status();
}

SessionFigures run_session(const SessionPlan& plan) {
  SessionFigures out;
  cpu_set_t original;
  CPU_ZERO(&original);
  const bool have_original = ::sched_getaffinity(0, sizeof original, &original) == 0;
  if (plan.cpus) pin_calling_thread(plan.cpus->first);
  auto server = ServerProcess::start(plan.exe, plan.mode, plan.busy, plan.direct, plan.secure, 30s, plan.authority);
  if (plan.cpus) pin_calling_thread(plan.cpus->second);
  if (server) {
    // The actor system and the gateway start their threads here, on the client's CPU.
    caf::actor_system_config cfg;
    apply_caf_config(cfg);
    caf::actor_system sys{cfg};
    out.caf_workers = sys.scheduler().num_workers();
    actors::GatewayConfig gc;
    gc.transport.mode = plan.mode == "shm" ? transport::Mode::shm : transport::Mode::tcp;
    if (plan.busy) gc.transport.busy_poll = k_busy_poll;
    gc.transport.insecure = !plan.secure;
    auto identity = messages::Ed25519PrivateKey::generate();
    if (identity) use_identity(gc, *identity);
    auto gw = identity ? actors::Gateway::start(sys, gc) : Result<std::shared_ptr<actors::Gateway>>(identity.error());
    if (gw && !plan.authority.empty()) {
      if (auto ok = authorize_gateway(**gw, *identity, plan.authority); !ok) {
        (*gw)->stop();
        gw = ok.error();
      }
    }
    if (gw) {
      measure(sys, *gw, server->address(), plan, out);
      (*gw)->stop();
    } else {
      out.fail(gw.error());
    }
  } else {
    out.fail(server.error());
  }
  if (have_original) ::sched_setaffinity(0, sizeof original, &original);
  if (server) {
    auto stopped = server->stop(10s);
    // A server that crashed during the run invalidates figures that still look fine.
    if (!stopped && out.rtt) out.rtt = stopped.error();
  }
  return out;
}

}  // namespace apiary::bench::transport_bench
