// The PS shard and replica processes of `apiary bench ps`, and the model and plan they share.
#include "bench/ps_bench_process.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <thread>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "api/parameter_server.hpp"
#include "api/replica.hpp"
#include "bench/allreduce_workload.hpp"
#include "bench/transport_bench_apiary.hpp"

namespace apiary::bench {
namespace {

namespace wl = allreduce_workload;
namespace cps = core::ps;
using Clock = std::chrono::steady_clock;

/// Every gradient element: a power of two, so sums, means and updates stay exact.
constexpr float k_gradient = 1.0F / 1024.0F;

struct ProcessOptions {
  std::string role;
  std::size_t index = 0;
  std::size_t shards = 0;
  std::size_t replicas = 0;
  std::size_t model_bytes = 0;
  std::string mode = "tcp";  ///< UCX lanes: tcp or shm
  std::vector<int> ports;
  std::string barrier;
  std::size_t steps = 0;
  std::size_t warmup = 0;
  int timeout_s = 600;
};

std::string device_of_shard(std::size_t i) { return fmt::format("localhost:CPU:{}", i); }

bool file_exists(const std::string& path) { return static_cast<bool>(std::ifstream(path)); }

/// Waits until every `<barrier>/<name>.<i>` for i < count exists.
Status wait_files(const ProcessOptions& o, const char* name, std::size_t count) {
  const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  for (std::size_t i = 0; i < count; ++i) {
    while (!file_exists(fmt::format("{}/{}.{}", o.barrier, name, i))) {
      if (Clock::now() > deadline)
        return make_error(errc::deadline_exceeded, "expected {}.{} in {} within {} s; did that process fail to start?",
                          name, i, o.barrier, o.timeout_s);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return ok_status();
}

Status touch(const ProcessOptions& o, const char* name) {
  const auto path = fmt::format("{}/{}.{}", o.barrier, name, o.index);
  if (!std::ofstream(path)) return make_error(errc::io, "cannot write {}; expected a writable shared directory", path);
  return ok_status();
}

Result<std::shared_ptr<actors::Gateway>> start_gateway(caf::actor_system& sys, int port, const std::string& mode) {
  actors::GatewayConfig gc;
  gc.transport.mode = mode == "shm" ? transport::Mode::shm : transport::Mode::tcp;
  // Plaintext, as the peers it is measured beside run (`apiary bench transport --secure`
  // measures what encryption costs).
  gc.transport.insecure = true;
  gc.port = static_cast<std::uint16_t>(port);
  return actors::Gateway::start(sys, gc);
}

/// A PS shard process: serves its variables until every replica wrote done.<r>.
Status run_ps(const ProcessOptions& o, const cps::TrainingPlan& plan) {
  const std::string device = device_of_shard(o.index);
  ParameterServerOptions po;
  po.device = device;
  po.plan = std::make_shared<const cps::TrainingPlan>(plan);
  for (const auto& v : plan.variables) {
    std::size_t n = 1;
    for (auto d : v.shape) n *= static_cast<std::size_t>(d);
    po.initial.emplace(v.name, std::vector<float>(n, 0.0F));
  }
  const std::size_t count = plan.shards_on(device).size();
  caf::actor_system_config cfg;
  transport_bench::apply_caf_config(cfg);
  caf::actor_system sys{cfg};
  auto gw = start_gateway(sys, o.ports[o.index], o.mode);
  if (!gw) return gw.error();
  auto ps = ParameterServer::start(sys, *gw, std::move(po));
  if (!ps) return ps.error();
  std::printf("ps_ready shard=%zu address=%s variables=%zu bytes=%zu\n", o.index, (*gw)->address().c_str(), count,
              ps_bench_bytes_on(plan, device));
  std::fflush(stdout);
  const auto cpu0 = wl::switches_now();
  Status st = touch(o, "ps_ready");
  if (st) st = wait_files(o, "done", o.replicas);
  // CPU from ready to the last replica's leaving: every step, warm-up and final pull included.
  std::printf("ps_cpu shard=%zu cpu_us=%.0f\n", o.index, wl::switches_now().cpu_us - cpu0.cpu_us);
  std::fflush(stdout);
  ps->reset();
  (*gw)->stop();
  return st;
}

/// Index of the first variable whose checked elements are not `expect`; variables.size() if none.
std::size_t first_wrong(const cps::TrainingPlan& plan, const std::map<std::string, std::vector<float>>& params,
                        float expect, bool every_element) {
  for (std::size_t v = 0; v < plan.variables.size(); ++v) {
    auto it = params.find(plan.variables[v].name);
    if (it == params.end() || it->second.empty()) return v;
    const auto& x = it->second;
    if (every_element) {
      if (std::any_of(x.begin(), x.end(), [&](float f) { return f != expect; })) return v;
    } else if (x.front() != expect || x.back() != expect) {
      return v;
    }
  }
  return plan.variables.size();
}

/// A replica process: warm-up and timed steps, then a full check of the final parameters.
Status run_replica(const ProcessOptions& o, const cps::TrainingPlan& plan, const PsBenchModel& model) {
  caf::actor_system_config cfg;
  transport_bench::apply_caf_config(cfg);
  caf::actor_system sys{cfg};
  auto gw = start_gateway(sys, 0, o.mode);
  if (!gw) return gw.error();
  std::map<std::string, core::PeerAddr> servers;
  for (std::size_t i = 0; i < o.shards; ++i) servers[device_of_shard(i)] = core::PeerAddr(messages::Multiaddr{"127.0.0.1", false, static_cast<std::uint16_t>(o.ports[i]), {}, {}});
  Status st = wait_files(o, "ps_ready", o.shards);
  std::vector<double> step_us;
  double cpu_us = 0;  // CPU of this process per timed step (checks included)
  bool ok = true;
  if (st) {
    ReplicaOptions ro;
    ro.roles.replica = static_cast<std::int32_t>(o.index);
    ro.roles.ps = std::make_shared<const cps::TrainingPlan>(plan);
    ro.roles.servers = servers;
    ro.roles.call_timeout = std::chrono::seconds(o.timeout_s);
    ro.patience = std::chrono::seconds(o.timeout_s + 1);
    auto replica = Replica::start(sys, *gw, std::move(ro));
    if (!replica) return replica.error();
    std::map<std::string, std::vector<float>> grads;
    for (const auto& [name, n] : model.variables) grads.emplace(name, std::vector<float>(n, k_gradient));
    const std::size_t total = o.warmup + o.steps;
    wl::Switches cpu0;
    // The parameters live across steps, as a trainer's do: each pull writes over them.
    std::map<std::string, std::vector<float>> params;
    for (std::size_t step = 0; step < total && st; ++step) {
      if (step == o.warmup) cpu0 = wl::switches_now();
      const auto t0 = Clock::now();
      auto pulled = (*replica)->pull_into(params);
      const auto t1 = Clock::now();
      if (!pulled) return pulled.error();
      // BSP: the pull of step s reads version s, every element -s/1024.
      const float expect = -static_cast<float>(step) * k_gradient;
      if (const auto v = first_wrong(plan, params, expect, false); v < plan.variables.size()) {
        std::printf("ps_check replica=%zu step=%zu variable=%s expected=%g\n", o.index, step,
                    plan.variables[v].name.c_str(), static_cast<double>(expect));
        ok = false;
      }
      const auto t2 = Clock::now();
      st = (*replica)->push_lent(grads, 1.0);  // sent from where the gradients lie
      const auto t3 = Clock::now();
      if (step >= o.warmup)
        step_us.push_back(std::chrono::duration<double, std::micro>((t1 - t0) + (t3 - t2)).count());
    }
    cpu_us = (wl::switches_now().cpu_us - cpu0.cpu_us) / static_cast<double>(o.steps);
    if (st) {
      auto final_params = (*replica)->pull();
      if (!final_params) return final_params.error();
      const float expect = -static_cast<float>(total) * k_gradient;
      if (const auto v = first_wrong(plan, final_params->params, expect, true); v < plan.variables.size()) {
        std::printf("ps_check replica=%zu final variable=%s expected=%g\n", o.index, plan.variables[v].name.c_str(),
                    static_cast<double>(expect));
        ok = false;
      }
      if (auto left = (*replica)->leave(std::chrono::seconds(10)); !left) st = left.error();
    }
  }
  (*gw)->stop();
  if (!st) return st;
  std::string times;
  for (const double t : step_us) times += (times.empty() ? "" : ",") + fmt::format("{:.1f}", t);
  std::printf("ps_result shards=%zu replica=%zu replicas=%zu bytes=%zu steps=%zu cpu_us=%.0f step_us=%s check=%s\n",
              o.shards, o.index, o.replicas, model.bytes(), step_us.size(), cpu_us, times.c_str(), ok ? "ok" : "FAIL");
  std::fflush(stdout);
  return ok ? ok_status() : make_error(errc::internal, "replica {}: a parameter check failed (see ps_check)", o.index);
}

bool parse(int argc, char** argv, ProcessOptions& o) {
  const auto num = [&](const char* flag, const char* fallback) {
    return static_cast<std::size_t>(std::strtoull(wl::flag_value(argc, argv, flag, fallback).c_str(), nullptr, 10));
  };
  o.role = wl::flag_value(argc, argv, "--role");
  o.index = num("--index", "0");
  o.shards = num("--shards", "0");
  o.replicas = num("--replicas", "0");
  o.model_bytes = num("--model-bytes", "0");
  for (const auto p : wl::parse_sizes(wl::flag_value(argc, argv, "--ports"))) o.ports.push_back(static_cast<int>(p));
  o.barrier = wl::flag_value(argc, argv, "--barrier");
  o.steps = num("--steps", "5");
  o.warmup = num("--warmup", "1");
  o.timeout_s = std::atoi(wl::flag_value(argc, argv, "--timeout-s", "600").c_str());
  o.mode = wl::flag_value(argc, argv, "--mode", "tcp");
  std::string why;
  if (o.mode != "tcp" && o.mode != "shm") why = "expected --mode tcp or shm, got '" + o.mode + "'";
  if (o.role != "ps" && o.role != "replica") why = "expected --role ps or replica, got '" + o.role + "'";
  if (o.shards == 0 || o.ports.size() != o.shards) why = "expected --shards K >= 1 and --ports with K ports";
  if (o.replicas == 0) why = "expected --replicas N >= 1";
  if (o.index >= (o.role == "ps" ? o.shards : o.replicas)) why = "expected --index below the shard or replica count";
  if (o.model_bytes < 1024 * 1024) why = "expected --model-bytes >= 1 MiB";
  if (o.barrier.empty()) why = "expected --barrier DIR (a directory shared by the processes)";
  if (o.steps == 0 || o.timeout_s <= 0) why = "expected --steps >= 1 and --timeout-s >= 1";
  if (why.empty()) return true;
  std::fprintf(stderr, "apiary bench ps-process: %s\n", why.c_str());
  return false;
}

}  // namespace

int run_ps_bench_process(int argc, char** argv) {
  ProcessOptions o;
  if (!parse(argc, argv, o)) return 2;
  const auto model = ps_bench_model(o.model_bytes);
  auto plan = ps_bench_plan(model, o.shards, o.replicas);
  if (!plan) {
    std::fprintf(stderr, "apiary bench ps-process: %s\n", plan.error().message.c_str());
    return 2;
  }
  Status st = o.role == "ps" ? run_ps(o, *plan) : run_replica(o, *plan, model);
  // A replica that failed is done too: the PS processes stop instead of waiting it out.
  if (o.role == "replica")
    if (auto done = touch(o, "done"); !done && st) st = done.error();
  if (!st) {
    std::printf("ps_error role=%s index=%zu message=%s\n", o.role.c_str(), o.index, st.error().message.c_str());
    std::fflush(stdout);
    return 1;
  }
  return 0;
}

}  // namespace apiary::bench
