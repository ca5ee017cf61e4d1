// `apiary average`: one averager process: a DHT node plus an Averager over one vector,
// running a number of averaging steps and printing each step's group and the final values.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "api/averager.hpp"
#include "apps/averager_args.hpp"
#include "apps/commands.hpp"

namespace apiary::apps {
namespace {

/// The generated values: element i of the vector of value seed s is sin(1.7 s + 0.37 i).
std::vector<float> generated_values(std::size_t size, double seed) {
  std::vector<float> out(size);
  for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<float>(std::sin(1.7 * seed + 0.37 * static_cast<double>(i)));
  return out;
}

Result<std::vector<float>> parse_values(const std::string& text) {
  std::vector<float> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || end == nullptr || *end != '\0' || !std::isfinite(v)) {
      return make_error(errc::invalid_argument, "expected comma-separated finite numbers in --values, got '{}'", item);
    }
    out.push_back(static_cast<float>(v));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

Command add_average_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("average", "Run an averager: a DHT node that averages one vector with its peers");
  auto args = std::make_shared<AveragerArgs>();
  add_averager_options(*cmd, *args);
  auto values = std::make_shared<std::string>();
  auto size = std::make_shared<std::size_t>(1000);
  auto value_seed = std::make_shared<double>(0);
  auto steps = std::make_shared<int>(1);  // 0: only serve (e.g. share the state) until --linger ends
  auto weight = std::make_shared<double>(1.0);
  auto timeout = std::make_shared<double>(30.0);
  auto linger = std::make_shared<double>(2.0);
  auto every = std::make_shared<double>(0.0);
  auto* values_opt = cmd->add_option("--values", *values, "The vector, e.g. 1,2.5,-3 (overrides --size)");
  cmd->add_option("--size", *size, "Elements of a generated vector: element i is sin(1.7 s + 0.37 i), s = --value-seed")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 28));
  cmd->add_option("--value-seed", *value_seed, "s of the generated vector");
  cmd->add_option("--steps", *steps, "Averaging steps to run")->check(CLI::Range(0, 1000000));
  cmd->add_option("--weight", *weight, "This peer's averaging weight")->check(CLI::Range(0.0, 1e12));
  cmd->add_option("--timeout", *timeout, "Seconds each step may take (matchmaking retries included)")
      ->check(CLI::Range(0.1, 1e6));
  cmd->add_option("--every", *every,
                  "Schedule step k at the next multiple of this many seconds of Unix time, so that "
                  "processes started apart step together (0: each step as soon as the last ends)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--linger", *linger, "Seconds to keep serving after the last step (groupmates may still need it)")
      ->check(CLI::Range(0.0, 1e6));

  return [=]() {
    AveragerOptions options = averager_options(*args);
    if (values_opt->count() > 0) {
      auto parsed = parse_values(*values);
      if (!parsed) {
        std::fprintf(stderr, "apiary average: %s\n", parsed.error().what().c_str());
        return 2;
      }
      options.tensors = {std::move(*parsed)};
    } else {
      options.tensors = {generated_values(*size, *value_seed)};
    }
    auto node = start_averager_node(*args, std::move(options), "average");
    if (!node) return node.error().code == errc::invalid_argument ? 2 : 1;
    Averager& averager = *node->averager;
    RoundClock clock(*every > 0 ? *every : 1.0);
    int failures = 0;
    for (int s = 1; s <= *steps; ++s) {
      AveragerStepOptions step;
      step.weight = *weight;
      step.timeout = *timeout;
      if (*every > 0) {
        step.scheduled_in = clock.wait_for_round(args->averager.min_matchmaking_time);
        step.timeout = step.scheduled_in + *timeout;
      }
      auto report = averager.step(step).get();
      if (!report) {
        std::fprintf(stderr, "apiary average: step %d: %s\n", s, report.error().what().c_str());
        std::printf("step %d failed\n", s);
        ++failures;
        continue;
      }
      std::printf("step %d: group of %zu, index %zu, failed senders %zu, failed reducers %zu, attempts %zu\n", s,
                  report->peers.size(), report->my_index, report->failed_senders.size(),
                  report->failed_reducers.size(), report->attempts);
      for (std::size_t i = 0; i < report->peers.size(); ++i) {
        std::printf("  member %zu: %s (reduces %lld)\n", i, report->peers[i].c_str(),
                    static_cast<long long>(report->shares[i]));
      }
      for (const auto& p : report->failed_senders) std::printf("  failed sender: %s\n", p.c_str());
      for (const auto& p : report->failed_reducers) std::printf("  failed reducer: %s\n", p.c_str());
      std::fflush(stdout);
    }
    std::string line = "values";
    const std::vector<std::vector<float>> result = averager.tensors();
    for (float v : result[0]) line += fmt::format(" {:.9g}", v);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::duration<double>(*linger));
    return failures == 0 ? 0 : 1;
  };
}

}  // namespace apiary::apps
