// `apiary launch`: a job's processes started on the hosts of its resource spec (here, and
// in network namespaces standing for hosts, through `ip netns exec`), their output, one
// failure or a signal stopping them all; and `apiary ps` placed by torchrun and mpirun.
#include <sys/types.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "core/ps/logistic_regression.hpp"
#include "tests/integration/ps_job.hpp"
#include "tests/support/apiary_command.hpp"
#include "tests/support/netns.hpp"

namespace apiary::testing {
namespace {

using namespace ps_job;
using namespace std::chrono_literals;

/// What `apiary launch` printed, whole and by rank (the "[NODE rRANK ROLE] " prefix
/// taken off), and how it ended.
struct Launched {
  int rc = -1;
  std::string text;
  std::map<int, Run> ranks;
};

Launched finish_launch(Process& p) {
  Launched out;
  const std::regex prefix(R"(^\[[^ \]]+ r([0-9]+) [a-z]+\] (.*)$)");
  while (auto line = p.read_line(120s)) {
    out.text += *line + "\n";
    std::smatch m;
    if (!std::regex_match(*line, m, prefix)) continue;
    auto& run = out.ranks[std::stoi(m[1])];
    run.lines.push_back(m[2]);
    run.text += std::string(m[2]) + "\n";
  }
  out.rc = p.wait(60s);
  return out;
}

/// Starts `apiary launch ARGS` with `env` before it (e.g. "env -u UCX_NET_DEVICES").
std::unique_ptr<Process> spawn_launch(const std::string& args, const std::string& env = "") {
  return std::make_unique<Process>(std::vector<std::string>{
      "/bin/sh", "-c", "exec " + env + " " + sibling_executable("apiary") + " launch " + args + " 2>&1"});
}

/// A first port with the next `count` - 1 ports free too, as far as can be told now.
int free_port_range(int count) {
  for (;;) {
    const int first = free_loopback_port();
    bool all = first + count <= 32768;
    for (int i = 1; i < count && all; ++i) all = loopback_port_free(first + i);
    if (all) return first;
  }
}

/// Every replica (ranks 0..replicas-1) ended with the values of single-process SGD, the
/// same bits on every replica.
void check_replicas(const Launched& l, int replicas, std::int64_t steps) {
  const auto expected = reference_sgd(steps, replicas);
  for (int r = 0; r < replicas; ++r) {
    INFO("rank " << r << " printed:\n" << (l.ranks.count(r) != 0 ? l.ranks.at(r).text : std::string("nothing")));
    REQUIRE(l.ranks.count(r) == 1);
    check_close(l.ranks.at(r), expected);
    for (const auto& [name, values] : expected) {
      CHECK(final_values(l.ranks.at(r), name) == final_values(l.ranks.at(0), name));
    }
  }
}

TEST_CASE("apiary launch runs a PS job's replicas and PS processes here, then stops the PS processes",
          "[integration][launch]") {
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, {}, "launch_ps", true);
  const int port = free_port_range(static_cast<int>(k_replicas + job.plan.servers.size()));
  auto p = spawn_launch(fmt::format("--strategy {} --resource-spec {} --ps-processes --port {} -- {} ps {} --steps 8",
                                    job.strategy, job.spec, port, sibling_executable("apiary"), common_args(job)));
  const auto l = finish_launch(*p);
  INFO(l.text);
  REQUIRE(l.rc == 0);
  check_replicas(l, k_replicas, 8);
  for (std::size_t k = 0; k < job.plan.servers.size(); ++k) {
    const int rank = k_replicas + static_cast<int>(k);
    REQUIRE(l.ranks.count(rank) == 1);
    CHECK_THAT(l.ranks.at(rank).text, Catch::Contains(fmt::format("place rank {} of {} (RANK): ps {} at 127.0.0.1:{}",
                                                                  rank, k_replicas + job.plan.servers.size(),
                                                                  job.plan.servers[k], port + rank)));
    // It stops once every replica finished (or when the launcher, seeing them all end,
    // sends SIGTERM first).
    CHECK_THAT(l.ranks.at(rank).text, Catch::Contains("ps " + job.plan.servers[k] + " stopping on "));
  }
  CHECK_THAT(l.text, Catch::Contains(fmt::format("launch: {} processes ended, every one with 0",
                                                 k_replicas + job.plan.servers.size())));
}

TEST_CASE("a PS process that dies under apiary launch --restart-ps is started again and the job ends with an "
          "unbroken run's bits", "[integration][launch]") {
  // With a proxy on the node too: the pulls through it wait for the PS as the pushes do.
  const bool proxy = GENERATE(false, true);
  INFO((proxy ? "with" : "without") << " a node proxy");
  cs::BuilderOptions options;
  options.local_proxy_variable = proxy;
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, options, proxy ? "launch_resume_proxy" : "launch_resume",
                           true);
  const int port = free_port_range(static_cast<int>(k_replicas + job.plan.servers.size()));
  const std::int64_t steps = 40;
  // The first PS process (rank 4) is killed 3 s into its first life; the replicas wait
  // for it, and it comes back with APIARY_RESUME=1 from the latest checkpoint.
  const std::string args = fmt::format("{} ps {} --steps {} --step-delay-ms 100 --save-every 4 --save {}/l-{{step}}.ckpt "
                                       "--ps-restart-wait-ms 60000",
                                       sibling_executable("apiary"), common_args(job), steps, job.dir);
  const std::string trainer = fmt::format(
      "sh -c 'a=\"{}\"; if [ \"$RANK\" = {} ] && [ -z \"$APIARY_RESUME\" ]; then exec timeout -s KILL 3 $a; fi; "
      "exec $a'", args, k_replicas);
  auto p = spawn_launch(fmt::format("--strategy {} --resource-spec {} --ps-processes --port {} --restart-ps 2 -- {}",
                                    job.strategy, job.spec, port, trainer));
  const auto l = finish_launch(*p);
  INFO(l.text);
  REQUIRE(l.rc == 0);
  // timeout kills its process group, itself included.
  CHECK_THAT(l.text, Catch::Contains(fmt::format("launch: rank {} (ps {} on localhost) was killed by signal 9 "
                                                 "(Killed); starting it again to resume the job (APIARY_RESUME=1, "
                                                 "restart 1 of 2)",
                                                 k_replicas, job.plan.servers[0])));
  CHECK_THAT(l.ranks.at(k_replicas).text, Catch::Contains("resume: ps " + job.plan.servers[0] + " continues the job"));
  check_replicas(l, k_replicas, steps);
  auto unbroken_proc = spawn_ps("--embedded --stop-on-stdin-eof " + common_args(job) + " --steps " +
                                std::to_string(steps));
  const auto unbroken = finish(*unbroken_proc);
  REQUIRE(unbroken.rc == 0);
  for (const auto& v : job.plan.variables) CHECK(final_values(l.ranks.at(0), v.name) == final_values(unbroken, v.name, 0));
}

TEST_CASE("apiary launch runs an all-reduce job's replicas", "[integration][launch]") {
  const Job job = make_job(cs::BuilderKind::all_reduce, {}, "launch_ar", false);
  const int port = free_port_range(k_replicas);
  auto p = spawn_launch(fmt::format("--strategy {} --resource-spec {} --port {} -- {} ps {} --steps 8", job.strategy,
                                    job.spec, port, sibling_executable("apiary"), common_args(job)));
  const auto l = finish_launch(*p);
  INFO(l.text);
  REQUIRE(l.rc == 0);
  check_replicas(l, k_replicas, 8);
}

TEST_CASE("apiary ps launched without the PS processes its strategy needs says so", "[integration][launch]") {
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, {}, "launch_no_ps", true);
  const int port = free_port_range(k_replicas);
  auto p = spawn_launch(fmt::format("--strategy {} --resource-spec {} --port {} -- {} ps {} --steps 2", job.strategy,
                                    job.spec, port, sibling_executable("apiary"), common_args(job)));
  const auto l = finish_launch(*p);
  INFO(l.text);
  CHECK(l.rc == 2);
  CHECK_THAT(l.text, Catch::Contains(fmt::format("of {}: the job has {} processes ({} replicas, then one per PS "
                                                 "device: {})",
                                                 k_replicas, k_replicas + job.plan.servers.size(), k_replicas,
                                                 job.plan.servers.size())));
  CHECK_THAT(l.text, Catch::Contains("`apiary launch --ps-processes` starts the PS processes too"));
  CHECK_THAT(l.text, Catch::Contains("exited with 2; stopping the others"));
}

/// The pids a launched `sh` trainer printed ("pid N").
std::vector<pid_t> printed_pids(const std::string& text) {
  std::vector<pid_t> out;
  const std::regex pid(R"(\] pid ([0-9]+))");
  for (std::sregex_iterator it(text.begin(), text.end(), pid), end; it != end; ++it) out.push_back(std::stoi((*it)[1]));
  return out;
}

/// Whether `pid` still runs: it exists and is not a zombie (an orphan waits for its
/// reaper, which on some machines never comes).
bool alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() || text[paren + 2] != 'Z';
}

/// Whether `pid`, a process behind a remote shell (the launcher reaps the shell, not it),
/// has stopped within five seconds: its signal lands a moment after its shell's.
bool stops(pid_t pid) {
  for (int i = 0; i < 100 && alive(pid); ++i) std::this_thread::sleep_for(50ms);
  return !alive(pid);
}

TEST_CASE("one process failing stops the others, and the launcher exits with its status", "[integration][launch]") {
  const Job job = make_job(cs::BuilderKind::all_reduce, {}, "launch_fail", false);
  // Rank 2 fails once every rank has started; the others would sleep for ten minutes.
  const std::string trainer =
      "sh -c 'echo pid $$; if [ \"$RANK\" = 2 ]; then sleep 1; echo cannot go on >&2; exit 3; fi; exec sleep 600'";
  auto p = spawn_launch(fmt::format("--strategy {} --resource-spec {} --grace-ms 2000 -- {}", job.strategy, job.spec,
                                    trainer));
  const auto l = finish_launch(*p);
  INFO(l.text);
  CHECK(l.rc == 3);
  CHECK_THAT(l.text, Catch::Contains("[localhost r2 worker] cannot go on"));
  CHECK_THAT(l.text, Catch::Contains("launch: rank 2 (worker localhost:CPU:2 on localhost) exited with 3; stopping "
                                     "the others"));
  const auto pids = printed_pids(l.text);
  CHECK(pids.size() == k_replicas);
  for (pid_t pid : pids) CHECK_FALSE(alive(pid));
}

TEST_CASE("SIGINT to the launcher stops every process, SIGKILL after the grace for one that ignores SIGTERM",
          "[integration][launch]") {
  const Job job = make_job(cs::BuilderKind::all_reduce, {}, "launch_sigint", false);
  const std::string trainer =
      "sh -c 'echo pid $$; if [ \"$RANK\" = 1 ]; then trap \"\" TERM; while true; do sleep 0.1; done; fi; "
      "exec sleep 600'";
  auto p = spawn_launch(fmt::format("--strategy {} --resource-spec {} --grace-ms 500 -- {}", job.strategy, job.spec,
                                    trainer));
  std::string seen;
  for (int i = 0; i < k_replicas; ++i) REQUIRE(read_until(*p, "] pid ", 30s, seen));
  p->kill(SIGINT);
  auto l = finish_launch(*p);
  l.text = seen + l.text;
  INFO(l.text);
  CHECK(l.rc == 128 + SIGINT);
  CHECK_THAT(l.text, Catch::Contains("launch: SIGINT: stopping every process"));
  CHECK_THAT(l.text, Catch::Contains("rank 1 (worker localhost:CPU:1 on localhost) still runs 500 ms after SIGTERM: "
                                     "SIGKILL"));
  const auto pids = printed_pids(l.text);
  CHECK(pids.size() == k_replicas);
  for (pid_t pid : pids) CHECK_FALSE(alive(pid));
}

/// Runs `command` (stderr merged) and collects its output.
Run run_command(const std::string& command) {
  Process p({"/bin/sh", "-c", "exec " + command + " 2>&1"});
  return finish(p);
}

/// Every "final NAME v..." line of `run` (whatever process printed it) holds `expected`'s values.
void check_every_final(const Run& run, const std::map<std::string, std::vector<float>>& expected, int count) {
  for (const auto& [name, values] : expected) {
    int seen = 0;
    for (const auto& whole : run.lines) {
      // torchrun --tee puts "[defaultN]:" before each line of local rank N.
      const std::string line = std::regex_replace(whole, std::regex(R"(^\[default[0-9]+\]:)"), "");
      std::istringstream in(line);
      std::string word, var;
      if (!(in >> word >> var) || word != "final" || var != name) continue;
      ++seen;
      std::vector<float> got;
      for (float v = 0; in >> v;) got.push_back(v);
      REQUIRE(got.size() == values.size());
      for (std::size_t i = 0; i < values.size(); ++i) CHECK(got[i] == Approx(values[i]).margin(1e-5));
    }
    CHECK(seen == count);
  }
}

TEST_CASE("apiary ps takes its place from torchrun's RANK and WORLD_SIZE", "[integration][launch]") {
  if (std::system("command -v torchrun >/dev/null 2>&1") != 0) {
    WARN("skipped: no torchrun here (Debian's python3-torch has it)");
    return;
  }
  // A PS job: four replicas, then one PS process per PS device, which ends once every
  // replica finished.
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, {}, "launch_torchrun", true);
  const int processes = k_replicas + static_cast<int>(job.plan.servers.size());
  const int master = free_port_range(processes + 1);
  // Debian's torch 1.13 on Python 3.11 cannot parse its own defaults of --redirects and
  // --tee ("0": Python 3.11 no longer lists a zero flag when iterating an IntFlag), so
  // name them: every rank's stdout teed to the console, and to files under --log_dir.
  const Job logs = job_directory("launch", "torchrun_logs");
  const auto run = run_command(fmt::format(
      "torchrun --nnodes 1 --nproc_per_node {} --master_addr 127.0.0.1 --master_port {} --redirects 1 --tee 1 "
      "--log_dir {} --no_python {} ps {} --steps 6",
      processes, master, logs.dir, sibling_executable("apiary"), common_args(job)));
  INFO(run.text);
  REQUIRE(run.rc == 0);
  check_every_final(run, reference_sgd(6, k_replicas), k_replicas);
  CHECK_THAT(run.text, Catch::Contains(fmt::format("(RANK): chief localhost:CPU:0 at 127.0.0.1:{}", master + 1)));
  for (const auto& device : job.plan.servers) {
    CHECK_THAT(run.text, Catch::Contains("ps " + device + " stopping on every replica finished"));
  }
}

TEST_CASE("apiary ps takes its place from mpirun's OMPI_COMM_WORLD_RANK", "[integration][launch]") {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) {
    WARN("skipped: no mpirun here (Debian's openmpi-bin has it)");
    return;
  }
  const Job job = make_job(cs::BuilderKind::all_reduce, {}, "launch_mpirun", false);
  const int port = free_port_range(k_replicas);
  const auto run = run_command(fmt::format(
      "mpirun --allow-run-as-root --oversubscribe --bind-to none -np {} --mca oob_tcp_if_include lo --mca btl self "
      "-x APIARY_PORT={} -x UCX_NET_DEVICES -x UCX_WARN_UNUSED_ENV_VARS {} ps {} --steps 6",
      k_replicas, port, sibling_executable("apiary"), common_args(job)));
  INFO(run.text);
  REQUIRE(run.rc == 0);
  check_every_final(run, reference_sgd(6, k_replicas), k_replicas);
  CHECK_THAT(run.text, Catch::Contains(fmt::format("(OMPI_COMM_WORLD_RANK): worker localhost:CPU:3 at 127.0.0.1:{}",
                                                   port + 3)));
}

TEST_CASE("over ssh, the launcher's line runs as sshd runs it, and closing its stdin stops the remote trainer",
          "[integration][launch]") {
  // A stand-in for ssh (its name is ssh, so the launcher speaks ssh to it): it notes the
  // options and the host, then runs the command line with a shell in a session of its
  // own, stdin forwarded, as sshd would on another machine. A signal to the launcher's
  // child does not reach that session: only the line's stdin closing can stop it.
  Job job = job_directory("launch", "ssh");
  const std::string ssh = job.dir + "/bin/ssh";
  const std::string log = job.dir + "/ssh.log";
  REQUIRE(std::system(("mkdir -p " + job.dir + "/bin").c_str()) == 0);
  // One line per call (`host HOST: OPTIONS`), appended in one write: the calls run at once.
  std::ofstream(ssh) << "#!/bin/sh\n"
                     << "o=''; while [ $# -gt 2 ]; do o=\"$o $1 $2\"; shift 2; done\n"
                     << "echo \"host $1:$o\" >> " << log << "\n"
                     << "exec setsid -w sh -c \"$2\"\n";
  REQUIRE(std::system(("chmod +x " + ssh).c_str()) == 0);
  const std::string spec_text =
      "nodes:\n  - address: 10.213.0.1\n    chief: true\n    ssh_config: a\n  - address: 10.213.0.2\n    ssh_config: a\n"
      "ssh:\n  a: {username: trainer, port: 2222, key_file: /keys/id, shared_envs: {DATA_DIR: /data}}\n";
  auto spec = cs::parse_resource_spec(spec_text, "spec");
  REQUIRE(spec.ok());
  (void)write_strategy(job, spec_text, *spec, cs::BuilderKind::all_reduce, {}, cps::logistic_graph_item(k_features));
  // Rank 1 fails once both started; rank 0 would sleep for ten minutes.
  const std::string trainer =
      "sh -c 'echo pid $$ in $(pwd) with $DATA_DIR; if [ \"$RANK\" = 1 ]; then sleep 1; exit 6; fi; exec sleep 600'";
  auto p = spawn_launch(fmt::format("--strategy {} --resource-spec {} --remote-shell {} --directory /tmp --grace-ms 3000 "
                                    "-- {}",
                                    job.strategy, job.spec, ssh, trainer));
  const auto l = finish_launch(*p);
  INFO(l.text);
  CHECK(l.rc == 6);
  CHECK_THAT(l.text, Catch::Contains("[10.213.0.1 r0 chief] pid "));
  CHECK_THAT(l.text, Catch::Contains(" in /tmp with /data"));
  CHECK_THAT(l.text, Catch::Contains("launch: rank 1 (worker 10.213.0.2:CPU:0 on 10.213.0.2) exited with 6"));
  std::ifstream in(log);
  const std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(said, Catch::Contains("host 10.213.0.1: -l trainer -p 2222 -i /keys/id\n"));
  CHECK_THAT(said, Catch::Contains("host 10.213.0.2: -l trainer -p 2222 -i /keys/id\n"));
  // Rank 0's trainer, in its own session, was stopped by its line's stdin closing.
  const auto pids = printed_pids(l.text);
  REQUIRE(pids.size() == 2);
  for (pid_t pid : pids) CHECK(stops(pid));
}

/// Three hosts made of network namespaces, each named by its address (P.1, P.2, P.3 in a
/// /24 in 10.200-249.x.x drawn from the process id), joined by veth pairs to a bridge in a fourth namespace: no
/// address exists outside them. Removed with this.
class NamespaceHosts {
 public:
  NamespaceHosts() {
    if (::geteuid() != 0) {
      ns_.set_why("making network namespaces needs root");
      return;
    }
    if (std::system("command -v ip >/dev/null 2>&1") != 0) {
      ns_.set_why("no ip command (iproute2)");
      return;
    }
    // Names no other test process draws at the same time: from this process's id.
    const auto pid = static_cast<unsigned>(::getpid());
    prefix_ = fmt::format("10.{}.{}", 200 + (pid / 250) % 50, pid % 250);
    switch_ = fmt::format("apiary-sw-{}", pid);
    if (!ns_.make(switch_, fmt::format("ip -n {0} link add br0 type bridge && ip -n {0} link set br0 up", switch_))) {
      return;
    }
    for (int i = 1; i <= 3; ++i) {
      if (!ns_.make(host(i), fmt::format("ip link add apiary0 netns {0} type veth peer name h{1} netns {2} && "
                                         "ip -n {0} addr add {0}/24 dev apiary0 && ip -n {0} link set apiary0 up && "
                                         "ip -n {0} link set lo up && ip -n {2} link set h{1} master br0 && "
                                         "ip -n {2} link set h{1} up",
                                         host(i), i, switch_))) {
        return;
      }
    }
  }

  /// Empty when the hosts are up; else why not.
  [[nodiscard]] const std::string& why() const { return ns_.why(); }
  /// Host i (1..3): its address, and its namespace's name.
  [[nodiscard]] std::string host(int i) const { return fmt::format("{}.{}", prefix_, i); }
  /// A resource spec of the three hosts, one CPU each, the first the chief.
  [[nodiscard]] std::string spec() const {
    return fmt::format("nodes:\n  - address: {}\n    chief: true\n  - address: {}\n    ssh_config: ns\n"
                       "  - address: {}\n    ssh_config: ns\nssh:\n  ns: {{}}\n",
                       host(1), host(2), host(3));
  }

 private:
  testing::Namespaces ns_;
  std::string prefix_;
  std::string switch_;
};

/// A job of `kind` for the namespace hosts' cluster.
Job namespace_job(const NamespaceHosts& hosts, cs::BuilderKind kind, const std::string& name) {
  Job job = job_directory("launch", name);
  auto spec = cs::parse_resource_spec(hosts.spec(), "spec");
  REQUIRE(spec.ok());
  (void)write_strategy(job, hosts.spec(), *spec, kind, {}, cps::logistic_graph_item(k_features));
  return job;
}

/// `apiary launch` over the namespace hosts: each process started by `ip netns exec`,
/// UCX on the interface of its listen address (UCX_NET_DEVICES unset).
std::unique_ptr<Process> launch_in_namespaces(const std::string& args) {
  return spawn_launch("--remote-shell 'ip netns exec' " + args, "env -u UCX_NET_DEVICES");
}

TEST_CASE("a PS job and an all-reduce job over three namespace hosts train as single-process SGD",
          "[integration][launch][netns]") {
  NamespaceHosts hosts;
  if (!hosts.why().empty()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  constexpr int k_hosts = 3;
  for (auto kind : {cs::BuilderKind::ps_load_balancing, cs::BuilderKind::all_reduce}) {
    const Job job = namespace_job(hosts, kind, std::string(cs::to_string(kind)));
    auto p = launch_in_namespaces(fmt::format("--strategy {} --resource-spec {} --ps-processes -- {} ps {} --steps 8",
                                              job.strategy, job.spec, sibling_executable("apiary"),
                                              common_args(job)));
    const auto l = finish_launch(*p);
    INFO(cs::to_string(kind) << ":\n" << l.text);
    REQUIRE(l.rc == 0);
    check_replicas(l, k_hosts, 8);
    for (int r = 0; r < k_hosts; ++r) {
      CHECK_THAT(l.text, Catch::Contains(fmt::format("[{} r{} {}] place rank {} of", hosts.host(r + 1), r,
                                                     r == 0 ? "chief" : "worker", r)));
      CHECK_THAT(l.ranks.at(r).text, Catch::Contains(fmt::format(" at {}:1500{}", hosts.host(r + 1), r)));
    }
  }
}

TEST_CASE("a process failing on one namespace host stops the processes on the others",
          "[integration][launch][netns]") {
  NamespaceHosts hosts;
  if (!hosts.why().empty()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  const Job job = namespace_job(hosts, cs::BuilderKind::all_reduce, "netns_fail");
  const std::string trainer =
      "sh -c 'echo pid $$; if [ \"$RANK\" = 2 ]; then sleep 1; exit 4; fi; exec sleep 600'";
  auto p = launch_in_namespaces(
      fmt::format("--strategy {} --resource-spec {} --grace-ms 2000 -- {}", job.strategy, job.spec, trainer));
  const auto l = finish_launch(*p);
  INFO(l.text);
  CHECK(l.rc == 4);
  CHECK_THAT(l.text, Catch::Contains(fmt::format("launch: rank 2 (worker {}:CPU:0 on {}) exited with 4; stopping the "
                                                 "others",
                                                 hosts.host(3), hosts.host(3))));
  const auto pids = printed_pids(l.text);
  CHECK(pids.size() == 3);
  for (pid_t pid : pids) CHECK(stops(pid));
}

}  // namespace
}  // namespace apiary::testing
