// `apiary strategy search`: every builder's candidates simulated on this machine's cost
// profile, ranked; the best written out (sim/scenarios/strategy_search.hpp).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "api/job_files.hpp"
#include "apps/commands.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/strategy/graph_item.hpp"
#include "core/strategy/strategy_io.hpp"
#include "sim/scenarios/strategy_search.hpp"

namespace apiary::apps {

namespace {

struct SearchArgs {
  std::string graph, resource_spec, profile, out, out_dir, id;
  bool text = false, insecure = false;
  double compute_ms = 10.0;
};

Result<std::string> read_text(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(errc::not_found, "cannot open the {} file {}; check the path", what, path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

int run_search(const SearchArgs& a, sim::scenarios::SearchConfig config) {
  auto f = [](const Error& e) { return fail("strategy search", e); };
  auto graph = read_text(a.graph, "graph item");
  if (!graph) return f(graph.error());
  auto item = core::strategy::parse_graph_item_json(*graph, a.graph);
  if (!item) return f(item.error());
  if (auto features = sim::scenarios::logistic_features(*item); features) {
    auto fits = core::ps::check_logistic_data_size(config.samples, *features, config.density);
    if (!fits) return f(fits.error());
  }
  auto spec = load_resource_spec(a.resource_spec);
  if (!spec) return f(spec.error());
  if (!a.profile.empty()) {
    auto text = read_text(a.profile, "cost profile");
    if (!text) return f(text.error());
    auto profile = sim::parse_cost_profile(*text, a.profile);
    if (!profile) return f(profile.error());
    config.profile = a.insecure ? *profile : profile->encrypted();
  }
  config.item = std::move(*item);
  config.spec = std::move(*spec);
  config.compute = std::chrono::duration_cast<core::Duration>(std::chrono::duration<double, std::milli>(a.compute_ms));
  const auto begin = std::chrono::steady_clock::now();
  auto rows = sim::scenarios::search_strategies(config);
  if (!rows) return f(rows.error());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  std::printf("%zu candidates simulated, %lld steps each, in %.2f s of wall time (%s)\n", rows->size(),
              static_cast<long long>(config.steps), wall,
              config.profile ? ("profile of " + config.profile->machine).c_str()
                             : "no profile: the default latency and compute time");
  std::fputs(sim::scenarios::format_search_table(*rows).c_str(), stdout);
  std::string id = a.id;
  if (id.empty()) {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    id = core::strategy::format_strategy_id(std::chrono::duration_cast<std::chrono::microseconds>(now).count());
  }
  if (!a.out_dir.empty()) {
    std::size_t rank = 0;
    for (auto& row : *rows) {
      ++rank;
      row.candidate.strategy.set_id(id + "-" + std::to_string(rank));
      const std::string path = a.out_dir + "/" + std::to_string(rank) + ".pb";
      if (auto saved = save_strategy(row.candidate.strategy, path, a.text); !saved) return f(saved.error());
    }
    std::printf("every candidate written to %s/RANK.pb\n", a.out_dir.c_str());
  }
  if (rows->front().error.empty() && !a.out.empty()) {
    auto& best = rows->front().candidate.strategy;
    best.set_id(id);
    if (auto saved = save_strategy(best, a.out, a.text); !saved) return f(saved.error());
    std::printf("best: %s, %.3f ms a step predicted, written to %s\n", rows->front().candidate.label.c_str(),
                rows->front().step_ms, a.out.c_str());
  }
  if (!rows->front().error.empty()) {
    return f(make_error(errc::unsupported, "no candidate could be simulated; the first failed with: {}",
                        rows->front().error));
  }
  return 0;
}

}  // namespace

Command add_strategy_search_command(CLI::App& strategy) {
  auto a = std::make_shared<SearchArgs>();
  auto config = std::make_shared<sim::scenarios::SearchConfig>();
  auto* cmd = strategy.add_subcommand(
      "search",
      "Simulate every builder's candidates for the logistic-regression job of apiary ps on this cluster (with a "
      "machine's cost profile from apiary sim calibrate) and rank them by predicted step time");
  cmd->add_option("--graph", a->graph, "Graph item JSON file of the job's model (logreg/w:0 [F], logreg/b:0 [1])")
      ->required();
  cmd->add_option("--resource-spec", a->resource_spec, "resource_spec.yml of the cluster")->required();
  cmd->add_option("--profile", a->profile,
                  "A machine's costs (apiary sim calibrate --out P); without one, links take 1-10 ms and a step's "
                  "compute --compute-ms");
  cmd->add_flag("--insecure", a->insecure,
                "With --profile: the job's connections are plaintext, as apiary ps --insecure runs (default: "
                "encrypted, each byte also charged the profile's secure_byte_ns)");
  cmd->add_option("--budget", config->budget, "Simulate at most this many candidates, the builders' defaults first "
                                              "(0: all)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1000}))
      ->capture_default_str();
  cmd->add_flag("--stale", config->stale, "Also try SSP (staleness 2) and asynchronous PS candidates");
  cmd->add_option("--steps", config->steps, "Simulated steps per candidate (the first is not timed)")
      ->check(CLI::Range(std::int64_t{2}, std::int64_t{100000}))
      ->capture_default_str();
  cmd->add_option("--compute-ms", a->compute_ms, "Without --profile: virtual compute time of a step (ms)")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str();
  cmd->add_option("--seed", config->seed, "Seed of the simulated runs")->capture_default_str();
  cmd->add_option("--batch", config->batch, "Samples per replica per step")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--samples", config->samples, "Synthetic data set size")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--density", config->density,
                  "A sample's values other than zero, of the features (apiary ps --density: below 1, sparse data)")
      ->capture_default_str();
  cmd->add_option("--out", a->out, "Write the best strategy here (binary unless --text)");
  cmd->add_option("--out-dir", a->out_dir, "Write every candidate here as RANK.pb (an existing directory)")
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--text", a->text, "Write protobuf text format");
  cmd->add_option("--id", a->id, "Strategy id of the best (default: the UTC time); candidates get ID-RANK");
  return [=]() { return cmd->parsed() ? run_search(*a, *config) : -1; };
}

}  // namespace apiary::apps
