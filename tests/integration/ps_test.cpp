// Parameter-server training between real processes over UCX on loopback: `apiary ps`
// PS processes (one per PS device of the strategy) and four replica processes training
// logistic regression. BSP must equal single-process SGD on the concatenated batch;
// SSP must keep every replica within its staleness bound behind a straggler; a killed
// PS process or replica must end the others with an error naming what failed.
// `apiary ps --embedded` runs the same job in one process and must equal the same SGD.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "core/ps/checkpoint.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/ps/plan.hpp"
#include "core/strategy/builders.hpp"
#include "core/strategy/resource_spec.hpp"
#include "core/strategy/strategy_io.hpp"
#include "tests/integration/ps_job.hpp"
#include "tests/support/apiary_command.hpp"

using namespace apiary;
using namespace apiary::testing::ps_job;
using namespace std::chrono_literals;

namespace {

/// A PS load-balancing job in a directory named after `name`: its PS processes, and
/// replicas that train until something kills them, with step deadlines `timeout_ms` away.
struct EndlessJob {
  const Job job;
  Servers servers;
  std::vector<std::unique_ptr<testing::Process>> procs;

  EndlessJob(const std::string& name, int timeout_ms)
      : job(make_job(cs::BuilderKind::ps_load_balancing, {}, name, true)) {
    start_servers(job, servers);
    procs = start_replicas(job, servers.peers,
                           "--steps 100000 --step-delay-ms 5 --timeout-ms " + std::to_string(timeout_ms));
  }
};

/// `job` run embedded (every PS device and replica in one process) with `extra`, which
/// must succeed: an unbroken run to compare with.
Run embedded_run(const Job& job, const std::string& extra) {
  auto proc = spawn_ps("--embedded --stop-on-stdin-eof " + common_args(job) + extra);
  auto run = finish(*proc);
  INFO("the embedded job printed:\n" << run.text);
  REQUIRE(run.rc == 0);
  return run;
}

}  // namespace

TEST_CASE("BSP over 4 replica processes equals single-process SGD on the concatenated batch", "[ps][integration]") {
  auto builder = GENERATE(cs::BuilderKind::ps_load_balancing, cs::BuilderKind::partitioned_ps);
  const std::int64_t steps = 12;
  const Job job = make_job(builder, {}, "bsp" + std::to_string(static_cast<int>(builder)), true);
  INFO("PS devices: " << job.plan.servers.size() << ", shards: " << job.plan.shards.size());
  REQUIRE(job.plan.servers.size() >= 2);
  Servers servers;
  start_servers(job, servers);
  const auto runs = finish_all(start_replicas(job, servers.peers, "--steps " + std::to_string(steps)));
  const auto expected = reference_sgd(steps);
  for (int r = 0; r < k_replicas; ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    REQUIRE(runs[r].rc == 0);
    // Every step is computed on the parameters of exactly the steps before it.
    const auto sv = step_versions(runs[r]);
    REQUIRE(sv.size() == static_cast<std::size_t>(steps));
    for (const auto& [step, version] : sv) CHECK(version == step);
    check_close(runs[r], expected);
    // Every replica reads the same final parameters.
    for (const auto& [name, values] : expected) CHECK(final_values(runs[r], name) == final_values(runs[0], name));
  }
}

TEST_CASE("an --insecure job trains as an encrypted one, and replicas that did not choose it are refused",
          "[ps][integration]") {
  const std::int64_t steps = 6;
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, {}, "insecure", true);
  Servers servers;
  start_servers(job, servers, "--insecure");
  SECTION("every process plaintext: the same SGD") {
    const auto runs = finish_all(start_replicas(job, servers.peers, "--insecure --steps " + std::to_string(steps)));
    const auto expected = reference_sgd(steps);
    for (int r = 0; r < k_replicas; ++r) {
      INFO("replica " << r << " printed:\n" << runs[r].text);
      REQUIRE(runs[r].rc == 0);
      check_close(runs[r], expected);
    }
  }
  SECTION("encrypted replicas and plaintext PS processes: each replica fails, saying why") {
    const auto runs = finish_all(start_replicas(job, servers.peers, "--steps " + std::to_string(steps)));
    for (int r = 0; r < k_replicas; ++r) {
      INFO("replica " << r << " printed:\n" << runs[r].text);
      CHECK(runs[r].rc != 0);
      CHECK_THAT(runs[r].text, Catch::Contains("start both with --insecure, or neither"));
    }
  }
}

TEST_CASE("SSP keeps every replica within its staleness bound behind a straggler", "[ps][integration]") {
  const std::int32_t staleness = 2;
  const std::int64_t steps = 12;
  cs::BuilderOptions options;
  options.staleness = staleness;
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, options, "ssp", true);
  Servers servers;
  start_servers(job, servers);
  // The last replica sleeps 150 ms per step; the others do not wait at all.
  auto procs =
      start_replicas(job, servers.peers, "--steps " + std::to_string(steps), k_replicas, "--step-delay-ms 150");
  std::int64_t most_ahead = 0;
  for (int r = 0; r < k_replicas; ++r) {
    const auto run = finish(*procs[r]);
    INFO("replica " << r << " printed:\n" << run.text);
    // A replica that saw a bound broken exits with an error (the driver checks every pull).
    REQUIRE(run.rc == 0);
    const auto sv = step_versions(run);
    REQUIRE(sv.size() == static_cast<std::size_t>(steps));
    for (const auto& [step, version] : sv) {
      CHECK(step - version <= staleness);
      CHECK(version <= step);
      if (r != k_replicas - 1) most_ahead = std::max(most_ahead, step - version);
    }
  }
  // The fast replicas did run ahead of the straggler (else the test proves nothing).
  CHECK(most_ahead >= 1);
}

TEST_CASE("a killed PS process ends every replica with an error naming it", "[ps][integration]") {
  EndlessJob job("killps", 20000);
  const Servers& servers = job.servers;
  const auto& procs = job.procs;
  // Wait for training to run, then kill the first PS process.
  std::string chief_text;
  const bool training = read_until(*procs[0], "step 3 ", 60s, chief_text).has_value();
  INFO("chief printed:\n" << chief_text);
  REQUIRE(training);
  const auto runs = kill_then_finish(*servers.procs[0], procs, k_replicas);
  const bool named_dead = each_failed(runs, [&](const Run& run) {
    CHECK(run.text.find("apiary ps: ") != std::string::npos);
    CHECK(run.text.find(" on PS localhost:CPU:") != std::string::npos);
    return run.text.find("on PS " + servers.devices[0]) != std::string::npos &&
           (run.text.find("peer_down") != std::string::npos || run.text.find("unavailable") != std::string::npos);
  });
  CHECK(named_dead);
}

TEST_CASE("a killed replica ends the others with an error naming it, before any deadline", "[ps][integration]") {
  // Deadlines far away: the PS processes must tell the others from the lost session.
  EndlessJob job("killreplica", 600000);
  const auto& procs = job.procs;
  std::string seen;
  REQUIRE(read_until(*procs[k_replicas - 1], "step 3 ", 60s, seen));
  const auto runs = kill_then_finish(*procs[k_replicas - 1], procs, k_replicas - 1);
  each_failed(runs, [](const Run& run) {
    CHECK(run.text.find("unavailable") != std::string::npos);
    CHECK(run.text.find("replica 3 at ") != std::string::npos);
    CHECK(run.text.find("went down") != std::string::npos);
    return true;
  });
}

TEST_CASE("with --drop-lost-after-ms, BSP goes on without a killed replica: the others finish alike",
          "[ps][integration]") {
  const std::int64_t steps = 30;
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, {}, "dropreplica", true);
  Servers servers;
  start_servers(job, servers, "--drop-lost-after-ms 300");
  auto procs = start_replicas(job, servers.peers, "--steps " + std::to_string(steps) + " --step-delay-ms 20");
  std::string seen;
  REQUIRE(read_until(*procs[k_replicas - 1], "step 3 ", 60s, seen));
  const auto runs = kill_then_finish(*procs[k_replicas - 1], procs, k_replicas - 1);
  std::vector<float> first;
  for (int r = 0; r < k_replicas - 1; ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    REQUIRE(runs[r].rc == 0);
    // Every step computed on exactly the steps before it, after the drop too.
    const auto sv = step_versions(runs[r]);
    REQUIRE(sv.size() == static_cast<std::size_t>(steps));
    for (const auto& [step, version] : sv) CHECK(version == step);
    const auto w = final_values(runs[r], "logreg/w:0");
    REQUIRE_FALSE(w.empty());
    if (first.empty()) first = w;
    CHECK(w == first);  // synchronous: the replicas left hold the same bits
  }
}

TEST_CASE("BSP with --drop-lost-after-ms: a killed replica started again rejoins the running job where it stands",
          "[ps][integration]") {
  const std::int64_t steps = 40;
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, {}, "bsprejoin", true);
  Servers servers;
  start_servers(job, servers, "--drop-lost-after-ms 200");
  const std::string args = "--steps " + std::to_string(steps) + " --step-delay-ms 20";
  auto procs = start_replicas(job, servers.peers, args);
  std::string seen;
  REQUIRE(read_until(*procs[k_replicas - 1], "step 3 ", 60s, seen));
  procs[k_replicas - 1]->kill(SIGKILL);
  REQUIRE(procs[k_replicas - 1]->wait(10s) == 128 + SIGKILL);
  // The others go on once it is dropped; started again, it takes part from the first
  // step none of them has pushed, and every replica ends with the same parameters.
  REQUIRE(read_until(*procs[0], "step 8 ", 60s, seen));
  procs[k_replicas - 1] = spawn_ps(replica_role(k_replicas - 1) + " --stop-on-stdin-eof " + common_args(job) +
                                   " --peers" + servers.peers + " " + args);
  const auto runs = finish_all(procs);
  std::vector<float> first;
  for (int r = 0; r < k_replicas; ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    REQUIRE(runs[r].rc == 0);
    const auto sv = step_versions(runs[r]);
    for (const auto& [step, version] : sv) CHECK(version == step);  // BSP, the rejoined replica too
    const auto w = final_values(runs[r], "logreg/w:0");
    REQUIRE_FALSE(w.empty());
    if (first.empty()) first = w;
    CHECK(w == first);
  }
  const Run& back = runs[k_replicas - 1];
  const auto sv = step_versions(back);
  REQUIRE_FALSE(sv.empty());
  CHECK(sv.front().first > 8);  // it joined where the job stood, not at step 0
  CHECK(sv.back().first == steps - 1);
  CHECK(sv.size() == static_cast<std::size_t>(steps - sv.front().first));
  CHECK(back.text.find(fmt::format("replica {} rejoined the running job at step {}", k_replicas - 1,
                                   sv.front().first)) != std::string::npos);
}

TEST_CASE("async: a killed replica leaves the others going, and started again it joins and finishes",
          "[ps][integration]") {
  const std::int64_t steps = 30;
  cs::BuilderOptions options;
  options.sync = false;
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, options, "asyncrejoin", true);
  Servers servers;
  start_servers(job, servers);
  const std::string args = "--steps " + std::to_string(steps) + " --step-delay-ms 20";
  auto procs = start_replicas(job, servers.peers, args);
  std::string seen;
  REQUIRE(read_until(*procs[k_replicas - 1], "step 3 ", 60s, seen));
  procs[k_replicas - 1]->kill(SIGKILL);
  REQUIRE(procs[k_replicas - 1]->wait(10s) == 128 + SIGKILL);
  // Started again, the same replica joins the running job and trains its steps.
  procs[k_replicas - 1] = spawn_ps(replica_role(k_replicas - 1) + " --stop-on-stdin-eof " + common_args(job) +
                                   " --peers" + servers.peers + " " + args);
  const auto runs = finish_all(procs);
  for (int r = 0; r < k_replicas; ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    CHECK(runs[r].rc == 0);
    CHECK_FALSE(final_values(runs[r], "logreg/w:0").empty());
  }
}

TEST_CASE("an embedded job (every PS device and replica in one process) equals single-process SGD",
          "[ps][integration]") {
  auto builder = GENERATE(cs::BuilderKind::ps_load_balancing, cs::BuilderKind::partitioned_ps);
  const std::int64_t steps = 12;
  const Job job = make_job(builder, {}, "embedded" + std::to_string(static_cast<int>(builder)), true);
  REQUIRE(job.plan.servers.size() >= 2);
  auto proc = spawn_ps("--embedded --stop-on-stdin-eof " + common_args(job) + " --steps " + std::to_string(steps));
  const auto run = finish(*proc);
  INFO("the embedded job printed:\n" << run.text);
  REQUIRE(run.rc == 0);
  // Every replica's steps, interleaved: each computed on exactly the steps before it.
  const auto sv = step_versions(run);
  REQUIRE(sv.size() == static_cast<std::size_t>(steps) * k_replicas);
  for (const auto& [step, version] : sv) CHECK(version == step);
  // Every replica prints its final parameters: all equal the reference.
  const auto expected = reference_sgd(steps);
  for (const auto& [name, values] : expected) {
    std::size_t finals = 0;
    for (const auto& line : run.lines) {
      std::istringstream in(line);
      std::string word, var;
      in >> word >> var;
      if (word != "final" || var != name) continue;
      ++finals;
      std::vector<float> got;
      float v = 0;
      while (in >> v) got.push_back(v);
      REQUIRE(got.size() == values.size());
      for (std::size_t i = 0; i < values.size(); ++i) CHECK(got[i] == Approx(values[i]).margin(1e-5));
    }
    CHECK(finals == static_cast<std::size_t>(k_replicas));
  }
}

TEST_CASE("BSP gives the same bits in processes with a straggler, embedded and simulated: shards sum in replica order",
          "[ps][integration]") {
  // The pushes of a step reach the shards in different orders in the two runs (the last
  // replica of the processes sleeps each step); a sum in arrival order would differ in
  // its last bits.
  const std::int64_t steps = 6;
  const Job job = make_job(cs::BuilderKind::partitioned_ps, {}, "bits", true);
  Servers servers;
  start_servers(job, servers);
  const auto runs = finish_all(
      start_replicas(job, servers.peers, "--steps " + std::to_string(steps), k_replicas, "--step-delay-ms 40"));
  auto embedded_proc =
      spawn_ps("--embedded --stop-on-stdin-eof " + common_args(job) + " --steps " + std::to_string(steps));
  const auto embedded = finish(*embedded_proc);
  INFO("the embedded job printed:\n" << embedded.text);
  REQUIRE(embedded.rc == 0);
  // The simulator, its last replica a straggler too, predicts the same bits.
  auto sim_proc = testing::spawn_apiary("sim ps " + common_args(job) + " --steps " + std::to_string(steps) +
                                        " --straggler-ms 40 2>&1");
  const auto simulated = finish(*sim_proc);
  INFO("the simulated job printed:\n" << simulated.text);
  REQUIRE(simulated.rc == 0);
  for (const auto& [name, values] : reference_sgd(steps)) {
    const auto want = final_values(embedded, name, 0);
    REQUIRE(want.size() == values.size());
    CHECK(final_values(simulated, name) == want);
    for (int r = 0; r < k_replicas; ++r) {
      INFO("replica " << r << " printed:\n" << runs[r].text);
      REQUIRE(runs[r].rc == 0);
      CHECK(final_values(runs[r], name) == want);
    }
  }
}

TEST_CASE("a partitioned job's checkpoint, written by the chief only, restores into an unpartitioned job",
          "[ps][integration]") {
  // Six steps partitioned (PartitionedPS), saved; six more unpartitioned (PSLoadBalancing)
  // from the checkpoint, on the data of steps 6-11: twelve steps of SGD in all.
  const std::int64_t steps = 6;
  const Job first = make_job(cs::BuilderKind::partitioned_ps, {}, "ckpt_partitioned", true);
  REQUIRE(first.plan.shards.size() > first.plan.variables.size());  // something is partitioned
  const std::string saved = first.dir + "/job.ckpt";
  std::vector<Run> runs;
  {
    Servers servers;
    start_servers(first, servers);
    std::vector<std::unique_ptr<testing::Process>> procs;
    for (int r = 0; r < k_replicas; ++r) {
      // Every role is given --save; only the chief writes.
      const std::string save = r == 0 ? " --save " + saved : fmt::format(" --save {}/worker{}.ckpt", first.dir, r);
      procs.push_back(spawn_ps(replica_role(r) + save + " --stop-on-stdin-eof " + common_args(first) + " --peers" +
                               servers.peers + " --steps " + std::to_string(steps)));
    }
    runs = finish_all(procs);
  }
  for (int r = 0; r < k_replicas; ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    REQUIRE(runs[r].rc == 0);
    CHECK_FALSE(std::filesystem::exists(fmt::format("{}/worker{}.ckpt", first.dir, r)));
  }
  CHECK(runs[0].text.find("checkpoint " + saved + " step 6") != std::string::npos);
  std::ifstream in(saved, std::ios::binary);
  REQUIRE(in);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto checkpoint = cps::decode_checkpoint(bytes);
  REQUIRE(checkpoint.ok());
  CHECK(checkpoint->step == steps);
  CHECK(cps::check_checkpoint(*checkpoint, first.plan.variables).ok());
  for (const auto& v : first.plan.variables) CHECK(checkpoint->values.at(v.name) == final_values(runs[0], v.name));

  const Job second = make_job(cs::BuilderKind::ps_load_balancing, {}, "ckpt_whole", true);
  REQUIRE(second.plan.shards.size() == second.plan.variables.size());  // nothing is partitioned
  Servers servers;
  start_servers(second, servers, "--restore " + saved);
  auto procs = start_replicas(second, servers.peers, "--steps " + std::to_string(steps) + " --restore " + saved);
  const auto expected = reference_sgd(2 * steps);
  for (int r = 0; r < k_replicas; ++r) {
    const auto run = finish(*procs[r]);
    INFO("replica " << r << " printed:\n" << run.text);
    REQUIRE(run.rc == 0);
    check_close(run, expected);
  }
}

TEST_CASE("a checkpoint carries the optimizer's state: 6 + 6 steps give the bits of 12, Adam and momentum",
          "[ps][integration]") {
  // PS (saved partitioned, restored unpartitioned) with Adam, and all-reduce with momentum:
  // the restored job continues with the slots and update count, so its parameters are
  // bit for bit those of the job that never stopped.
  const Job partitioned = make_job(cs::BuilderKind::partitioned_ps, {}, "ckpt_adam_part", true);
  const Job whole = make_job(cs::BuilderKind::ps_load_balancing, {}, "ckpt_adam_whole", true);
  const Job ar = make_job(cs::BuilderKind::all_reduce, {}, "ckpt_momentum_ar", false);
  struct Case {
    const Job* save_with;
    const Job* restore_with;
    std::string optimizer;
  };
  for (const auto& c : {Case{&partitioned, &whole, "adam"}, Case{&ar, &ar, "momentum"}}) {
    INFO("optimizer " << c.optimizer);
    const std::string saved = c.save_with->dir + "/" + c.optimizer + ".ckpt";
    auto embedded = [&](const Job& job, const std::string& args, const std::string& optimizer = "") {
      auto p = spawn_ps("--embedded --stop-on-stdin-eof " + common_args(job) + " --optimizer " +
                        (optimizer.empty() ? c.optimizer : optimizer) + args);
      auto run = finish(*p);
      INFO(run.text);
      REQUIRE(run.rc == 0);
      return run;
    };
    const auto straight = embedded(*c.restore_with, " --steps 12");
    (void)embedded(*c.save_with, " --steps 6 --save " + saved);
    const auto resumed = embedded(*c.restore_with, " --steps 6 --restore " + saved);
    CHECK(resumed.text.find("starts afresh") == std::string::npos);
    for (const auto& v : whole.plan.variables) {
      INFO(v.name);
      const auto want = final_values(straight, v.name, 0);
      REQUIRE_FALSE(want.empty());
      CHECK(final_values(resumed, v.name, 0) == want);
    }
    // Another optimizer than the checkpoint's: the values are restored, its state is not.
    const auto other = embedded(*c.restore_with, " --steps 1 --restore " + saved, "sgd");
    CHECK(other.text.find("restore: the checkpoint's optimizer state is for " + c.optimizer +
                          ", this job runs sgd: its optimizer starts afresh") != std::string::npos);
  }
}

TEST_CASE("periodic checkpoints keep one every N steps, and resuming from one gives the bits of the run",
          "[ps][integration]") {
  // Adam, 5 steps, a checkpoint every 2 (steps 2 and 4) and at the end (5), each in its
  // own file; 1 step from step 4's gives the bits of the 5-step run. PS and all-reduce.
  const Job ps = make_job(cs::BuilderKind::partitioned_ps, {}, "ckpt_every_ps", true);
  const Job ar = make_job(cs::BuilderKind::all_reduce, {}, "ckpt_every_ar", false);
  for (const Job* job : {&ps, &ar}) {
    INFO("strategy " << job->strategy);
    auto embedded = [&](const std::string& args) {
      auto p = spawn_ps("--embedded --stop-on-stdin-eof " + common_args(*job) + " --optimizer adam" + args);
      auto run = finish(*p);
      INFO(run.text);
      REQUIRE(run.rc == 0);
      return run;
    };
    const std::string pattern = job->dir + "/every-{step}.ckpt";
    const auto kept = embedded(" --steps 5 --save-every 2 --save " + pattern);
    for (const int step : {2, 4, 5}) {
      const std::string path = job->dir + "/every-" + std::to_string(step) + ".ckpt";
      CHECK(kept.text.find("checkpoint " + path + " step " + std::to_string(step)) != std::string::npos);
      CHECK(std::filesystem::exists(path));
    }
    CHECK_FALSE(std::filesystem::exists(job->dir + "/every-3.ckpt"));
    const auto resumed = embedded(" --steps 1 --restore " + job->dir + "/every-4.ckpt");
    for (const auto& v : ps.plan.variables) {
      INFO(v.name);
      const auto want = final_values(kept, v.name, 0);
      REQUIRE_FALSE(want.empty());
      CHECK(final_values(resumed, v.name, 0) == want);
    }
  }
  auto p = spawn_ps("--embedded " + common_args(ps) + " --steps 1 --save-every 2");
  const auto refused = finish(*p);
  CHECK(refused.rc == 2);
  CHECK(refused.text.find("--save-every 2: expected --save PATH too") != std::string::npos);
  // A data set larger than a replica holds is refused before anything starts.
  p = spawn_ps(fmt::format("--embedded --strategy {} --resource-spec {} --features 33554432 --samples 64", ps.strategy,
                           ps.spec));
  const auto too_big = finish(*p);
  CHECK(too_big.rc == 2);
  CHECK(too_big.text.find("64 samples x 33554432 features: more data than a replica holds") != std::string::npos);
  p = spawn_ps(fmt::format("--embedded --strategy {} --resource-spec {} --features 33554433", ps.strategy, ps.spec));
  CHECK(finish(*p).rc != 0);
}

TEST_CASE("a job whose PS process was killed goes on from its last checkpoint to the bits of an unbroken run",
          "[ps][integration]") {
  // Adam, checkpoints every 2 steps; the first PS process is killed after step 4's
  // checkpoint; the job restarts from it and finishes its 10 steps.
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, {}, "ckpt_crash", true);
  const std::int64_t total = 10;
  const std::string adam = " --optimizer adam", pattern = job.dir + "/crash-{step}.ckpt";
  std::string last;  // the newest checkpoint the chief wrote before the kill
  {
    Servers servers;
    start_servers(job, servers, adam);
    auto procs = start_replicas(job, servers.peers,
                                "--steps " + std::to_string(total) + " --step-delay-ms 200 --save-every 2 --save " +
                                    pattern + adam);
    std::string chief_text;
    while (auto line = procs[0]->read_line(60s)) {
      chief_text += *line + "\n";
      if (line->rfind("checkpoint ", 0) == 0) last = line->substr(11, line->find(" step ") - 11);
      if (line->rfind("checkpoint " + job.dir + "/crash-4.ckpt", 0) == 0) break;
    }
    INFO("chief printed:\n" << chief_text);
    REQUIRE(last == job.dir + "/crash-4.ckpt");
    servers.procs[0]->kill(SIGKILL);
    for (auto& p : procs) CHECK(finish(*p).rc != 0);  // the job fails, naming the PS
  }
  Servers servers;
  start_servers(job, servers, adam + " --restore " + last);
  const auto runs = finish_all(
      start_replicas(job, servers.peers, "--steps " + std::to_string(total - 4) + " --restore " + last + adam));
  const auto unbroken = embedded_run(job, adam + " --steps " + std::to_string(total));
  for (int r = 0; r < k_replicas; ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    REQUIRE(runs[r].rc == 0);
    for (const auto& v : job.plan.variables) CHECK(final_values(runs[r], v.name) == final_values(unbroken, v.name, 0));
  }
}

namespace {

/// Kills the first PS process of `servers`, then starts it again at its address with
/// --resume and `args` once the replicas found it gone; what it printed until it listens.
std::string restart_first_ps(const Job& job, Servers& servers, const std::string& args) {
  const std::string device = servers.devices[0];
  const std::string entry = " " + device + "=";
  const auto at = servers.peers.find(entry) + entry.size();
  const std::string address = servers.peers.substr(at, servers.peers.find(' ', at) - at);
  servers.procs[0]->kill(SIGKILL);
  REQUIRE(servers.procs[0]->wait(10s) == 128 + SIGKILL);
  std::this_thread::sleep_for(1s);  // the replicas find it gone and wait
  servers.procs[0] = spawn_ps("--role ps --stop-on-stdin-eof --device " + device + " --listen " + address +
                              " --resume " + common_args(job) + args);
  std::string printed;
  REQUIRE(read_until(*servers.procs[0], " listening ", 30s, printed));
  return printed;
}

}  // namespace

TEST_CASE("a killed PS process started again with --resume: the replicas replay the steps since its checkpoint "
          "and end with an unbroken run's bits", "[ps][integration]") {
  // Adam, a checkpoint every 4 steps; the first PS process is killed after the chief's
  // step 6 (its latest checkpoint: step 4) and started again at its address with
  // --resume. The replicas wait for it, replay steps 4.. to it, and the job goes on.
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, {}, "resume", true);
  const std::int64_t total = 16;
  const std::string adam = " --optimizer adam", save = " --save " + job.dir + "/resume-{step}.ckpt";
  Servers servers;
  start_servers(job, servers, adam + save);
  auto procs = start_replicas(job, servers.peers,
                              "--steps " + std::to_string(total) + " --step-delay-ms 100 --save-every 4 " +
                                  "--ps-restart-wait-ms 60000" + save + adam);
  std::string seen;
  REQUIRE(read_until(*procs[0], "step 6 ", 60s, seen));
  INFO("chief printed:\n" << seen);
  REQUIRE(seen.find("checkpoint " + job.dir + "/resume-4.ckpt step 4") != std::string::npos);
  const std::string device = servers.devices[0];
  const std::string resumed = restart_first_ps(job, servers, adam + save);
  INFO("the PS started again printed:\n" << resumed);
  CHECK(resumed.find("resume: ps " + device + " continues the job from " + job.dir + "/resume-") !=
        std::string::npos);
  const auto runs = finish_all(procs);
  const auto unbroken = embedded_run(job, adam + " --steps " + std::to_string(total));
  for (int r = 0; r < k_replicas; ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    REQUIRE(runs[r].rc == 0);
    const auto sv = step_versions(runs[r]);
    REQUIRE(sv.size() == static_cast<std::size_t>(r == 0 ? total - 7 : total));  // the chief's first 7 were read
    for (const auto& [step, version] : sv) CHECK(version == step);
    for (const auto& v : job.plan.variables) CHECK(final_values(runs[r], v.name) == final_values(unbroken, v.name, 0));
  }
}

TEST_CASE("a PS process started again with --resume after a replica was dropped goes on without that replica",
          "[ps][integration]") {
  // Replica 3 is killed after its step 3 and dropped 300 ms later; the first PS process is
  // killed after the chief's step 10 (its latest checkpoint: step 8, after the drop) and
  // started again with --resume. Its checkpoint does not say replica 3 was dropped: it
  // waits 300 ms for it, drops it again, and the three replicas left finish alike.
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, {}, "resumedrop", true);
  const std::int64_t total = 16;
  const std::string drop = " --drop-lost-after-ms 300", save = " --save " + job.dir + "/resumedrop-{step}.ckpt";
  Servers servers;
  start_servers(job, servers, drop + save);
  auto procs = start_replicas(job, servers.peers,
                              "--steps " + std::to_string(total) + " --step-delay-ms 100 --save-every 4 " +
                                  "--ps-restart-wait-ms 60000" + save);
  std::string seen;
  REQUIRE(read_until(*procs[k_replicas - 1], "step 3 ", 60s, seen));
  procs[k_replicas - 1]->kill(SIGKILL);
  REQUIRE(procs[k_replicas - 1]->wait(10s) == 128 + SIGKILL);
  REQUIRE(read_until(*procs[0], "step 10 ", 60s, seen));
  INFO("chief printed:\n" << seen);
  REQUIRE(seen.find("checkpoint " + job.dir + "/resumedrop-8.ckpt step 8") != std::string::npos);
  const std::string resumed = restart_first_ps(job, servers, drop + save);
  INFO("the PS started again printed:\n" << resumed);
  CHECK(resumed.find("continues the job from " + job.dir + "/resumedrop-8.ckpt (step 8)") != std::string::npos);
  procs.pop_back();
  const auto runs = finish_all(procs);
  std::vector<float> first;
  for (int r = 0; r + 1 < k_replicas; ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    REQUIRE(runs[r].rc == 0);
    const auto sv = step_versions(runs[r]);
    REQUIRE_FALSE(sv.empty());
    CHECK(sv.back().first == total - 1);
    for (const auto& [step, version] : sv) CHECK(version == step);
    const auto w = final_values(runs[r], "logreg/w:0");
    REQUIRE_FALSE(w.empty());
    if (first.empty()) first = w;
    CHECK(w == first);
  }
}

TEST_CASE("a checkpoint that is missing, garbage or of another model is refused with a clear error",
          "[ps][integration]") {
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, {}, "ckpt_bad", true);
  const std::string garbage = job.dir + "/garbage.ckpt", other = job.dir + "/other.ckpt";
  std::ofstream(garbage, std::ios::binary) << "not a checkpoint \xff\xff\xff";
  // The same variables with another shape: as if saved from a model of 8 features.
  auto variables = job.plan.variables;
  std::map<std::string, std::vector<float>> values;
  for (auto& v : variables) {
    if (v.shape == std::vector<std::int64_t>{static_cast<std::int64_t>(k_features)}) v.shape = {8};
    std::int64_t n = 1;
    for (const auto d : v.shape) n *= d;
    values[v.name] = std::vector<float>(static_cast<std::size_t>(n), 0.5F);
  }
  std::map<std::string, cps::Optimizer::State> states;
  for (const auto& v : variables) states[v.name] = {};
  auto bytes = cps::encode_checkpoint(3, variables, values, cps::OptimizerKind::sgd, states);
  REQUIRE(bytes.ok());
  std::ofstream(other, std::ios::binary) << *bytes;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {job.dir + "/missing.ckpt", "cannot open the checkpoint file"},
      {garbage, "expected a PsCheckpoint"},
      {other, "of shape [16], got shape [8]; was it saved from another model?"},
  };
  for (const auto& [path, why] : cases) {
    auto proc = spawn_ps("--embedded --stop-on-stdin-eof " + common_args(job) + " --steps 2 --restore " + path);
    const auto run = finish(*proc);
    INFO(run.text);
    CHECK(run.rc != 0);
    CHECK(run.text.find(why) != std::string::npos);
    const bool names_path = run.text.find(path) != std::string::npos;
    CHECK(names_path);
  }
}

TEST_CASE("an embedded job with local_replication pulls each variable once per step for the node",
          "[ps][integration]") {
  const std::int64_t steps = 10;
  cs::BuilderOptions options;
  options.local_proxy_variable = true;
  const Job job = make_job(cs::BuilderKind::partitioned_ps, options, "embedded_proxy", true);
  auto proc = spawn_ps("--embedded --stop-on-stdin-eof " + common_args(job) + " --steps " + std::to_string(steps));
  const auto run = finish(*proc);
  INFO("the embedded job printed:\n" << run.text);
  REQUIRE(run.rc == 0);
  // The four replicas share one node (localhost): one proxy, one pull per shard per
  // step (and the final pull), every replica's read answered from it.
  const auto pulls = static_cast<long long>(job.plan.shards.size()) * (steps + 1);
  CHECK(run.text.find(fmt::format("proxy localhost: {} pulls for {} reads", pulls, pulls * k_replicas)) !=
        std::string::npos);
  const auto sv = step_versions(run);
  REQUIRE(sv.size() == static_cast<std::size_t>(steps) * k_replicas);
  for (const auto& [step, version] : sv) CHECK(version == step);
  check_close(run, reference_sgd(steps));
}

namespace {

/// The number after `key` in `text` ("key": 1.5 or "key 1.5 ms"); NaN when absent.
double number_after(const std::string& text, const std::string& key) {
  const auto at = text.find(key);
  if (at == std::string::npos) return std::nan("");
  const char* from = text.c_str() + at + key.size();
  while (*from == '"' || *from == ':' || *from == ' ') ++from;
  return std::strtod(from, nullptr);
}

}  // namespace

TEST_CASE("apiary sim calibrate writes a profile sim ps takes, charging encryption unless --insecure",
          "[ps][integration]") {
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, {}, "calibrate", false);
  const std::string measured = job.dir + "/measured.json";
  auto calibrate = testing::spawn_apiary("sim calibrate --quick --features 4096 --out " + measured + " 2>&1");
  const auto calibrated = finish(*calibrate);
  INFO(calibrated.text);
  REQUIRE(calibrated.rc == 0);
  std::ifstream in(measured);
  const std::string profile((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(calibrated.text, Catch::Contains("gradient and loss, 2 rounds (median, quartiles; "));
  CHECK_THAT(calibrated.text, Catch::Contains("step work, 2 rounds (median, quartiles): allreduce_ns"));
  CHECK_THAT(calibrated.text, Catch::Contains("transport, 2 rounds (median, quartiles): byte_ns"));
  for (const char* field : {"byte_ns", "secure_byte_ns", "gradient_ns", "gradient_call_ns", "loss_ns", "ps_ns",
                            "large_message_us", "idle_message_us", "idle_cpu_us_per_s", "partition_ns"}) {
    INFO(field << " in " << profile);
    CHECK(number_after(profile, std::string("\"") + field + "\"") >= 0.0);
  }
  const std::string sim = "sim ps " + common_args(job) + " --steps 3 --profile ";
  for (const char* insecure : {"", " --insecure"}) {
    auto p = testing::spawn_apiary(sim + measured + insecure + " 2>&1");
    const auto run = finish(*p);
    INFO(run.text);
    CHECK(run.rc == 0);
  }
  // A profile whose encryption costs 1 ns a byte: the encrypted job's machines spend more
  // processor time than the plaintext one's, by what its bytes cost (deterministic). An
  // idle process's load and a message's wake-ups are taken out of it: they depend on how
  // busy the nodes happen to be (an encrypted job's busier nodes are woken less), which
  // at this size can outweigh its bytes.
  std::string costly = profile;
  const auto set = [&costly](const std::string& field, const char* value) {
    const auto at = costly.find("\"" + field + "\"");
    REQUIRE(at != std::string::npos);
    costly.replace(at, costly.find_first_of(",\n}", at) - at, "\"" + field + "\": " + value);
  };
  set("secure_byte_ns", "1");
  set("idle_message_us", "0");
  set("idle_cpu_us_per_s", "0");
  const std::string costly_path = job.dir + "/costly.json";
  std::ofstream(costly_path) << costly;
  auto cpu = [&](const char* insecure) {
    auto p = testing::spawn_apiary(sim + costly_path + insecure + " 2>&1");
    const auto run = finish(*p);
    INFO(run.text);
    CHECK(run.rc == 0);
    return number_after(run.text, "processor time:");
  };
  const double encrypted = cpu(""), plaintext = cpu(" --insecure");
  CHECK(plaintext > 0.0);
  CHECK(encrypted > plaintext);
  // Sizes it cannot calibrate at are refused.
  auto tiny = testing::spawn_apiary("sim calibrate --quick --features 10 --out " + measured + " 2>&1");
  CHECK(finish(*tiny).rc != 0);
}
