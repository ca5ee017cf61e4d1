// The measurements of `apiary sim calibrate` (bench/sim_calibrate.hpp).
#include "bench/sim_calibrate.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench/transport_bench_apiary.hpp"
#include "transport/ucx/worker.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/ps/partition.hpp"
#include "core/ps/shard.hpp"
#include "core/strategy/builders.hpp"
#include "sim/scenarios/ps_scenario.hpp"

namespace apiary::bench {

namespace {

namespace cps = core::ps;
using Clock = std::chrono::steady_clock;

/// The best of `runs` timings of `f`, in seconds.
template <class F>
double best_of(int runs, F f) {
  double best = std::numeric_limits<double>::max();
  for (int i = 0; i < runs; ++i) {
    const auto begin = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - begin).count());
  }
  return best;
}

/// The median of `runs` timings of `f(thread)` made on each of `threads` threads at once
/// (every core busy, as a job's processes keep them), in seconds: what one run costs on a
/// loaded machine, where the best run of one thread on an idle one is 10-15% short of it.
/// Each thread runs `f` once first, untimed: a first run pays for its memory's first
/// touch (a 100 MiB gradient's pages zeroed by the kernel), which a job's steps do not.
template <class F>
double loaded_median(int runs, std::size_t threads, F f) {
  std::vector<std::vector<double>> seconds(threads);
  std::vector<std::thread> workers;
  for (std::size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&seconds, &f, runs, t] {
      f(t);
      for (int i = 0; i < runs; ++i) {
        const auto begin = Clock::now();
        f(t);
        seconds[t].push_back(std::chrono::duration<double>(Clock::now() - begin).count());
      }
    });
  }
  for (auto& w : workers) w.join();
  std::vector<double> all;
  for (const auto& s : seconds) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  return all[all.size() / 2];
}

/// The size of this machine's last-level cache in bytes (its L3, else its L2), or 32 MiB
/// where the system does not say.
std::size_t last_level_cache_bytes() {
  for (const int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long bytes = ::sysconf(name);
    if (bytes > 0) return static_cast<std::size_t>(bytes);
  }
  return std::size_t{32} << 20;
}

/// Seconds of one BSP step of a shard of `n` values with `replicas` replicas, from
/// the last push (its sum and update), with `kind`'s optimizer.
double shard_step_seconds(std::size_t n, std::int32_t replicas, cps::OptimizerKind kind, int runs) {
  cps::ShardConfig c;
  c.variable = "w";
  c.layout.shape = {static_cast<std::int64_t>(n)};
  c.optimizer.kind = kind;
  c.optimizer.learning_rate = 0.01F;
  c.replica_hosts.assign(static_cast<std::size_t>(replicas), 0);
  auto shard = cps::Shard::create(c, std::vector<float>(n, 0.5F));
  if (!shard) return 0.0;
  auto gradient = std::make_shared<std::vector<float>>(n, 0.001F);
  const cps::DenseBytes bytes{reinterpret_cast<const char*>(gradient->data()), n};
  std::int64_t step = 0;
  return best_of(runs, [&] {
    for (std::int32_t r = 0; r < replicas; ++r) (void)shard->push_dense(r, step, 1.0, bytes, gradient);
    ++step;
  });
}

/// Seconds to cut `n` values into two pieces and put the pieces back together, into
/// fresh buffers each time, as the synchronizer does with a partitioned variable's
/// gradient and averages each step.
double partition_seconds(std::size_t n, int runs) {
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(n)};
  auto layouts = cps::shard_layouts(shape, "2");
  if (!layouts) return 0.0;
  const std::vector<float> values(n, 0.5F);
  return best_of(runs, [&] {
    auto pieces = cps::split_dense(values, shape, *layouts);
    if (pieces) (void)cps::reassemble(*pieces, shape, *layouts);
  });
}

/// One simulated job whose work per value the profile takes as what its gradients,
/// loss and shard updates do not explain: four replicas of `features` values, 4 samples,
/// batch 1, run in this process without a cost profile, its hosts' handlers timed: the
/// processes' real work (pushes and pulls or the synchronizers and the collective,
/// encodings, sums, copies, updates), not the simulator's (joining spliced messages,
/// hashing and handing over every payload: a quarter of the run at 100 MiB, which the
/// transport's own figures stand for in a prediction).
struct StepJob {
  const char* name;
  double sim::CostProfile::*field;
  core::strategy::BuilderKind kind;
  core::strategy::BuilderOptions options;
  bool sparse = false;  ///< w's gradient sparse: the rows a batch touches
  bool shard = false;   ///< a PS job: one shard's sum of four pushes and update a step
  double density = 1.0;  ///< the data's (below 1: a batch touches a few of w's rows)
};
constexpr std::size_t k_job_samples = 4, k_job_batch = 1, k_job_replicas = 4;

Result<sim::scenarios::PsScenarioConfig> job_config(const StepJob& job, std::size_t features) {
  namespace cs = core::strategy;
  auto spec = cs::parse_resource_spec("nodes:\n  - address: localhost\n    cpus: [0, 1, 2, 3]\n", "calibration");
  if (!spec) return spec.error();
  auto item = cps::logistic_graph_item(features);
  if (job.sparse) {
    item.variables[0].sparse = true;
    item.grad_target_pairs = {{"g/w/indices:0;g/w/values:0;g/w/shape:0", cps::k_logreg_weights},
                              {"gradients/logreg/b_grad:0", cps::k_logreg_bias}};
  }
  auto strategy = cs::build_strategy(job.kind, job.options, item, *spec, "calibration");
  if (!strategy) return strategy.error();
  sim::scenarios::PsScenarioConfig c;
  c.strategy = std::move(*strategy);
  c.features = features;
  c.samples = k_job_samples;
  c.batch = k_job_batch;
  c.density = job.density;
  // A step size that keeps the model far from fitting its 4 samples over the run: a fitted
  // sample's error is exactly 0 in double (sigmoid(z) rounds to 1), its gradient too, and a
  // sparse variable whose gradient is all zeros sends no rows, a cost the job's steps then
  // no longer have (at 0.5, 1,000,000 features fit their samples within a few steps).
  c.optimizer.learning_rate = 1e-9F;
  if (job.sparse) c.sparse_variables = {cps::k_logreg_weights};
  return c;
}

/// Seconds the hosts of one run of `c` for `steps` steps spend in their handlers.
Result<double> run_seconds(sim::scenarios::PsScenarioConfig c, std::int64_t steps) {
  c.steps = steps;
  c.time_hosts = true;
  auto report = sim::scenarios::run_ps_scenario(c);
  if (!report) return report.error();
  return std::chrono::duration<double>(report->host_wall).count();
}

/// The median and quartiles of `v` (not empty).
std::array<double, 3> quartiles(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto at = [&v](double q) {
    const double x = q * static_cast<double>(v.size() - 1);
    const auto i = static_cast<std::size_t>(x);
    return i + 1 < v.size() ? v[i] + (x - static_cast<double>(i)) * (v[i + 1] - v[i]) : v[i];
  };
  return {at(0.25), at(0.5), at(0.75)};
}

/// Each job's work per value, replica and step (ns) that its gradients, loss and shard
/// do not explain, as the median of `rounds` rounds. A round measures the gradient of a
/// batch of one, the loss over the samples and the shard's step, then runs each job for 2
/// and for `many` steps (the difference leaves the set-up out): a job's step is a few
/// milliseconds of work less a larger known part, so the rounds keep what is subtracted
/// close in time to what it is subtracted from (the machine drifts over minutes), and
/// the median of single runs is steadier than the difference of two best runs.
Result<std::vector<double>> unexplained_ns(const std::vector<StepJob>& jobs, std::size_t features, int rounds,
                                           std::int64_t many) {
  std::vector<sim::scenarios::PsScenarioConfig> configs;
  for (const auto& job : jobs) {
    auto c = job_config(job, features);
    if (!c) return make_error(c.error().code, "the {} job could not be made: {}", job.name, c.error().message);
    configs.push_back(std::move(*c));
  }
  // Each density's data set, as the jobs' trainers make theirs.
  std::map<double, cps::LogisticData> data;
  for (const auto& job : jobs) {
    if (data.count(job.density) == 0) {
      data.emplace(job.density, cps::make_logistic_data(k_job_samples, features, 1, job.density));
    }
  }
  const auto params = cps::logistic_initial(features);
  std::map<std::string, std::vector<float>> grads;
  const double f = static_cast<double>(features), replicas = static_cast<double>(k_job_replicas);
  std::vector<std::vector<double>> ns(jobs.size());
  const std::int64_t few = 2;
  for (int round = 0; round < rounds; ++round) {
    // Into the storage of the last one, as the simulated trainer's gradients are (the push
    // gives it back), best of two: the first touch of fresh pages is not step work.
    std::map<double, std::pair<double, double>> known_of;  // density -> gradient, loss
    for (const auto& [density, d] : data) {
      const auto indices = cps::logistic_batch(d, 1, 0, 0, k_job_batch);
      known_of[density] = {best_of(2, [&] { (void)cps::logistic_loss(d, indices, params, &grads); }),
                           best_of(2, [&] { (void)cps::logistic_full_loss(d, params); })};
    }
    const double shard = shard_step_seconds(features, static_cast<std::int32_t>(k_job_replicas),
                                            cps::OptimizerKind::sgd, 2);
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      const auto [gradient, loss] = known_of.at(jobs[j].density);
      auto short_run = run_seconds(configs[j], few);
      // A job on sparse data: a few milliseconds a step, of which its first steps' set-up
      // (fresh tables and buffers, their pages first touched) is a large and changing part;
      // four times the steps.
      const std::int64_t steps = jobs[j].density < 1.0 ? 4 * many : many;
      auto long_run = short_run ? run_seconds(configs[j], steps) : short_run;
      if (!long_run) {
        return make_error(long_run.error().code, "the {} step could not be measured: {}", jobs[j].name,
                          long_run.error().message);
      }
      const double per_step = (*long_run - *short_run) / static_cast<double>(steps - few);
      const double known = replicas * gradient + loss + (jobs[j].shard ? shard : 0.0);
      ns[j].push_back((per_step - known) / (replicas * f) * 1e9);
    }
  }
  std::vector<double> out;
  std::string line = fmt::format("step work, {} rounds (median, quartiles):", rounds);
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const auto q = quartiles(ns[j]);
    line += fmt::format("{} {} {:.2f} ({:.2f}-{:.2f})", j == 0 ? "" : ",", jobs[j].name, q[1], q[0], q[2]);
    out.push_back(std::max(0.0, q[1]));
  }
  std::printf("%s\n", line.c_str());
  return out;
}

/// The transport's costs per byte, from bandwidth sessions (processor time, user and
/// system, of both processes per byte one way; a byte is handled at both ends).
struct PerByte {
  double byte_ns = 0;           ///< plaintext, at each end
  double secure_byte_ns = 0;    ///< what encryption adds at each end
  double large_message_us = 0;  ///< a rendezvous message's own cost, at each end
};

/// PerByte from `rounds` rounds of three sessions each, one after the other: 16 MiB
/// messages plaintext, the same encrypted, and 512 KiB messages plaintext (an all-reduce's
/// parts, whose count a large model's step is made of), the same bytes
/// in all. Each round gives its own three figures, from its own sessions only (encryption:
/// the encrypted session less the plaintext one; a rendezvous message: a + b s per
/// message of s bytes solved for a from the two sizes), and each figure is the median
/// of the rounds. A session's processor time per byte lands anywhere from about 0.7 to
/// 1.4 times the median here, whatever its length (sessions four times as long spread as
/// much: something set when a session starts, not noise over time), so the figures come
/// from many short sessions rather than a few long ones; the rounds keep the sessions
/// that are subtracted close in time, as the machine also drifts over minutes.
Result<PerByte> transport_per_byte(transport_bench::SessionPlan plan, int rounds) {
  plan.rtt_iters = 100;
  plan.rate_calls = 0;
  transport_bench::SessionPlan secure = plan;
  secure.secure = true;
  transport_bench::SessionPlan small = plan;
  small.bw_size = std::size_t{1} << 19;
  small.bw_iters = plan.bw_iters * (plan.bw_size / small.bw_size);
  const double s1 = static_cast<double>(small.bw_size), s16 = static_cast<double>(plan.bw_size);
  std::vector<double> plain_ns, secure_ns, large_us;
  for (int round = 0; round < rounds; ++round) {
    double cpu_ns[3] = {};
    const transport_bench::SessionPlan* plans[3] = {&plan, &secure, &small};
    for (int i = 0; i < 3; ++i) {
      const auto figures = transport_bench::run_session(*plans[i]);
      if (!figures.mib_per_s) {
        return make_error(figures.mib_per_s.error().code, "the transport's {} bandwidth could not be measured: {}",
                          i == 1 ? "encrypted" : i == 2 ? "512 KiB" : "plaintext", figures.mib_per_s.error().message);
      }
      if (figures.bw_cpu_ns_per_byte <= 0) {
        return make_error(errc::unavailable, "the transport's processor time could not be read (the server's)");
      }
      cpu_ns[i] = figures.bw_cpu_ns_per_byte;
    }
    plain_ns.push_back(cpu_ns[0] / 2.0);
    secure_ns.push_back((cpu_ns[1] - cpu_ns[0]) / 2.0);
    large_us.push_back((cpu_ns[2] - cpu_ns[0]) / (1.0 / s1 - 1.0 / s16) / 2.0 / 1e3);
  }
  // The median and quartiles of each figure over the rounds (how far one round is from the
  // next, printed so that a run on a noisy machine shows it).
  const auto plain = quartiles(plain_ns), sealed = quartiles(secure_ns), large = quartiles(large_us);
  std::printf("transport, %d rounds (median, quartiles): byte_ns %.3f (%.3f-%.3f), secure_byte_ns %.3f (%.3f-%.3f), "
              "large_message_us %.1f (%.1f-%.1f)\n",
              rounds, plain[1], plain[0], plain[2], sealed[1], sealed[0], sealed[2], large[1], large[0], large[2]);
  return PerByte{plain[1], std::max(0.0, sealed[1]), std::max(0.0, large[1])};
}

/// The logistic-regression gradient, per feature once a call (its accumulators, or on
/// sparse data w's gradient cleared) and per sample and feature (on sparse data: per
/// value other than zero), from batches of B/8 and B (B = 32, fewer for a dense model so
/// large that 64 samples would not fit in 256 MiB); the loss alone over the data set, per
/// sample and feature (per value other than zero). Into `p`'s dense fields, or its sparse
/// ones at a density below 1.
///
/// Timed on every core at once, each thread from its own data sets and parameters and
/// into its own gradients, as a job's replicas are processes that compute theirs with
/// every core busy, each from its own memory. A call reads as a job's step does: the next
/// batch of its data set, from memory. Between two steps of a job the other processes'
/// data sets and steps and its own transport's buffers pass through the cache (four
/// replicas of 1,000,000 features hold 256 MiB of data sets), so each thread cycles
/// through copies enough that all of them together are twice the last-level cache (up to
/// 2 GiB in all, 256 MiB with --quick; threads share copies past that). Rows read again
/// from the cache, a call after another on the same copy, cost about a third less at
/// 1,000,000 features.
void time_gradient_and_loss(sim::CostProfile& p, std::size_t features, bool quick, double density) {
  const bool sparse = density < 1.0;
  const std::size_t samples =
      sparse ? 64 : std::clamp<std::size_t>((std::size_t{64} << 20) / features, std::size_t{8}, std::size_t{64});
  const std::size_t large_batch = std::min<std::size_t>(32, samples), small_batch = large_batch / 8;
  // A sample's values read, and a copy's bytes (its data set and its parameters).
  const double per_sample = sparse ? static_cast<double>(cps::logistic_nonzeros(features, density))
                                   : static_cast<double>(features);
  const std::size_t copy_bytes = sparse ? samples * static_cast<std::size_t>(per_sample) * 8
                                       : (samples + 1) * features * sizeof(float);
  const std::size_t cache = last_level_cache_bytes();
  const std::size_t per_thread =
      std::max<std::size_t>(1, (2 * cache + p.cores * copy_bytes - 1) / (p.cores * copy_bytes));
  const std::size_t copies =
      std::clamp<std::size_t>((quick ? std::size_t{256} << 20 : std::size_t{2} << 30) / copy_bytes, std::size_t{1},
                              p.cores * per_thread);
  const std::vector<cps::LogisticData> data(copies, cps::make_logistic_data(samples, features, 1, density));
  // On sparse data a call reads w at its samples' columns, each read a miss of every cache
  // unless w is in one; a replica's w is the one it has just pulled (in the last-level
  // cache, of a model that fits), so each thread keeps its own w there. Dense data reads w
  // in order, as it streams the samples.
  const std::vector<std::map<std::string, std::vector<float>>> params(sparse ? p.cores : copies,
                                                                     cps::logistic_initial(features));
  const auto params_of = [&](std::size_t t, std::size_t c) -> const std::map<std::string, std::vector<float>>& {
    return params[sparse ? t : c];
  };
  std::vector<std::map<std::string, std::vector<float>>> grads(p.cores);
  // Thread t's calls: its copies in turn (t, t + cores, ...), each the batch after its last.
  std::vector<std::size_t> calls(p.cores, 0);
  const auto next_copy = [&](std::size_t t) { return (t + calls[t]++ * p.cores) % copies; };
  const auto gradient_seconds = [&](std::size_t batch) {
    return loaded_median(1, p.cores, [&](std::size_t t) {
      const auto step = static_cast<std::int64_t>(calls[t]);
      const std::size_t c = next_copy(t);
      (void)cps::logistic_loss(data[c], cps::logistic_batch(data[c], 1, 0, step, batch), params_of(t, c),
                               &grads[t]);
    });
  };
  // In rounds, each a call a thread of each batch and of the loss, each figure the median
  // of the rounds': the machine's memory moves by a third over minutes here, and a slope
  // taken between two sizes timed minutes apart moves with it.
  const double f = static_cast<double>(features), extra = static_cast<double>(large_batch - small_batch);
  std::vector<double> slope_ns, call_ns, loss_ns;
  const int rounds = quick ? 2 : 7;
  for (int round = 0; round < rounds; ++round) {
    const double of_small = gradient_seconds(small_batch), of_large = gradient_seconds(large_batch);
    slope_ns.push_back((of_large - of_small) / (extra * per_sample) * 1e9);
    call_ns.push_back((of_small * 1e9 - static_cast<double>(small_batch) * per_sample * slope_ns.back()) / f);
    const double loss = loaded_median(1, p.cores, [&](std::size_t t) {
      const std::size_t c = next_copy(t);
      (void)cps::logistic_full_loss(data[c], params_of(t, c));
    });
    loss_ns.push_back(loss / (static_cast<double>(samples) * per_sample) * 1e9);
  }
  const auto slope = quartiles(slope_ns), per_call = quartiles(call_ns), whole = quartiles(loss_ns);
  (sparse ? p.sparse_gradient_ns : p.gradient_ns) = std::max(0.0, slope[1]);
  (sparse ? p.sparse_gradient_call_ns : p.gradient_call_ns) = std::max(0.0, per_call[1]);
  (sparse ? p.sparse_loss_ns : p.loss_ns) = whole[1];
  std::printf("%sgradient and loss, %d rounds (median, quartiles; %zu copies of a %.1f MiB data set%s, last-level "
              "cache %.1f MiB): %sgradient_ns %.3f (%.3f-%.3f), %sgradient_call_ns %.3f (%.3f-%.3f), %sloss_ns %.3f "
              "(%.3f-%.3f)\n",
              sparse ? "sparse " : "", rounds, copies, static_cast<double>(copy_bytes) / (1 << 20),
              sparse ? fmt::format(" at density {:g}", density).c_str() : "", static_cast<double>(cache) / (1 << 20),
              sparse ? "sparse_" : "", slope[1], slope[0], slope[2], sparse ? "sparse_" : "", per_call[1],
              per_call[0], per_call[2], sparse ? "sparse_" : "", whole[1], whole[0], whole[2]);
}

}  // namespace

Result<sim::CostProfile> calibrate(const std::string& self_exe, bool quick, std::size_t model_features,
                                   double density) {
  const std::size_t features = model_features > 0 ? model_features : quick ? 65536 : 1048576;
  // A large model's simulated jobs take seconds a step: fewer runs of each.
  const bool large = features > (std::size_t{1} << 22);
  const int runs = quick || large ? 2 : 5;
  sim::CostProfile p;
  char host[256] = {};
  p.machine = ::gethostname(host, sizeof host - 1) == 0 ? host : "unknown";
  p.cores = std::max(1U, std::thread::hardware_concurrency());
  // memcpy, one core.
  const std::size_t big = std::size_t{64} << 20;
  std::vector<char> from(big, 1), to(big, 0);
  p.memcpy_gbps = static_cast<double>(big) / best_of(runs, [&] { std::memcpy(to.data(), from.data(), big); }) / 1e9;
  // The shard's step: n (sgd + R sum); the sum per value per replica from R = 1 and 4.
  const std::size_t n = std::max(features, quick ? (std::size_t{1} << 20) : (std::size_t{4} << 20));
  const double one = shard_step_seconds(n, 1, cps::OptimizerKind::sgd, runs);
  const double four = shard_step_seconds(n, 4, cps::OptimizerKind::sgd, runs);
  const double adam = shard_step_seconds(n, 1, cps::OptimizerKind::adam, runs);
  p.sum_ns = std::max(0.0, (four - one) / 3.0 / static_cast<double>(n) * 1e9);
  p.sgd_ns = std::max(0.0, one / static_cast<double>(n) * 1e9 - p.sum_ns);
  p.adam_ns = std::max(0.0, adam / static_cast<double>(n) * 1e9 - p.sum_ns);
  p.partition_ns = partition_seconds(n, runs) / static_cast<double>(n) * 1e9;
  // Sparse data's figures at the model's density, or (a dense model) at 1 in 1,000.
  time_gradient_and_loss(p, features, quick, 1.0);
  time_gradient_and_loss(p, features, quick, density < 1.0 ? density : 0.001);
  // A replica's own all-reduce work per value, by compressor; the PS job's wire work per
  // value beyond the shard's sum and update (one shard, SGD, four pushes a step); the same
  // with w's gradient sparse, on the PS (Parallax's: apiary ps takes --sparse marks on
  // all-reduce and mixed strategies only) and all-reduced (its touched rows gathered from
  // every replica and summed): on dense data (a batch touches every row), and on sparse
  // data at two densities, the model's and 8 times it (a batch of one touches that many
  // rows), which give the work per value of w (its touched rows found, its pull) and per
  // row value sent or gathered. (Rows are summed through a table of w's rows when a step
  // touches many, a hash map when it touches few: the dense data's figure is its own.)
  namespace cs = core::strategy;
  const auto compressed = [](cs::ArCompressor compressor) {
    cs::BuilderOptions options;
    options.compressor = compressor;
    return options;
  };
  using Ar = pb::autodist::AllReduceSynchronizer;
  const double few_rows = density < 1.0 ? density : 0.001, more_rows = std::min(0.5, 8.0 * few_rows);
  const std::vector<StepJob> jobs = {
      {"allreduce_ns", &sim::CostProfile::allreduce_ns, cs::BuilderKind::all_reduce, {}},
      {"allreduce_fp16_ns", &sim::CostProfile::allreduce_fp16_ns, cs::BuilderKind::all_reduce,
       compressed(Ar::HorovodCompressor)},
      {"allreduce_fp16_ef_ns", &sim::CostProfile::allreduce_fp16_ef_ns, cs::BuilderKind::all_reduce,
       compressed(Ar::HorovodCompressorEF)},
      {"ps_ns", &sim::CostProfile::ps_ns, cs::BuilderKind::ps, {}, false, true},
      {"allreduce_sparse_ns", &sim::CostProfile::allreduce_sparse_ns, cs::BuilderKind::all_reduce, {}, true},
      {"ps_sparse_ns", &sim::CostProfile::ps_sparse_ns, cs::BuilderKind::parallax, {}, true, true},
      {"allreduce_sparse_few_rows", &sim::CostProfile::allreduce_sparse_base_ns, cs::BuilderKind::all_reduce, {},
       true, false, few_rows},
      {"allreduce_sparse_more_rows", &sim::CostProfile::allreduce_sparse_row_ns, cs::BuilderKind::all_reduce, {},
       true, false, more_rows},
      {"ps_sparse_few_rows", &sim::CostProfile::ps_sparse_base_ns, cs::BuilderKind::parallax, {}, true, false,
       few_rows},
      {"ps_sparse_more_rows", &sim::CostProfile::ps_sparse_row_ns, cs::BuilderKind::parallax, {}, true, false,
       more_rows},
  };
  // Rounds and the long run's steps: small models (a step of a few tens of milliseconds)
  // get more rounds of longer runs; a large model's steps take seconds.
  auto work = unexplained_ns(jobs, features, quick ? 2 : large ? 3 : 7, quick || large ? 6 : 10);
  if (!work) return work.error();
  for (std::size_t j = 0; j < jobs.size(); ++j) p.*(jobs[j].field) = (*work)[j];
  // Per replica and value of w, a job with a share t of w's rows touched by each batch of
  // one: a + b R t all-reduced (each replica gathers R batches' rows), a + b t on a PS.
  const auto share = [features](double density) {
    return static_cast<double>(cps::logistic_nonzeros(features, density)) / static_cast<double>(features);
  };
  const double t_few = share(few_rows), t_more = share(more_rows);
  const double r = static_cast<double>(k_job_replicas);
  const auto split = [&](double& base, double& row, double times) {
    const double few = base, more = row;
    row = t_more > t_few ? std::max(0.0, (more - few) / (times * (t_more - t_few))) : 0.0;
    base = std::max(0.0, few - row * times * t_few);
  };
  split(p.allreduce_sparse_base_ns, p.allreduce_sparse_row_ns, r);
  split(p.ps_sparse_base_ns, p.ps_sparse_row_ns, 1.0);
  std::printf("sparse data: allreduce_sparse_base_ns %.3f, allreduce_sparse_row_ns %.3f, ps_sparse_base_ns %.3f, "
              "ps_sparse_row_ns %.3f\n",
              p.allreduce_sparse_base_ns, p.allreduce_sparse_row_ns, p.ps_sparse_base_ns, p.ps_sparse_row_ns);
  // The transport between two processes over loopback tcp (plaintext, as a trusted
  // cluster runs): 64 B round trips and calls/s with 64 in flight here, 16 MiB one way
  // below.
  transport_bench::SessionPlan plan;
  plan.exe = self_exe;
  plan.rtt_iters = quick ? 500 : 3000;
  plan.rate_calls = quick ? 5000 : 20000;
  plan.idle = std::chrono::milliseconds(quick ? 500 : 2000);
  const auto figures = transport_bench::run_session(plan);
  if (!figures.rtt || !figures.calls_per_s) {
    const Error e = !figures.rtt ? figures.rtt.error() : figures.calls_per_s.error();
    return make_error(e.code, "the transport could not be measured: {}", e.message);
  }
  // Processor time, user and system, of both processes: a call is a message each way,
  // each handled at both ends. (Without the server's figures: from the rate, the ends
  // working in parallel.)
  p.message_us = figures.rate_cpu_us_per_call > 0 ? figures.rate_cpu_us_per_call / 4.0
                                                  : 1e6 / (2.0 * *figures.calls_per_s);
  plan.bw_iters = quick ? 8 : 16;
  auto per_byte = transport_per_byte(plan, quick ? 2 : 21);
  if (!per_byte) return per_byte.error();
  p.byte_ns = per_byte->byte_ns;
  p.secure_byte_ns = per_byte->secure_byte_ns;
  p.large_message_bytes = static_cast<double>(transport::ucx::k_rndv_threshold_bytes);
  p.large_message_us = per_byte->large_message_us;
  p.latency_us = std::max(0.0, figures.rtt->median_us / 2.0 - 2.0 * p.message_us);
  // An idle process's own processor time a second, and what a lone call costs beyond
  // four message ends (less both processes' idle time over its round trip): the threads
  // woken at the two ends that receive, one message each.
  p.idle_cpu_us_per_s = std::max(0.0, figures.idle_cpu_us_per_s);
  if (figures.rtt->cpu_us_per_call >= 0) {
    const double idle_during = 2.0 * p.idle_cpu_us_per_s * figures.rtt->median_us * 1e-6;
    p.idle_message_us = std::max(0.0, (figures.rtt->cpu_us_per_call - idle_during - 4.0 * p.message_us) / 2.0);
  }
  return p;
}

}  // namespace apiary::bench
