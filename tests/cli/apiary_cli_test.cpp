// The `apiary` command as a user meets it: nodes that ping each other, and clear
// errors with the right exit codes for bad input.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <csignal>
#include <cstdio>

#include "tests/support/apiary_command.hpp"

using namespace apiary;
using namespace std::chrono_literals;

namespace {

using testing::run_apiary;

/// A running `apiary node` and its listen multiaddr.
struct NodeProcess {
  std::unique_ptr<testing::Process> proc;
  std::string addr;
  explicit NodeProcess(const std::string& args = "") {
    proc = testing::spawn_apiary("node " + args);
    addr = testing::await_listening(*proc, 20s);
  }
};

}  // namespace

TEST_CASE("apiary ping reaches a node and the node shuts down cleanly on SIGTERM", "[integration]") {
  const std::string host = GENERATE(std::string("actor"), std::string("transport"));
  INFO("--host " << host);
  NodeProcess node("--host " + host);
  CHECK(node.addr.find("/p2p/12D3KooW") != std::string::npos);
  auto r = run_apiary("ping " + node.addr + " -c 3 --interval 10");
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("3 probes, 3 answered"));
  node.proc->kill(SIGTERM);
  std::string rest;
  while (auto line = node.proc->read_line(10s)) rest += *line + "\n";
  CHECK(node.proc->wait(10s) == 0);
  CHECK_THAT(rest, Catch::Contains("stopping on SIGTERM"));
}

TEST_CASE("bad input to apiary gives clear errors and exit codes", "[integration]") {
  SECTION("garbage multiaddr") {
    auto r = run_apiary("node --listen /ip4/127.0.0.1/udp/5");
    CHECK(r.rc == 2);
    CHECK_THAT(r.out, Catch::Contains("udp"));
    auto p = run_apiary("ping not-an-address");
    CHECK(p.rc == 2);
    CHECK_THAT(p.out, Catch::Contains("must start with '/'"));
  }
  SECTION("missing identity file") {
    auto r = run_apiary("node --identity /nonexistent/dir/key");
    CHECK(r.rc == 1);
    CHECK_THAT(r.out, Catch::Contains("no such file"));
    CHECK_THAT(r.out, Catch::Contains("apiary identity create"));
  }
  SECTION("port in use") {
    NodeProcess first;
    const std::string listen = first.addr.substr(0, first.addr.find("/p2p/"));
    auto r = run_apiary("node --listen " + listen);
    CHECK(r.rc == 1);
    CHECK_THAT(r.out, Catch::Contains("in use"));
    auto still = run_apiary("ping " + first.addr + " -c 1");  // the first node is unharmed
    CHECK(still.rc == 0);
  }
  SECTION("unreachable peer") {
    auto r = run_apiary("ping /ip4/127.0.0.1/tcp/1 -c 1 --timeout 3000");
    CHECK(r.rc == 1);
    CHECK_THAT(r.out, Catch::Contains("0 answered"));
  }
  SECTION("wrong arguments") {
    CHECK(run_apiary("node --no-such-flag").rc == 2);
    CHECK(run_apiary("").rc == 2);
    CHECK(run_apiary("ping /ip4/127.0.0.1/tcp/1 -c 0").rc == 2);
    auto host = run_apiary("dht --host thread");
    CHECK(host.rc == 2);
    CHECK_THAT(host.out, Catch::Contains("--host"));
  }
  SECTION("benchmark sizes it cannot measure, before any process starts") {
    auto odd = run_apiary("bench allreduce --sizes 4096,6");
    CHECK(odd.rc == 1);
    CHECK_THAT(odd.out, Catch::Contains("multiples of 4 bytes"));
    auto twice = run_apiary("bench allreduce --sizes 4096,1048576,4096");
    CHECK(twice.rc == 1);
    CHECK_THAT(twice.out, Catch::Contains("size 4096 is given twice"));
    auto ranks = run_apiary("bench allreduce --ranks 2,2");
    CHECK(ranks.rc == 1);
    CHECK_THAT(ranks.out, Catch::Contains("group size 2 is given twice"));
  }
}

TEST_CASE("identity files: create once, show the same PeerID, load in a node", "[integration]") {
  char dir[] = "/tmp/apiary-cli-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string file = std::string(dir) + "/node.key";
  auto created = run_apiary("identity create " + file);
  REQUIRE(created.rc == 0);
  CHECK(created.out.rfind("12D3KooW", 0) == 0);
  auto shown = run_apiary("identity show " + file);
  CHECK(shown.rc == 0);
  CHECK(shown.out == created.out);
  CHECK(run_apiary("identity create " + file).rc == 1);  // never overwrites
  NodeProcess node("--identity " + file);
  CHECK(node.addr.find(created.out.substr(0, created.out.size() - 1)) != std::string::npos);
  node.proc->kill(SIGTERM);
  node.proc->wait(10s);
  std::remove(file.c_str());
  rmdir(dir);
}

TEST_CASE("apiary sim moe replays a seed and refuses a config it cannot run", "[integration]") {
  // The line "seed=S trace_hash=0x...".
  auto seed_line = [](const std::string& out) {
    const auto begin = out.rfind("seed=");
    return begin == std::string::npos ? std::string{} : out.substr(begin, out.find('\n', begin) - begin);
  };
  const std::string args = "sim moe --servers 3 --experts 2 --clients 2 --steps 5 --k-best 3 --k-min 2 --seed 9";
  auto a = run_apiary(args + " --kill-server 0 --kill-at-step 2");
  REQUIRE(a.rc == 0);
  CHECK_THAT(a.out, Catch::Contains("client 1 step    4:") && Catch::Contains("killed:       server 0"));
  CHECK_THAT(a.out, Catch::Contains("wall time:"));
  auto b = run_apiary(args + " --kill-server 0 --kill-at-step 2");
  CHECK(seed_line(b.out).rfind("seed=9 trace_hash=0x", 0) == 0);
  CHECK(seed_line(a.out) == seed_line(b.out));
  auto big = run_apiary("sim moe --servers 2 --experts 2 --k-best 5");
  CHECK(big.rc == 2);  // bad usage
  CHECK_THAT(big.out, Catch::Contains("expected k in [1, 4]"));
  auto when = run_apiary("sim moe --kill-server 1");
  CHECK(when.rc == 2);
  CHECK_THAT(when.out, Catch::Contains("--kill-at-step"));
}

TEST_CASE("apiary bench transport prints the processor time of a lone round trip, a full window and an idle second",
          "[integration]") {
  auto r = run_apiary("bench transport --quick --modes tcp");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  const auto at = r.out.find("processor time, user and system, of both processes: per 64 B round trip");
  REQUIRE(at != std::string::npos);
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  // Every figure measured (n/a when a process's times could not be read).
  CHECK(line.find("n/a") == std::string::npos);
  CHECK_THAT(line, Catch::Contains("an idle process") && Catch::Contains("ms a second"));
}
