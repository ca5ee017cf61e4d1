// `apiary strategy build|check`: build an AutoDist strategy from a graph item and a
// resource spec and print or write it; check a strategy written or edited elsewhere.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>

#include "api/job_files.hpp"
#include "apps/commands.hpp"
#include "core/strategy/builders.hpp"
#include "core/strategy/slurm.hpp"
#include "core/strategy/strategy_io.hpp"
#include "core/strategy/validate.hpp"

namespace apiary::apps {
namespace {

namespace cs = core::strategy;

struct BuildArgs {
  std::string builder;
  std::string graph;
  std::string resource_spec;
  std::string out;
  std::string id;
  bool text = false;
  bool proxy = false;
  bool async = false;
  std::optional<std::int32_t> staleness;
  std::optional<std::int64_t> chunk_size;
  std::optional<std::string> spec;
  std::optional<std::string> compressor;
  std::optional<std::uint64_t> seed;
};

struct CheckArgs {
  std::string strategy;
  std::string graph;
  std::string resource_spec;
  bool text = false;
};

bool read_file(const char* cmd, const std::string& path, const char* what, std::string& bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "apiary strategy %s: cannot open the %s file %s; check the path and permissions\n", cmd, what,
                 path.c_str());
    return false;
  }
  bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

/// The `what` file at `path` as `parse` reads it; nullopt (the error printed) when it
/// cannot be read or parsed.
template <class T, class Parse>
std::optional<T> load(const char* cmd, const std::string& path, const char* what, Parse parse) {
  std::string text;
  if (!read_file(cmd, path, what, text)) return std::nullopt;
  auto parsed = parse(text, path);
  if (!parsed) {
    std::fprintf(stderr, "apiary strategy %s: %s\n", cmd, parsed.error().message.c_str());
    return std::nullopt;
  }
  return std::move(*parsed);
}

std::optional<cs::GraphItem> load_graph(const char* cmd, const std::string& path) {
  return load<cs::GraphItem>(cmd, path, "graph item", cs::parse_graph_item_json);
}

std::optional<cs::ResourceSpec> load_spec(const char* cmd, const std::string& path) {
  return load<cs::ResourceSpec>(cmd, path, "resource spec", cs::parse_resource_spec);
}

// Command-line values -> BuilderOptions; false (with a message) on a bad name.
bool to_options(const BuildArgs& a, cs::BuilderOptions& o) {
  if (a.proxy) o.local_proxy_variable = true;
  if (a.async) o.sync = false;
  o.staleness = a.staleness;
  o.chunk_size = a.chunk_size;
  o.seed = a.seed;
  if (a.spec) {
    cs::ArSpec spec{};
    if (!pb::autodist::AllReduceSynchronizer::Spec_Parse(*a.spec, &spec)) {
      std::fprintf(stderr, "apiary strategy build: --spec \"%s\" is unknown; expected AUTO, NCCL or RING\n", a.spec->c_str());
      return false;
    }
    o.all_reduce_spec = spec;
  }
  if (a.compressor) {
    cs::ArCompressor compressor{};
    if (!pb::autodist::AllReduceSynchronizer::Compressor_Parse(*a.compressor, &compressor)) {
      std::fprintf(stderr, "apiary strategy build: --compressor \"%s\" is unknown; expected NoneCompressor, "
                   "HorovodCompressor or HorovodCompressorEF\n", a.compressor->c_str());
      return false;
    }
    o.compressor = compressor;
  }
  return true;
}

int run_build(const BuildArgs& a) {
  auto kind = cs::parse_builder_kind(a.builder);
  if (!kind) {
    std::fprintf(stderr, "apiary strategy build: --builder: %s\n", kind.error().message.c_str());
    return 2;
  }
  cs::BuilderOptions options;
  if (!to_options(a, options)) return 2;
  auto item = load_graph("build", a.graph);
  if (!item) return 1;
  auto spec = load_spec("build", a.resource_spec);
  if (!spec) return 1;
  std::string id = a.id;
  if (id.empty()) {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    id = cs::format_strategy_id(std::chrono::duration_cast<std::chrono::microseconds>(now).count());
  }
  auto strategy = cs::build_strategy(*kind, options, *item, *spec, id);
  if (!strategy) {
    std::fprintf(stderr, "apiary strategy build: %s\n", strategy.error().message.c_str());
    return 2;
  }
  if (auto valid = cs::validate(*strategy, *item, *spec); !valid) {
    std::fprintf(stderr, "apiary strategy build: the built strategy is invalid (a bug): %s\n", valid.error().message.c_str());
    return 1;
  }
  if (a.out.empty()) {
    std::fputs(cs::to_text(*strategy).c_str(), stdout);
    return 0;
  }
  if (auto saved = save_strategy(*strategy, a.out, a.text); !saved) {
    std::fprintf(stderr, "apiary strategy build: %s\n", saved.error().message.c_str());
    return 1;
  }
  std::printf("strategy %s (%s, %d variables, %d replicas) written to %s (%s)\n", strategy->id().c_str(),
              a.builder.c_str(), strategy->node_config_size(), strategy->graph_config().replicas_size(),
              strategy->path().c_str(), a.text ? "text" : "binary");
  return 0;
}

int run_check(const CheckArgs& a) {
  std::string bytes;
  if (!read_file("check", a.strategy, "strategy", bytes)) return 1;
  auto strategy = cs::parse_strategy(bytes, a.text ? cs::StrategyFormat::text : cs::StrategyFormat::binary, a.strategy);
  if (!strategy) {
    std::fprintf(stderr, "apiary strategy check: %s\n", strategy.error().message.c_str());
    return 1;
  }
  auto item = load_graph("check", a.graph);
  if (!item) return 1;
  Status valid = ok_status();
  if (a.resource_spec.empty()) {
    valid = cs::validate(*strategy, *item);
  } else {
    auto spec = load_spec("check", a.resource_spec);
    if (!spec) return 1;
    valid = cs::validate(*strategy, *item, *spec);
  }
  if (!valid) {
    std::fprintf(stderr, "apiary strategy check: %s: %s\n", a.strategy.c_str(), valid.error().message.c_str());
    return 1;
  }
  std::printf("strategy %s: valid (%d variables, %d replicas)\n", strategy->id().c_str(), strategy->node_config_size(),
              strategy->graph_config().replicas_size());
  return 0;
}

}  // namespace

Command add_strategy_commands(CLI::App& app) {
  auto* cmd = app.add_subcommand("strategy", "Build, inspect and check AutoDist synchronization strategies");
  cmd->require_subcommand(1);
  auto b = std::make_shared<BuildArgs>();
  auto* build = cmd->add_subcommand("build", "Build a strategy; print it as text, or write it with --out");
  build->add_option("--builder", b->builder,
                    "PS, PSLoadBalancing, PartitionedPS, UnevenPartitionedPS, AllReduce, PartitionedAR, "
                    "RandomAxisPartitionAR or Parallax")->required();
  build->add_option("--graph", b->graph, "Graph item JSON file (variables and gradients)")->required();
  build->add_option("--resource-spec", b->resource_spec, "resource_spec.yml of the cluster")->required();
  build->add_option("--out", b->out, "Write the strategy here (binary unless --text) instead of printing it");
  build->add_flag("--text", b->text, "With --out: write protobuf text format");
  build->add_option("--id", b->id, "Strategy id (default: the UTC time, %Y%m%dT%H%M%SM%f)");
  build->add_flag("--proxy", b->proxy, "PS builders: local_proxy_variable (a proxy copy on each worker)");
  build->add_flag("--async", b->async, "PS builders and Parallax: asynchronous updates (sync=false)");
  build->add_option("--staleness", b->staleness, "PS builders and Parallax: steps a worker may run ahead (default 0)");
  build->add_option("--chunk-size", b->chunk_size, "AR builders and Parallax: variables per fusion group (default 128)");
  build->add_option("--spec", b->spec, "AllReduce: AUTO, NCCL (default) or RING");
  build->add_option("--compressor", b->compressor,
                    "AllReduce: NoneCompressor (default), HorovodCompressor or HorovodCompressorEF");
  build->add_option("--seed", b->seed, "RandomAxisPartitionAR: seed of the axis choice (default 0)");
  auto c = std::make_shared<CheckArgs>();
  auto* check = cmd->add_subcommand("check", "Validate a strategy file against a graph item (and a resource spec)");
  check->add_option("strategy", c->strategy, "Strategy file (binary unless --text)")->required();
  check->add_option("--graph", c->graph, "Graph item JSON file")->required();
  check->add_option("--resource-spec", c->resource_spec, "resource_spec.yml: also check every device exists");
  check->add_flag("--text", c->text, "The strategy file is protobuf text format");
  auto* spec = cmd->add_subcommand("resource-spec",
                                   "Print the resource spec of this Slurm allocation (SLURM_JOB_NODELIST, "
                                   "SLURM_TASKS_PER_NODE): one node per host, one replica per task or GPU");
  auto from_slurm = std::make_shared<bool>(false);
  auto gpus = std::make_shared<std::int64_t>(0);
  auto spec_out = std::make_shared<std::string>();
  spec->add_flag("--from-slurm", *from_slurm, "From the Slurm allocation's environment (the only source so far)")
      ->required();
  spec->add_option("--gpus-per-node", *gpus, "GPUs of each node (ids 0..N-1); 0: one CPU device per task")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1024}))
      ->capture_default_str();
  spec->add_option("--out", *spec_out, "Write it here instead of printing it");
  Command search = add_strategy_search_command(*cmd);
  return [=]() {
    if (int code = search(); code >= 0) return code;
    if (spec->parsed()) {
      auto yaml = core::strategy::slurm_resource_spec([](const char* name) { return std::getenv(name); }, *gpus);
      if (!yaml) return fail("strategy resource-spec", yaml.error());
      if (spec_out->empty()) {
        std::fputs(yaml->c_str(), stdout);
        return 0;
      }
      std::ofstream file(*spec_out);
      file << *yaml;
      if (!file) {
        return fail("strategy resource-spec", make_error(errc::io, "--out {}: cannot write the file", *spec_out));
      }
      std::printf("resource spec of the Slurm allocation written to %s\n", spec_out->c_str());
      return 0;
    }
    return build->parsed() ? run_build(*b) : run_check(*c);
  };
}

}  // namespace apiary::apps
