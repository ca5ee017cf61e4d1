// `apiary ps` processes finding each other through the job's DHT instead of --peers:
// the first PS process bootstraps the DHT and prints its multiaddr, every other process
// joins with --initial-peers; replicas read `<job>.ps.<device>` for each PS device they
// have no --peers entry for. Training must equal single-process SGD as with --peers; a
// PS that never shows up must end the replica with an error naming it, not a hang. With
// local_replication, the node's first replica hosts the node's proxy and the others pull
// through it (found in the DHT, or by --peers proxy:<node>=HOST:PORT).
#include <catch2/catch.hpp>

#include <csignal>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "core/strategy/builders.hpp"
#include "tests/integration/ps_job.hpp"
#include "tests/support/process.hpp"

using namespace apiary;
using namespace apiary::testing::ps_job;
using namespace std::chrono_literals;

namespace {

/// PS processes started through the DHT: the first without --initial-peers.
struct DhtServers {
  std::vector<std::unique_ptr<testing::Process>> procs;
  std::string bootstrap;  ///< the first PS's DHT multiaddr
  std::string peers;      ///< " DEVICE=HOST:PORT" of each, for replicas given --peers

  ~DhtServers() {
    for (auto& p : procs) p->kill(SIGTERM);
  }
};

/// Starts a PS process for each of `devices`, the first bootstrapping the DHT.
void start_dht_servers(const Job& job, const std::vector<std::string>& devices, const std::string& extra,
                       DhtServers& s) {
  for (const auto& device : devices) {
    const std::string join = s.bootstrap.empty() ? "" : " --initial-peers " + s.bootstrap;
    auto p = spawn_ps("--role ps --stop-on-stdin-eof --device " + device + " " + common_args(job) + join + " " + extra);
    std::string seen;
    auto listening = read_until(*p, " listening ", 30s, seen);
    auto dht = read_until(*p, " dht /ip4/", 30s, seen);
    INFO("PS " << device << " printed:\n" << seen);
    REQUIRE(listening);
    REQUIRE(dht);
    const std::string at = listening->substr(listening->find(" listening ") + 11);
    s.peers += " " + device + "=" + at.substr(0, at.find(' '));
    // "ps DEVICE dht /ip4/.../p2p/12D3KooW... key JOB.ps.DEVICE"
    const std::string addr = dht->substr(dht->find(" dht ") + 5);
    REQUIRE(addr.find("/p2p/12D3KooW") != std::string::npos);
    if (s.bootstrap.empty()) s.bootstrap = addr.substr(0, addr.find(' '));
    s.procs.push_back(std::move(p));
  }
}

/// The replicas' runs must equal single-process SGD after `steps` steps, each step on
/// exactly the steps before it.
void check_sgd(const std::vector<Run>& runs, std::int64_t steps) {
  const auto expected = reference_sgd(steps);
  for (std::size_t r = 0; r < runs.size(); ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    REQUIRE(runs[r].rc == 0);
    const auto sv = step_versions(runs[r]);
    for (const auto& [step, version] : sv) CHECK(version == step);
    CHECK(sv.size() == static_cast<std::size_t>(steps));
    check_close(runs[r], expected);
  }
}

}  // namespace

TEST_CASE("PS processes found through the DHT train as with --peers: single-process SGD", "[ps][integration]") {
  const std::int64_t steps = 12;
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, {}, "dht_bsp", true);
  REQUIRE(job.plan.servers.size() >= 2);
  DhtServers servers;
  start_dht_servers(job, job.plan.servers, "--job dhtbsp", servers);
  std::vector<std::unique_ptr<testing::Process>> procs;
  for (int r = 0; r < k_replicas; ++r) {
    // Replicas 0-2 find every PS in the DHT; replica 3 has them all in --peers, which win:
    // its --job names nothing in the DHT, so any lookup would fail.
    const std::string where = r < k_replicas - 1 ? " --job dhtbsp" : " --job nothing_here --peers" + servers.peers;
    procs.push_back(spawn_ps(replica_role(r) + " --stop-on-stdin-eof " + common_args(job) + " --steps " +
                             std::to_string(steps) + " --timeout-ms 20000 --initial-peers " + servers.bootstrap +
                             where));
  }
  check_sgd(finish_all(procs), steps);
}

TEST_CASE("a replica whose PS never shows up in the DHT fails naming it, within --timeout-ms", "[ps][integration]") {
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, {}, "dht_missing", true);
  REQUIRE(job.plan.servers.size() >= 2);
  DhtServers servers;
  start_dht_servers(job, {job.plan.servers[0]}, "", servers);
  auto chief = spawn_ps("--role chief --stop-on-stdin-eof " + common_args(job) +
                        " --steps 5 --timeout-ms 1500 --initial-peers " + servers.bootstrap);
  const auto run = finish(*chief);
  INFO("the chief printed:\n" << run.text);
  CHECK(run.rc == 1);
  CHECK(run.text.find("apiary ps: ") != std::string::npos);
  CHECK(run.text.find("not found: " + job.plan.servers[1] + " (key ps.ps." + job.plan.servers[1] + ")") !=
        std::string::npos);
  // The device that did show up is not named among the missing.
  CHECK(run.text.find("not found: " + job.plan.servers[0]) == std::string::npos);
  CHECK(run.text.find("--initial-peers") != std::string::npos);
  CHECK(run.text.find("step 0 ") == std::string::npos);
}

TEST_CASE("a replica with neither --peers nor --initial-peers is told what to pass (exit 2)", "[ps][integration]") {
  const Job job = make_job(cs::BuilderKind::ps_load_balancing, {}, "dht_neither", true);
  auto chief = spawn_ps("--role chief --stop-on-stdin-eof " + common_args(job) + " --steps 5");
  const auto run = finish(*chief);
  INFO("the chief printed:\n" << run.text);
  CHECK(run.rc == 2);
  for (const auto& device : job.plan.servers) CHECK(run.text.find(device) != std::string::npos);
  CHECK(run.text.find("expected --peers DEVICE=HOST:PORT for each, or --initial-peers") != std::string::npos);
}

TEST_CASE("local_replication across processes: the node's replicas share one proxy, found in the DHT or by --peers",
          "[ps][integration]") {
  const bool by_dht = GENERATE(true, false);
  INFO("proxy found " << (by_dht ? "in the DHT" : "by --peers proxy:localhost=..."));
  const std::int64_t steps = 10;
  cs::BuilderOptions options;
  options.local_proxy_variable = true;
  const Job job = make_job(cs::BuilderKind::partitioned_ps, options, by_dht ? "proxy_dht" : "proxy_peers", true);
  std::size_t proxied = 0;
  for (const auto& s : job.plan.shards) proxied += s.local_replication ? 1 : 0;
  REQUIRE(proxied > 0);
  DhtServers servers;
  start_dht_servers(job, job.plan.servers, "", servers);
  const std::string common = " --stop-on-stdin-eof " + common_args(job) + " --steps " + std::to_string(steps) +
                             " --timeout-ms 20000 ";
  // The chief (the first replica of node localhost) hosts the proxy.
  std::vector<std::unique_ptr<testing::Process>> procs;
  procs.push_back(spawn_ps(replica_role(0) + common + "--initial-peers " + servers.bootstrap));
  std::string chief_start;
  auto hosted = read_until(*procs[0], "proxy localhost at ", 30s, chief_start);
  INFO("the chief printed:\n" << chief_start);
  REQUIRE(hosted);
  const std::string proxy_at = hosted->substr(hosted->find(" at ") + 4);
  for (int r = 1; r < k_replicas; ++r) {
    const std::string proxy_peer = " proxy:localhost=" + proxy_at.substr(0, proxy_at.find(' '));
    const std::string where = by_dht ? "--initial-peers " + servers.bootstrap : "--peers" + servers.peers + proxy_peer;
    procs.push_back(spawn_ps(replica_role(r) + common + where));
  }
  auto runs = finish_all(procs);
  runs[0].text = chief_start + runs[0].text;
  check_sgd(runs, steps);
  // One pull per proxied shard per step (and the final pull) for the whole node; every
  // replica's reads of those shards answered by the proxy.
  const auto pulls = static_cast<long long>(proxied) * (steps + 1);
  CHECK(runs[0].text.find(fmt::format("proxy localhost: {} pulls for {} reads, {} of {} readers done", pulls,
                                      pulls * k_replicas, k_replicas - 1, k_replicas - 1)) != std::string::npos);
}

TEST_CASE("replicas started before the replica hosting their node's proxy wait for it to serve",
          "[ps][integration]") {
  // Under a launcher every process starts at once and learns the proxy's address from its
  // place: a worker could pull through it before the chief hosted it (unknown handle).
  const std::int64_t steps = 4;
  cs::BuilderOptions options;
  options.local_proxy_variable = true;
  const Job job = make_job(cs::BuilderKind::partitioned_ps, options, "proxy_late", true);
  DhtServers servers;
  start_dht_servers(job, job.plan.servers, "", servers);
  const int chief_port = testing::free_loopback_port();
  const std::string proxy_at = "127.0.0.1:" + std::to_string(chief_port);
  const std::string common = " --stop-on-stdin-eof " + common_args(job) + " --steps " + std::to_string(steps) +
                             " --timeout-ms 20000 --peers" + servers.peers;
  std::vector<std::unique_ptr<testing::Process>> procs;
  for (int r = 1; r < k_replicas; ++r) procs.push_back(spawn_ps(replica_role(r) + common + " proxy:localhost=" + proxy_at));
  std::this_thread::sleep_for(1500ms);  // the workers ask the proxy's address meanwhile
  procs.insert(procs.begin(), spawn_ps(replica_role(0) + common + " --listen " + proxy_at));
  auto runs = finish_all(procs);
  check_sgd(runs, steps);
  for (const auto& run : runs) CHECK(run.text.find("unknown handle") == std::string::npos);
}

TEST_CASE("a replica waiting for a PS device stops at once on SIGTERM", "[ps][integration]") {
  const Job job = make_job(cs::BuilderKind::ps, {}, "stop_waiting", true);
  const int nobody = testing::free_loopback_port();
  auto chief = spawn_ps(replica_role(0) + " --stop-on-stdin-eof " + common_args(job) + " --steps 2 --timeout-ms 60000" +
                        " --peers " + job.plan.servers.front() + "=127.0.0.1:" + std::to_string(nobody));
  std::this_thread::sleep_for(1500ms);  // it is asking the PS by now
  chief->kill(SIGTERM);
  const auto run = finish(*chief);  // well before the 60 s of --timeout-ms
  INFO("the chief printed:\n" << run.text);
  CHECK(run.rc == 1);
  CHECK_THAT(run.text, Catch::Contains("stopped while waiting for PS device " + job.plan.servers.front()));
}
