// `apiary ps`: parameter-server training as standalone processes (apiary::run_training_job,
// api/training_job.hpp). One process per PS device (--role ps) serves the shards the
// strategy places there; one process per replica (--role chief for replica 0, --role
// worker for the others) trains the built-in logistic-regression model, pulling
// parameters and pushing gradients each step. --embedded runs the whole job (every PS
// device and every replica) in this one process. An all-reduce strategy has no PS role:
// its replicas average gradients among themselves. A mixed strategy (Parallax) has both.
// Processes find each other by --peers or through the job's DHT.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <thread>
#include <vector>

#include "api/training_job.hpp"
#include "apps/commands.hpp"
#include "core/ps/logistic_regression.hpp"

namespace apiary::apps {
namespace {

/// Set when the process is asked to stop: stdin closed under --stop-on-stdin-eof, or
/// SIGINT / SIGTERM to a replica process.
std::atomic<bool> g_stop{false};

/// Watches stdin: at its end, sets g_stop and raises SIGTERM (which a PS process waits
/// for; replicas check the flag between steps). A parent holding the pipe stops the
/// process by closing it, or by dying.
void watch_stdin() {
  std::thread([] {
    char buf[256];
    while (std::fread(buf, 1, sizeof buf, stdin) > 0) {
    }
    g_stop = true;
    ::kill(::getpid(), SIGTERM);
  }).detach();
}

/// Replicas: SIGINT or SIGTERM sets g_stop (a PS process waits for them instead).
void stop_on_signals() {
  std::thread([] {
    (void)wait_for_shutdown_signal();
    g_stop = true;
  }).detach();
}

}  // namespace

void add_model_options(CLI::App& cmd, std::size_t& batch, std::size_t& samples, std::size_t& features,
                       double& density) {
  cmd.add_option("--batch", batch, "Samples per replica per step")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd.add_option("--samples", samples, "Samples in the synthetic data set")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd.add_option("--features", features, "Features per sample (up to 33,554,432: w of 128 MiB)")
      ->check(CLI::Range(1, 1 << 25))
      ->capture_default_str();
  cmd.add_option("--density", density,
                 "A sample's values other than zero, as a fraction of the features: below 1 the data is sparse "
                 "(round(density x features) distinct columns a sample) and a batch's gradient touches only its "
                 "samples' rows of w, as a wide model's embedding (with --sparse logreg/w:0 only those rows travel)")
      ->capture_default_str();
  // Every replica holds the whole data set: samples x features values (dense).
  cmd.parse_complete_callback([&samples, &features, &density] {
    if (auto fits = core::ps::check_logistic_data_size(samples, features, density); !fits) {
      throw CLI::ValidationError("--samples, --features, --density", fits.error().message);
    }
  });
}


Command add_ps_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("ps",
                                 "Parameter-server training: a PS process, or a replica training logistic "
                                 "regression on synthetic data");
  auto a = std::make_shared<TrainingJobOptions>();
  auto embedded = std::make_shared<bool>(false);
  auto stdin_stops = std::make_shared<bool>(false);
  cmd->add_option("--role", a->role,
                  "ps (serve a PS device's shards), chief (replica 0) or worker; without --role or --embedded, "
                  "the role, --listen and --peers come from a launcher's RANK (apiary launch --ps-processes, "
                  "torchrun, mpirun, srun) and the job's ports from APIARY_PORT or MASTER_PORT + 1")
      ->check(CLI::IsMember({"ps", "chief", "worker"}));
  cmd->add_option("--strategy", a->strategy, "Strategy file (see `apiary strategy build`; binary unless --text)")
      ->required();
  cmd->add_flag("--text", a->text, "The strategy file is protobuf text format");
  cmd->add_option("--resource-spec", a->resource_spec, "resource_spec.yml the strategy was built for")->required();
  cmd->add_option("--listen", a->listen, "Listen address host:port (port 0: any)")->capture_default_str();
  cmd->add_option("--peers", a->peers,
                  "Replicas: DEVICE=HOST:PORT of every PS device, e.g. "
                  "localhost:CPU:0=127.0.0.1:7000 (those missing are looked up in the DHT, see --initial-peers), "
                  "and proxy:NODE=HOST:PORT of the node's proxy (local_replication); with an all-reduce "
                  "strategy, of every replica device; with a mixed strategy (Parallax), also "
                  "replica:DEVICE=HOST:PORT of every replica device")
      ->expected(0, -1);
  cmd->add_option("--initial-peers", a->initial_peers,
                  "Multiaddrs (with /p2p/) of the job's DHT nodes, e.g. the one a PS process prints as "
                  "'ps DEVICE dht MULTIADDR'; replicas find the PS devices not in --peers there. The first "
                  "PS process starts without it")
      ->expected(0, -1);
  cmd->add_option("--job", a->job, "Name of the job in the DHT: addresses live under <job>.ps.<device>")
      ->check([](const std::string& v) {
        return v.empty() || v.find_first_of(" \t\n") != std::string::npos ? "expected a non-empty name without blanks"
                                                                           : std::string{};
      })
      ->capture_default_str();
  cmd->add_option("--device", a->device, "PS role: the PS device this process serves, e.g. localhost:CPU:0");
  cmd->add_option("--replica", a->replica, "Worker role: replica id 1..R-1 (graph_config.replicas order)");
  cmd->add_option("--steps", a->steps, "Training steps")->check(CLI::Range(0, 1000000))->capture_default_str();
  add_model_options(*cmd, a->batch, a->samples, a->features, a->density);
  cmd->add_option("--seed", a->seed, "Seed of the synthetic data")->capture_default_str();
  cmd->add_option("--optimizer", a->optimizer, "PS role, and replicas of all-reduce and mixed strategies (same value everywhere): sgd, momentum or adam")
      ->check(CLI::IsMember({"sgd", "momentum", "adam"}))
      ->capture_default_str();
  cmd->add_option("--learning-rate", a->learning_rate, "PS role, and replicas of all-reduce and mixed strategies (same value everywhere): step size")
      ->capture_default_str();
  cmd->add_option("--timeout-ms", a->timeout_ms, "Replicas: deadline of each pull and push (ms)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{86400000}))
      ->capture_default_str();
  cmd->add_option("--drop-lost-after-ms", a->drop_lost_after_ms,
                  "PS: a replica that went down is dropped this many ms later and the job goes on with the "
                  "replicas left (the mean over them); default: a lost replica ends the synchronous job")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{86400000}));
  cmd->add_option("--step-delay-ms", a->step_delay_ms, "Replicas: extra time per step (ms), to make a straggler")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{3600000}))
      ->capture_default_str();
  cmd->add_flag("--embedded", *embedded,
                "Run the whole job in this process: every PS device and every replica (no --role, --peers)");
  cmd->add_flag("--stop-on-stdin-eof", *stdin_stops, "Stop when stdin closes (for a parent that holds the pipe)");
  cmd->add_flag("--until-replicas-finish", a->until_replicas_finish,
                "PS role: stop once every replica finished (or was dropped); a PS process placed by a launcher's "
                "RANK always does");
  cmd->add_option("--save", a->save,
                  "The chief writes a checkpoint here after the last step (every variable whole, however the "
                  "strategy partitions it); other roles ignore it");
  cmd->add_option("--save-every", a->save_every,
                  "With --save: the chief also writes a checkpoint at the start of every step that is a multiple of "
                  "this (put {step} in the --save path to keep each)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1000000}));
  cmd->add_option("--restore", a->restore,
                  "Start from this checkpoint (written by --save, with any strategy for the same model); every "
                  "role of the job takes the same file");
  cmd->add_flag("--resume", a->resume,
               "PS role, started again after its process went down: continue the running job from the latest "
               "--save checkpoint (none yet: from the job's start); the replicas replay their pushes since "
               "(BSP strategies; the replicas need --ps-restart-wait-ms). Placed by a launcher: "
               "APIARY_RESUME=1 says the same");
  cmd->add_option("--ps-restart-wait-ms", a->ps_restart_wait_ms,
                  "Replicas: wait this long for a PS process that went down to be started again with --resume, "
                  "keeping the pushes of the last 2 x --save-every + staleness + 2 steps (every step without "
                  "--save-every) to replay to it; 0: a PS going down ends the job")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{86400000}))
      ->capture_default_str();
  cmd->add_option("--mode", a->mode, "Same-host lanes: tcp or shm")
      ->check(CLI::IsMember({"tcp", "shm"}))
      ->capture_default_str();
  add_insecure_flag(*cmd, a->insecure);
  add_authority_option(*cmd, a->authority);
  cmd->add_option("--sparse", a->sparse,
                  "All-reduce and mixed strategies: a variable whose gradient is sparse (the rows it touches: "
                  "all-gathered and averaged under all-reduce, pushed as rows to a PS), e.g. logreg/w:0; repeatable");
  return [a, embedded, stdin_stops]() {
    block_shutdown_signals();
    if (a->save_every > 0 && a->save.empty()) {
      return fail("ps", make_error(errc::invalid_argument, "--save-every {}: expected --save PATH too", a->save_every));
    }
    if (*embedded && !a->role.empty()) {
      return fail("ps", make_error(errc::invalid_argument, "expected one of --role and --embedded, got both"));
    }
    if (!*embedded && a->role.empty()) {
      // Started by a launcher (apiary launch, torchrun, mpirun, srun): the rank says the role.
      auto place = take_place_from_environment(*a, [](const char* name) { return std::getenv(name); });
      if (!place) return fail("ps", place.error());
      std::fputs(place->c_str(), stdout);
      std::fflush(stdout);
    }
    if (*embedded && !a->authority.empty()) {
      return fail("ps", make_error(errc::invalid_argument,
                                   "--authority: the embedded job runs in one process, where no call needs "
                                   "authorizing; use it with --role"));
    }
    if (*stdin_stops) watch_stdin();
    if (a->role != "ps" || a->until_replicas_finish) stop_on_signals();
    a->stop = &g_stop;
    a->stop_reason = *stdin_stops ? "stdin closed, SIGINT or SIGTERM" : "SIGINT or SIGTERM";
    JobOutput output;
    output.print = [](const std::string& lines) { std::fputs(lines.c_str(), stdout); std::fflush(stdout); };
    output.error = [](const Error& e) { (void)fail("ps", e); };
    auto done = run_training_job(*a, output, [] { return wait_for_shutdown_signal(); });
    return done ? 0 : (done.error().code == errc::invalid_argument ? 2 : 1);
  };
}

}  // namespace apiary::apps
