// `apiary train`: one peer of a collaborative training run on apiary::Optimizer
// (hivemind's Optimizer for C++ trainers). Every peer trains the same logistic regression
// (core/ps/logistic_regression.hpp) on its own share of a synthetic data set; the swarm
// takes one optimizer step per --target-batch-size samples of all peers (an epoch), with
// the gradients averaged over the DHT-found group; a latecomer loads the swarm's state.
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "api/dht.hpp"
#include "api/optimizer.hpp"
#include "apps/commands.hpp"
#include "core/ps/logistic_regression.hpp"

namespace apiary::apps {

namespace {

namespace ps = core::ps;

/// Training settings.
struct TrainArgs {
  DhtOptions dht;  ///< --listen, --initial-peers, --client-mode
  std::string transport = "tcp";
  bool insecure = false;
  std::size_t peers = 4;
  std::size_t rank = 0;
  std::size_t features = 64;
  std::size_t samples = 4096;
  std::size_t batch = 32;
  std::uint64_t data_seed = 7;
  std::int64_t epochs = 20;
  std::int64_t target_batch_size = 512;
  std::string optimizer = "sgd";
  double lr = 0.5;
  double matchmaking_time = 1.0;
  double averaging_timeout = 15.0;
  double step_time = 0;
  std::string codec = "NONE";
  double linger = 3;
};

/// The model as named variables, from the optimizer's tensors {w, b}.
std::map<std::string, std::vector<float>> as_params(const std::vector<std::vector<float>>& t) {
  return {{ps::k_logreg_weights, t[0]}, {ps::k_logreg_bias, t[1]}};
}

}  // namespace

Command add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train", "Train a logistic regression collaboratively with apiary::Optimizer (hivemind's Optimizer)");
  auto t = std::make_shared<TrainArgs>();
  cmd->add_option("--listen", t->dht.listen, "Multiaddr to listen on (loopback in tests)");
  cmd->add_option("--initial-peers", t->dht.initial_peers, "Multiaddrs of peers to bootstrap from");
  cmd->add_option("--transport", t->transport, "UCX lanes to same-host peers: tcp or shm")
      ->check(CLI::IsMember({"tcp", "shm"}));
  add_insecure_flag(*cmd, t->insecure);
  add_authority_option(*cmd, t->dht.authorization.authority_file);
  add_relay_flags(*cmd, t->dht.relay_service, t->dht.auto_relay, t->dht.relay_limits);
  cmd->add_option("--peers", t->peers, "Shares of the data set (each peer trains on share --rank)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  cmd->add_option("--rank", t->rank, "This peer's share in [0, --peers)");
  cmd->add_option("--features", t->features, "Inputs per sample")->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  cmd->add_option("--samples", t->samples, "Samples in the synthetic data set")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 26));
  cmd->add_option("--batch", t->batch, "Samples per local step")->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  cmd->add_option("--data-seed", t->data_seed, "Seed of the synthetic data set (the same on every peer)");
  cmd->add_option("--epochs", t->epochs, "Stop at this epoch of the swarm")->check(CLI::Range(1, 100000000));
  cmd->add_option("--target-batch-size", t->target_batch_size, "Samples of the whole swarm per epoch")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  cmd->add_option("--optimizer", t->optimizer, "The step: sgd, momentum or adam")
      ->check(CLI::IsMember({"sgd", "momentum", "adam"}));
  cmd->add_option("--lr", t->lr, "Learning rate")->check(CLI::Range(1e-9, 1e3));
  cmd->add_option("--matchmaking-time", t->matchmaking_time, "Seconds before an epoch's end that a group forms")
      ->check(CLI::Range(0.01, 1e6));
  cmd->add_option("--averaging-timeout", t->averaging_timeout, "Seconds an averaging round may take")
      ->check(CLI::Range(0.1, 1e6));
  cmd->add_option("--step-time", t->step_time, "Extra seconds per local step (a slower peer)")
      ->check(CLI::Range(0.0, 1e3));
  cmd->add_flag("--client-mode", t->dht.client_mode, "Only make outbound connections");
  cmd->add_option("--codec", t->codec, "Gradient compression: NONE, FLOAT16, UNIFORM_8BIT, ...");
  cmd->add_option("--linger", t->linger, "Seconds to keep serving after the last epoch")->check(CLI::Range(0.0, 1e6));
  return [=]() {
    if (t->rank >= t->peers) {
      std::fprintf(stderr, "apiary train: expected --rank below --peers (%zu), got %zu\n", t->peers, t->rank);
      return 2;
    }
    OptimizerOptions o;
    if (!pb::CompressionType_Parse(t->codec, &o.grad_compression)) {
      std::fprintf(stderr, "apiary train: expected --codec NONE, FLOAT16, MEANSTD_16BIT, QUANTILE_8BIT, "
                           "UNIFORM_8BIT or BLOCKWISE_8BIT, got '%s'\n", t->codec.c_str());
      return 2;
    }
    const ps::LogisticData data = ps::make_logistic_data(t->samples, t->features, t->data_seed);
    DhtOptions dht_options = t->dht;
    dht_options.mode = transport_mode(t->transport);
    dht_options.insecure = t->insecure;
    auto dht = Dht::start(dht_options);
    if (!dht) {
      std::fprintf(stderr, "apiary train: %s\n", dht.error().what().c_str());
      return 1;
    }
    if (!t->dht.client_mode) std::printf("listening %s\n", (*dht)->address().to_string().c_str());
    o.run_id = "apiary_train";
    o.params = {std::vector<float>(t->features, 0.0f), std::vector<float>(1, 0.0f)};
    o.inner.kind = t->optimizer == "adam" ? ps::OptimizerKind::adam
                   : t->optimizer == "momentum" ? ps::OptimizerKind::momentum : ps::OptimizerKind::sgd;
    o.inner.learning_rate = static_cast<float>(t->lr);
    o.tracker.target_batch_size = t->target_batch_size;
    o.tracker.min_refresh_period = 0.2;
    o.tracker.max_refresh_period = 2.0;
    o.matchmaking_time = t->matchmaking_time;
    o.averaging_timeout = t->averaging_timeout;
    o.client_mode = t->dht.client_mode;
    o.request_timeout = 1.0;
    auto started = Optimizer::start(**dht, std::move(o));
    if (!started) return fail("train", started.error());
    Optimizer& opt = **started;
    if (auto loaded = opt.load_state_from_peers(); loaded && *loaded) {
      std::printf("rank %zu: loaded the swarm's state at epoch %lld\n", t->rank, static_cast<long long>(opt.local_epoch()));
    }
    const double initial = ps::logistic_full_loss(data, as_params(opt.params()));
    std::printf("rank %zu: initial loss %.4f\n", t->rank, initial);
    std::fflush(stdout);
    const auto began = std::chrono::steady_clock::now();
    auto epoch_began = began;
    std::size_t step = 0;
    while (opt.local_epoch() < t->epochs) {
      if (t->step_time > 0) std::this_thread::sleep_for(std::chrono::duration<double>(t->step_time));
      const auto batch = ps::logistic_batch(data, t->peers, t->rank, static_cast<int>(++step), t->batch);
      std::map<std::string, std::vector<float>> grads;
      (void)ps::logistic_loss(data, batch, as_params(opt.params()), &grads);
      auto done = opt.step({grads[ps::k_logreg_weights], grads[ps::k_logreg_bias]}, static_cast<std::int64_t>(t->batch));
      if (!done) {
        std::fprintf(stderr, "apiary train: %s\n", done.error().what().c_str());
        return 1;
      }
      if (done->loaded_state) {
        std::printf("rank %zu: behind the swarm, loaded its state at epoch %lld\n", t->rank,
                    static_cast<long long>(opt.local_epoch()));
      }
      if (!done->new_epoch) continue;
      const auto now = std::chrono::steady_clock::now();
      const double seconds = std::chrono::duration<double>(now - epoch_began).count();
      epoch_began = now;
      std::printf("rank %zu epoch %lld: loss %.4f, group of %zu%s, %.0f samples/s of the swarm\n", t->rank,
                  static_cast<long long>(opt.local_epoch()), ps::logistic_full_loss(data, as_params(opt.params())),
                  done->group_size, done->state_averaged ? ", state averaged" : "",
                  static_cast<double>(t->target_batch_size) / std::max(seconds, 1e-9));
      std::fflush(stdout);
    }
    const auto bytes = opt.transport_bytes();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    std::printf("rank %zu: final loss %.4f (initial %.4f), epoch %lld, %.1f s, sent %.1f KiB, received %.1f KiB\n",
                t->rank, ps::logistic_full_loss(data, as_params(opt.params())), initial,
                static_cast<long long>(opt.local_epoch()), seconds, static_cast<double>(bytes.first) / 1024.0,
                static_cast<double>(bytes.second) / 1024.0);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::duration<double>(t->linger));
    return 0;
  };
}

}  // namespace apiary::apps
