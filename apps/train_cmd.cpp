// `apiary train`: one peer of a collaborative training run. Every peer trains the same
// logistic regression (core/ps/logistic_regression.hpp) by local SGD on its own batches,
// and every few steps averages the model with a group of peers found through the DHT.
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "api/averager.hpp"
#include "apps/averager_args.hpp"
#include "apps/commands.hpp"
#include "core/ps/logistic_regression.hpp"

namespace apiary::apps {
namespace {

namespace ps = core::ps;

/// Training settings.
struct TrainArgs {
  std::size_t peers = 4;
  std::size_t rank = 0;
  std::size_t features = 64;
  std::size_t samples = 4096;
  std::size_t batch = 32;
  std::uint64_t data_seed = 7;
  int steps = 200;
  int average_every = 20;
  double lr = 0.5;
  double timeout = 10;
  double every = 0;
  double linger = 3;
};

/// The model as named variables, from the averager's tensors {w, b}.
std::map<std::string, std::vector<float>> as_params(const std::vector<std::vector<float>>& t) {
  return {{ps::k_logreg_weights, t[0]}, {ps::k_logreg_bias, t[1]}};
}

}  // namespace

Command add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a logistic regression collaboratively: local SGD, periodic averaging");
  auto args = std::make_shared<AveragerArgs>();
  add_averager_options(*cmd, *args);
  auto t = std::make_shared<TrainArgs>();
  cmd->add_option("--peers", t->peers, "Peers in the run (for each peer's share of the data)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  cmd->add_option("--rank", t->rank, "This peer's index in [0, --peers)");
  cmd->add_option("--features", t->features, "Inputs per sample")->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  cmd->add_option("--samples", t->samples, "Samples in the synthetic data set")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 26));
  cmd->add_option("--batch", t->batch, "Samples per local step")->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  cmd->add_option("--data-seed", t->data_seed, "Seed of the synthetic data set (the same on every peer)");
  cmd->add_option("--steps", t->steps, "Local SGD steps")->check(CLI::Range(1, 100000000));
  cmd->add_option("--average-every", t->average_every, "Average the model every this many steps")
      ->check(CLI::Range(1, 100000000));
  cmd->add_option("--lr", t->lr, "Learning rate")->check(CLI::Range(1e-9, 1e3));
  cmd->add_option("--timeout", t->timeout, "Seconds each averaging round may take")->check(CLI::Range(0.1, 1e6));
  cmd->add_option("--every", t->every,
                  "Schedule each averaging round at the next multiple of this many seconds of Unix "
                  "time, so that the peers' rounds line up (0: as soon as the peer gets there)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--linger", t->linger, "Seconds to keep serving after the last step")->check(CLI::Range(0.0, 1e6));

  return [=]() {
    if (t->rank >= t->peers) {
      std::fprintf(stderr, "apiary train: expected --rank below --peers (%zu), got %zu\n", t->peers, t->rank);
      return 2;
    }
    const ps::LogisticData data = ps::make_logistic_data(t->samples, t->features, t->data_seed);
    AveragerOptions options = averager_options(*args);
    options.tensors = {std::vector<float>(t->features, 0.0f), std::vector<float>(1, 0.0f)};
    auto node = start_averager_node(*args, std::move(options), "train");
    if (!node) return node.error().code == errc::invalid_argument ? 2 : 1;
    Averager& averager = *node->averager;
    const double initial = ps::logistic_full_loss(data, as_params(averager.tensors()));
    std::printf("rank %zu: initial loss %.4f\n", t->rank, initial);
    std::fflush(stdout);
    RoundClock clock(t->every > 0 ? t->every : 1.0);
    int rounds = 0;
    int failed_rounds = 0;
    const auto started = std::chrono::steady_clock::now();
    for (int step = 1; step <= t->steps; ++step) {
      const auto batch = ps::logistic_batch(data, t->peers, t->rank, step, t->batch);
      averager.with_tensors([&](std::vector<std::vector<float>>& tensors) {
        std::map<std::string, std::vector<float>> grads;
        (void)ps::logistic_loss(data, batch, as_params(tensors), &grads);
        const auto& gw = grads[ps::k_logreg_weights];
        const auto& gb = grads[ps::k_logreg_bias];
        for (std::size_t i = 0; i < tensors[0].size() && i < gw.size(); ++i) tensors[0][i] -= static_cast<float>(t->lr * gw[i]);
        if (!gb.empty()) tensors[1][0] -= static_cast<float>(t->lr * gb[0]);
      });
      if (step % t->average_every != 0 && step != t->steps) continue;
      ++rounds;
      const auto before = averager.transport_bytes();
      AveragerStepOptions round;
      round.timeout = t->timeout;
      if (t->every > 0) {
        round.scheduled_in = clock.wait_for_round(args->min_matchmaking_time);
        round.timeout += round.scheduled_in;
      }
      auto report = averager.step(round).get();
      const auto after = averager.transport_bytes();
      const double loss = ps::logistic_full_loss(data, as_params(averager.tensors()));
      if (!report) {
        ++failed_rounds;
        std::printf("rank %zu step %d: averaging failed (%s); loss %.4f\n", t->rank, step,
                    report.error().what().c_str(), loss);
      } else {
        std::printf("rank %zu step %d: group of %zu, loss %.4f, sent %.1f KiB, received %.1f KiB, key %s\n", t->rank,
                    step, report->peers.size(), loss, static_cast<double>(after.first - before.first) / 1024.0,
                    static_cast<double>(after.second - before.second) / 1024.0, report->next_group_key.c_str());
      }
      std::fflush(stdout);
    }
    const double final_loss = ps::logistic_full_loss(data, as_params(averager.tensors()));
    const auto total = averager.transport_bytes();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("rank %zu: final loss %.4f (initial %.4f), %d rounds (%d failed), %.1f s, sent %.1f KiB, "
                "received %.1f KiB\n",
                t->rank, final_loss, initial, rounds, failed_rounds, seconds, static_cast<double>(total.first) / 1024.0,
                static_cast<double>(total.second) / 1024.0);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::duration<double>(t->linger));
    return failed_rounds == rounds ? 1 : 0;
  };
}

}  // namespace apiary::apps
