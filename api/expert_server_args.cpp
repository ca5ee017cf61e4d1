#include "api/expert_server_args.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <map>
#include <thread>

#include "actors/role_host.hpp"
#include "api/dht.hpp"

namespace apiary {
namespace {

/// Each flag: its values' name and what it sets.
const std::map<std::string, std::string>& flags() {
  static const std::map<std::string, std::string> table = {
      {"--expert-cls", "CLS: the experts' class, ffn, transformer, nop, nop_delay or det_dropout (default ffn)"},
      {"--checkpoint-dir", "DIR: load the experts from DIR/<uid>/ at start, save them there (default: none)"},
      {"--checkpoint-period", "S: seconds between checkpoints (default: update-period)"},
      {"--num-experts", "N: how many uids to draw from --expert-pattern"},
      {"--expert-pattern", "PATTERN: uids to draw from, e.g. 'expert.[0:4].[0:4]' (default expert.0, expert.1, ...)"},
      {"--expert-uids", "UID...: the experts' uids, instead of a pattern"},
      {"--hidden-dim", "H: inputs and outputs are [batch, H] float32 (default 1024)"},
      {"--max-batch-size", "ROWS: rows a batch holds at most (default 4096)"},
      {"--min-batch-size", "ROWS: rows that make a batch ready (default 1)"},
      {"--timeout-ms", "MS: a batch waits this long for min-batch-size rows (default: no limit)"},
      {"--learning-rate", "LR: the ffn experts' SGD step (default 0.01)"},
      {"--seed", "SEED: expert i starts from parameters of SEED + i (default 0)"},
      {"--initial-peers", "MULTIADDR...: DHT peers to join from (default: a new swarm)"},
      {"--listen", "MULTIADDR: where to serve (default /ip4/127.0.0.1/tcp/0)"},
      {"--identity", "FILE: the Ed25519 key (default: a fresh key)"},
      {"--authority", "FILE: authorize every call with this swarm authority key (default: off)"},
      {"--host", "actor|transport: which role host runs the server (default actor)"},
      {"--update-period", "S: seconds between declarations in the DHT (default 30)"},
      {"--expiration", "S: seconds a declaration lives (default max(2 * update-period, 3))"},
      {"--stats-every", "S: seconds between throughput lines, 0 for none (default 10)"},
  };
  return table;
}

template <class T>
Result<T> number(const std::string& flag, const std::string& text) {
  T value{};
  if constexpr (std::is_floating_point_v<T>) {
    char* end = nullptr;
    value = static_cast<T>(std::strtod(text.c_str(), &end));
    if (!text.empty() && end == text.c_str() + text.size()) return value;
  } else {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec == std::errc() && end == text.data() + text.size()) return value;
  }
  return make_error(errc::invalid_argument, "{} takes a number, got '{}'", flag, text);
}

/// Sets what `flag` names from `values` (one, or a list for the list flags).
Status apply(ExpertServerCommand& c, const std::string& flag, const std::vector<std::string>& values) {
  ExpertServerOptions& s = c.server;
  if (flag == "--expert-uids" || flag == "--initial-peers") {
    (flag == "--expert-uids" ? s.expert_uids : c.initial_peers) = values;
    return ok_status();
  }
  if (values.size() != 1) return make_error(errc::invalid_argument, "{} takes one value, got {}", flag, values.size());
  const std::string& v = values.front();
  auto set = [&](auto& field) -> Status {
    auto n = number<std::decay_t<decltype(field)>>(flag, v);
    if (!n) return n.error();
    field = *n;
    return ok_status();
  };
  if (flag == "--expert-cls") s.expert_cls = v;
  else if (flag == "--expert-pattern") s.expert_pattern = v;
  else if (flag == "--listen") c.runtime.listen = v;
  else if (flag == "--checkpoint-dir") s.checkpoint_dir = v;
  else if (flag == "--checkpoint-period") return set(s.checkpoint_period.emplace());
  else if (flag == "--identity") c.runtime.identity_file = v;
  else if (flag == "--authority") c.runtime.authorization.authority_file = v;
  else if (flag == "--num-experts") return set(s.num_experts);
  else if (flag == "--hidden-dim") return set(s.hidden_dim);
  else if (flag == "--max-batch-size") return set(s.max_batch_size);
  else if (flag == "--min-batch-size") return set(s.min_batch_size);
  else if (flag == "--learning-rate") return set(s.learning_rate);
  else if (flag == "--seed") return set(s.seed);
  else if (flag == "--update-period") return set(s.update_period);
  else if (flag == "--stats-every") return set(c.stats_every);
  else if (flag == "--expiration") return set(s.expiration.emplace());
  else if (flag == "--timeout-ms") {
    auto ms = number<std::int64_t>(flag, v);
    if (!ms) return ms.error();
    s.timeout = std::chrono::milliseconds(*ms);
  } else if (flag == "--host") {
    auto kind = actors::parse_host_kind(v);
    if (!kind) return make_error(errc::invalid_argument, "--host: {}", kind.error().message);
    s.host = *kind;
  }
  return ok_status();
}

}  // namespace

std::string expert_server_usage() {
  std::string out = "apiary experts flags:\n";
  for (const auto& [flag, what] : flags()) out += fmt::format("  {} {}\n", flag, what);
  return out;
}

Result<ExpertServerCommand> parse_expert_server_args(const std::vector<std::string>& args) {
  ExpertServerCommand command;
  for (std::size_t i = 0; i < args.size();) {
    const std::string& flag = args[i++];
    if (flags().count(flag) == 0) {
      return make_error(errc::invalid_argument, "unknown flag '{}'; the flags are {}", flag,
                        fmt::join([] {
                          std::vector<std::string> names;
                          for (const auto& f : flags()) names.push_back(f.first);
                          return names;
                        }(), ", "));
    }
    std::vector<std::string> values;
    while (i < args.size() && args[i].rfind("--", 0) != 0) values.push_back(args[i++]);
    if (Status ok = apply(command, flag, values); !ok) return ok.error();
  }
  return command;
}

Status run_expert_server(const ExpertServerCommand& command, const std::function<void(const std::string&)>& print,
                         const std::function<std::string()>& wait_for_stop) {
  auto runtime = Runtime::start(command.runtime);
  if (!runtime) return runtime.error();
  DhtOptions dht_options;
  dht_options.initial_peers = command.initial_peers;
  auto dht = Dht::start(**runtime, dht_options);
  if (!dht) return dht.error();
  auto server = ExpertServer::start(**runtime, command.server, dht->get());
  if (!server) return server.error();
  print(fmt::format("serving {}", (*server)->address()));
  print(fmt::format("experts {}", fmt::join((*server)->uids(), " ")));
  // Throughput: rows and batches per second since the last line.
  std::atomic<bool> done{false};
  std::thread stats([&] {
    if (!(command.stats_every > 0)) return;
    auto last = (*server)->counters();
    auto next = std::chrono::steady_clock::now();
    const auto period = std::chrono::duration<double>(command.stats_every);
    while (!done) {
      next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(period);
      while (!done && std::chrono::steady_clock::now() < next) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (done) break;
      const auto now = (*server)->counters();
      print(fmt::format("stats rows/s {:.1f} batches/s {:.2f} failed {} refused {} declarations {}",
                        static_cast<double>(now.server.rows - last.server.rows) / period.count(),
                        static_cast<double>(now.server.batches - last.server.batches) / period.count(),
                        now.server.failed_batches, now.server.refused, now.declarations));
      last = now;
    }
  });
  const std::string why = wait_for_stop();
  done = true;
  stats.join();
  print(fmt::format("stopping on {}", why));
  (*server)->stop();
  (*dht)->stop();
  (*runtime)->stop();
  return ok_status();
}

Status run_expert_server(const std::vector<std::string>& args, const std::function<void(const std::string&)>& print,
                         const std::function<std::string()>& wait_for_stop) {
  auto command = parse_expert_server_args(args);
  if (!command) return command.error();
  return run_expert_server(*command, print, wait_for_stop);
}

}  // namespace apiary
