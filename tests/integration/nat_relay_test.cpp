// Peers behind NAT, reached through a relay, over network namespaces the test makes: a
// "public" namespace holding the relay and bootstrap node, and two "private" namespaces,
// each behind its own NAT namespace (iptables MASQUERADE), joined by veth pairs. The
// addresses exist only inside these namespaces: a private peer can open connections to
// the public one, nobody can open one to a private peer, and the two private peers
// cannot reach each other at all except through the relay. Without root, `ip` or
// `iptables` the tests report skipped, saying why.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <unistd.h>

#include <csignal>

#include "tests/support/netns.hpp"
#include "tests/support/process.hpp"

using namespace apiary;
using namespace std::chrono_literals;
using testing::Process;

namespace {

/// What a command printed (stderr merged) and its exit status.
struct Run {
  int rc = -1;
  std::string text;
};

Run run(const std::string& command) {
  Process p({"/bin/sh", "-c", "exec " + command + " 2>&1"});
  Run r;
  while (auto line = p.read_line(60s)) r.text += *line + "\n";
  r.rc = p.wait(60s);
  return r;
}

/// The namespaces: pub (P.250 on a bridge), nat1 and nat2 (P.1 and P.2 on its bridge, and
/// the gateway of their private /24), priv1 and priv2 (.2 of those /24s). P is 10.A.B
/// with A in 200..249 drawn from the process id; the private /24s are 10.A-100.B and
/// 10.A-50.B. UCX 1.13's tcp lanes are opened by the side with the lower address (the
/// other waits for it), so a private peer's address, and its NAT's public one, must be
/// lower than the public peer's: transport/README.md "Relays".
class NatNet {
 public:
  NatNet() {
    if (::geteuid() != 0) {
      ns_.set_why("making network namespaces needs root");
      return;
    }
    for (const char* tool : {"ip", "iptables"}) {
      if (run(fmt::format("sh -c 'command -v {}'", tool)).rc != 0) {
        ns_.set_why(fmt::format("no {} command (install {})", tool, std::string(tool) == "ip" ? "iproute2" : "iptables"));
        return;
      }
    }
    const auto pid = static_cast<unsigned>(::getpid());
    a_ = 200 + (pid / 250) % 50;
    b_ = pid % 250;
    tag_ = std::to_string(pid);
    if (!ns_.make(ns("pub"), fmt::format("ip -n {0} link add br0 type bridge && ip -n {0} addr add {1}/24 dev br0 && "
                                     "ip -n {0} link set br0 up && ip -n {0} link set lo up",
                                     ns("pub"), public_host()))) {
      return;
    }
    for (int i = 1; i <= 2; ++i) {
      const std::string nat = ns("nat" + std::to_string(i));
      const std::string priv = ns("priv" + std::to_string(i));
      const std::string lan = fmt::format("{}.{}", lan_prefix(i), b_);
      if (!ns_.make(nat, fmt::format("ip link add wan netns {0} type veth peer name p{1} netns {2} && "
                                 "ip -n {2} link set p{1} master br0 && ip -n {2} link set p{1} up && "
                                 "ip -n {0} addr add 10.{3}.{4}.{1}/24 dev wan && ip -n {0} link set wan up && "
                                 "ip -n {0} link set lo up && ip netns exec {0} sysctl -qw net.ipv4.ip_forward=1 && "
                                 "ip netns exec {0} iptables -t nat -A POSTROUTING -o wan -j MASQUERADE",
                                 nat, i, ns("pub"), a_, b_))) {
        return;
      }
      if (!ns_.make(priv, fmt::format("ip link add eth0 netns {0} type veth peer name lan netns {1} && "
                                  "ip -n {1} addr add {2}.1/24 dev lan && ip -n {1} link set lan up && "
                                  "ip -n {0} addr add {2}.2/24 dev eth0 && ip -n {0} link set eth0 up && "
                                  "ip -n {0} link set lo up && ip -n {0} route add default via {2}.1",
                                  priv, nat, lan))) {
        return;
      }
    }
  }
  /// Empty when the namespaces are up; else why not.
  [[nodiscard]] const std::string& why() const { return ns_.why(); }
  /// The namespace `name` ("pub", "nat1", "priv2", ...) of this process.
  [[nodiscard]] std::string ns(const std::string& name) const { return "apiary-" + name + "-" + tag_; }
  [[nodiscard]] std::string public_host() const { return fmt::format("10.{}.{}.250", a_, b_); }
  /// Private peer i's (1, 2) address.
  [[nodiscard]] std::string private_host(int i) const { return fmt::format("{}.{}.2", lan_prefix(i), b_); }
  /// `apiary ARGS` run in namespace `name`, on the interface of its listen address.
  [[nodiscard]] std::string apiary_in(const std::string& name, const std::string& args) const {
    return fmt::format("ip netns exec {} env -u UCX_NET_DEVICES {} {}", ns(name), testing::sibling_executable("apiary"),
                       args);
  }

 private:
  [[nodiscard]] std::string lan_prefix(int i) const { return fmt::format("10.{}", a_ - (i == 1 ? 100 : 50)); }
  unsigned a_ = 0, b_ = 0;
  std::string tag_;
  testing::Namespaces ns_;
};

/// A long-running `apiary` process in a namespace, and the address it printed; stopped
/// with SIGTERM.
struct Node {
  std::unique_ptr<Process> proc;
  std::string addr;
  Node() = default;
  Node(Node&&) = default;
  Node& operator=(Node&&) = default;
  ~Node() {
    if (proc) proc->kill(SIGTERM);
  }
};

Node start(const NatNet& net, const std::string& name, const std::string& args) {
  Node n;
  n.proc = std::make_unique<Process>(std::vector<std::string>{"/bin/sh", "-c", "exec " + net.apiary_in(name, args)});
  auto line = n.proc->read_line(60s);
  INFO(name << ": apiary " << args);
  REQUIRE(line);
  REQUIRE(line->rfind("listening /ip4/", 0) == 0);
  n.addr = line->substr(10);
  return n;
}

}  // namespace

TEST_CASE("peers behind NAT learn they cannot be called back and store and get in the DHT through a relay",
          "[integration][netns][relay]") {
  NatNet net;
  if (!net.why().empty()) {
    WARN("skipped: " << net.why());
    return;
  }
  const Node relay = start(net, "pub", fmt::format("dht --listen /ip4/{}/tcp/4400 --relay-service", net.public_host()));
  CHECK(relay.addr.rfind(fmt::format("/ip4/{}/tcp/4400/p2p/", net.public_host()), 0) == 0);

  // Without --auto-relay a private peer's bootstrap fails, saying why.
  const auto alone = run(net.apiary_in("priv1", fmt::format("dht --listen /ip4/{}/tcp/4401 --initial-peers {}",
                                                            net.private_host(1), relay.addr)));
  CHECK(alone.rc != 0);
  CHECK_THAT(alone.text, Catch::Contains("could not call us back") && Catch::Contains("--auto-relay"));

  std::vector<Node> priv;
  for (int i = 1; i <= 2; ++i) {
    priv.push_back(start(net, "priv" + std::to_string(i),
                         fmt::format("dht --listen /ip4/{}/tcp/440{} --initial-peers {} --auto-relay",
                                     net.private_host(i), i, relay.addr)));
    // Its address is the relay's, then /p2p-circuit and its own PeerID.
    CHECK(priv.back().addr.rfind(relay.addr + "/p2p-circuit/p2p/", 0) == 0);
  }
  auto id_of = [](const Node& n) { return n.addr.substr(n.addr.rfind('/') + 1); };

  // A client in priv1's namespace stores through priv1's node: three replicas, one of
  // them priv2, which only the relay reaches.
  const auto stored = run(net.apiary_in(
      "priv1", fmt::format("dht store --peer /ip4/{}/tcp/4401/p2p/{} greeting 'hello from behind NAT' --ttl 120",
                           net.private_host(1), id_of(priv[0]))));
  INFO(stored.text);
  CHECK(stored.rc == 0);
  CHECK_THAT(stored.text, Catch::Contains("ok (3 replicas)"));
  // And a client in priv2's namespace finds it.
  const auto got = run(net.apiary_in("priv2", fmt::format("dht get --peer /ip4/{}/tcp/4402/p2p/{} greeting",
                                                          net.private_host(2), id_of(priv[1]))));
  INFO(got.text);
  CHECK(got.rc == 0);
  CHECK_THAT(got.text, Catch::Contains("greeting = \"hello from behind NAT\""));
}

TEST_CASE("two averagers behind NAT average together through a relay", "[integration][netns][relay]") {
  NatNet net;
  if (!net.why().empty()) {
    WARN("skipped: " << net.why());
    return;
  }
  const Node relay = start(net, "pub", fmt::format("dht --listen /ip4/{}/tcp/4410 --relay-service", net.public_host()));
  std::vector<std::unique_ptr<Process>> peers;
  std::vector<std::string> addrs;
  for (int i = 1; i <= 2; ++i) {
    const std::string args = fmt::format(
        "average --listen /ip4/{}/tcp/441{} --initial-peers {} --auto-relay --values {} --target-group-size 2 "
        "--min-group-size 2 --min-matchmaking-time 3 --timeout 60 --linger 3 2>&1",
        net.private_host(i), i, relay.addr, i == 1 ? "1,2,3,4" : "3,6,9,12");
    peers.push_back(
        std::make_unique<Process>(std::vector<std::string>{"/bin/sh", "-c", "exec " + net.apiary_in("priv" + std::to_string(i), args)}));
  }
  for (int i = 0; i < 2; ++i) {
    std::string out;
    while (auto line = peers[i]->read_line(120s)) out += *line + "\n";
    const int rc = peers[i]->wait(30s);
    INFO("averager " << i + 1 << ":\n" << out);
    CHECK(rc == 0);
    CHECK_THAT(out, Catch::Contains("/p2p-circuit/p2p/"));
    CHECK_THAT(out, Catch::Contains("step 1: group of 2,"));
    // Both members are named by their relayed addresses: the all-reduce went through the relay.
    CHECK_THAT(out, Catch::Contains("member 0: " + relay.addr + "/p2p-circuit/p2p/") &&
                        Catch::Contains("member 1: " + relay.addr + "/p2p-circuit/p2p/"));
    CHECK_THAT(out, Catch::Contains("values 2 4 6 8"));
  }
}

TEST_CASE("a Python DHT behind NAT with use_auto_relay stores through a relay for peers behind another NAT",
          "[integration][netns][relay]") {
  NatNet net;
  if (!net.why().empty()) {
    WARN("skipped: " << net.why());
    return;
  }
  const std::string apiary_bin = testing::sibling_executable("apiary");
  const std::string module_dir = apiary_bin.substr(0, apiary_bin.rfind("/bin/")) + "/python";
  if (run(fmt::format("env PYTHONPATH={} /usr/bin/python3 -c 'import apiary'", module_dir)).rc != 0) {
    WARN("skipped: the apiary Python module is not built in " << module_dir);
    return;
  }
  const Node relay = start(net, "pub", fmt::format("dht --listen /ip4/{}/tcp/4420 --relay-service", net.public_host()));
  const Node other = start(net, "priv2", fmt::format("dht --listen /ip4/{}/tcp/4422 --initial-peers {} --auto-relay",
                                                     net.private_host(2), relay.addr));
  // hivemind's way: DHT(initial_peers=..., use_auto_relay=True), then store.
  const std::string script =
      "import sys, apiary\n"
      "d = apiary.DHT(initial_peers=[sys.argv[1]], host_maddrs=[sys.argv[2]], use_auto_relay=True)\n"
      "print('visible', d.get_visible_maddrs()[0], flush=True)\n"
      "print('stored', d.store('py-key', 'from python', apiary.get_dht_time() + 120), flush=True)\n"
      "d.shutdown()\n";
  const auto py = run(fmt::format("ip netns exec {} env -u UCX_NET_DEVICES PYTHONPATH={} /usr/bin/python3 -c \"{}\" {} "
                                  "/ip4/{}/tcp/0",
                                  net.ns("priv1"), module_dir, script, relay.addr, net.private_host(1)));
  INFO(py.text);
  CHECK(py.rc == 0);
  CHECK_THAT(py.text, Catch::Contains("visible " + relay.addr + "/p2p-circuit/p2p/"));
  CHECK_THAT(py.text, Catch::Contains("stored True"));
  const std::string other_id = other.addr.substr(other.addr.rfind('/') + 1);
  const auto got = run(net.apiary_in("priv2", fmt::format("dht get --peer /ip4/{}/tcp/4422/p2p/{} py-key",
                                                          net.private_host(2), other_id)));
  INFO(got.text);
  CHECK(got.rc == 0);
  CHECK_THAT(got.text, Catch::Contains("py-key = \"from python\""));
}
