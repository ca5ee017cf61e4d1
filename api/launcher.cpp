// What `apiary launch` starts for every place of a job: the environment, and the command
// line, local or through the remote shell (api/launcher.hpp).
#include "api/launcher.hpp"

#include <unistd.h>

#include <map>
#include <sstream>

#include <fmt/format.h>

#include "api/job_files.hpp"
#include "core/strategy/resource_spec.hpp"

namespace apiary {

namespace cs = core::strategy;

std::string shell_quote(const std::string& word) {
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

namespace {

std::vector<std::string> words_of(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

/// The environment of `place` among `places`.
std::vector<std::string> environment_of(const JobPlace& place, const JobPlaces& places, std::uint32_t port,
                                        const cs::SshConfig* ssh) {
  std::int64_t local_rank = 0;
  std::int64_t local_size = 0;
  for (const auto& p : places.places) {
    if (p.node != place.node) continue;
    if (p.rank < place.rank) ++local_rank;
    ++local_size;
  }
  std::vector<std::string> env = {
      fmt::format("RANK={}", place.rank),
      fmt::format("WORLD_SIZE={}", places.places.size()),
      fmt::format("LOCAL_RANK={}", local_rank),
      fmt::format("LOCAL_WORLD_SIZE={}", local_size),
      "MASTER_ADDR=" + places.places.front().host,
      fmt::format("MASTER_PORT={}", port - 1),
      fmt::format("APIARY_PORT={}", port),
      "APIARY_ROLE=" + place.role,
      "APIARY_DEVICE=" + place.device,
  };
  if (place.role == "ps") env.push_back("APIARY_SERVE=" + place.device);
  if (ssh != nullptr) {
    for (const auto& [name, value] : ssh->shared_envs) env.push_back(name + "=" + value);
  }
  return env;
}

/// The line a remote shell runs for a place: into `directory`, the venv, then the
/// trainer with stdin from /dev/null, stopped when the line's own stdin closes.
std::string remote_line(const std::vector<std::string>& env, const std::vector<std::string>& command,
                        const std::string& directory, const cs::SshConfig* ssh) {
  std::string run = "env";
  for (const auto& e : env) run += " " + shell_quote(e);
  for (const auto& w : command) run += " " + shell_quote(w);
  std::string line = "cd " + shell_quote(directory) + " || exit 127; ";
  if (ssh != nullptr && !ssh->python_venv.empty()) line += ssh->python_venv + " || exit 127; ";
  line += "exec 3<&0; " + run +
          " </dev/null 3<&- & c=$!; { cat <&3 >/dev/null 2>&1; kill -TERM $c 2>/dev/null; } >/dev/null 2>&1 & "
          "exec 3<&-; wait $c";
  return line;
}

}  // namespace

Result<std::vector<LaunchCommand>> launch_commands(const LaunchOptions& o) {
  if (o.command.empty()) {
    return make_error(errc::invalid_argument, "launch: expected the trainer's command after --, got none");
  }
  auto spec = load_resource_spec(o.resource_spec);
  if (!spec) return spec.error();
  Result<pb::autodist::Strategy> strategy = pb::autodist::Strategy{};
  if (!o.strategy.empty()) {
    strategy = load_strategy(o.strategy, o.text);
    if (!strategy) return strategy.error();
  } else if (o.ps_processes) {
    return make_error(errc::invalid_argument,
                      "launch: --ps-processes: expected --strategy too (its PS devices are the processes to start)");
  } else {
    // The replicas as every builder lays them out: the trainers build the strategy.
    for (const auto& device : spec->replicas()) strategy->mutable_graph_config()->add_replicas(device);
  }
  auto places = job_places(*strategy, o.ps_processes, o.port);
  if (!places) return places.error();
  const auto shell = words_of(o.remote_shell);
  std::string directory = o.directory;
  if (directory.empty()) {
    char buf[4096];
    if (::getcwd(buf, sizeof buf) == nullptr) {
      return make_error(errc::internal, "launch: cannot read the working directory");
    }
    directory = buf;
  }
  std::vector<LaunchCommand> out;
  for (const auto& place : places->places) {
    if (!spec->has_device(place.device)) {
      return make_error(errc::invalid_argument,
                        "launch: the strategy's device {} (rank {}) is not a device of the resource spec {}; build "
                        "the strategy for this resource spec",
                        place.device, place.rank, o.resource_spec);
    }
    const cs::SshConfig* ssh = nullptr;
    for (const auto& node : spec->nodes()) {
      if (node.address != place.node || node.ssh_config.empty()) continue;
      for (const auto& c : spec->ssh_configs()) {
        if (c.name == node.ssh_config) ssh = &c;
      }
    }
    LaunchCommand c;
    c.place = place;
    c.environment = environment_of(place, *places, o.port, ssh);
    c.local = cs::is_loopback_address(place.node);
    if (!c.local && shell.empty()) {
      return make_error(errc::invalid_argument, "launch: rank {} runs on {}: expected a --remote-shell, got none",
                        place.rank, place.node);
    }
    // What is executed here for the place with environment `env`.
    const auto argv_of = [&](const std::vector<std::string>& env) {
      if (c.local) return o.command;
      std::vector<std::string> argv = shell;
      const std::string line = remote_line(env, o.command, directory, ssh);
      const auto slash = shell.front().rfind('/');
      if (shell.front().substr(slash == std::string::npos ? 0 : slash + 1) == "ssh") {
        if (ssh != nullptr && !ssh->username.empty()) argv.insert(argv.end(), {"-l", ssh->username});
        if (ssh != nullptr && ssh->port != 22) argv.insert(argv.end(), {"-p", std::to_string(ssh->port)});
        if (ssh != nullptr && !ssh->key_file.empty()) argv.insert(argv.end(), {"-i", ssh->key_file});
        argv.insert(argv.end(), {place.node, line});
      } else {
        argv.insert(argv.end(), {place.node, "sh", "-c", line});
      }
      return argv;
    };
    c.argv = argv_of(c.environment);
    if (place.role == "ps") {
      c.resume_environment = c.environment;
      c.resume_environment.emplace_back("APIARY_RESUME=1");
      c.resume_argv = argv_of(c.resume_environment);
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace apiary
