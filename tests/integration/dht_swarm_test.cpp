// A DHT swarm of real `apiary dht` processes on loopback, used by one-shot `apiary dht
// store|get` processes and by an in-test client node: values and dictionary subkeys
// found from other nodes, hivemind's edge-case keys and values, num_replicas copies,
// and dead nodes banned while gets still succeed.
#include <catch2/catch.hpp>

#include <csignal>
#include <future>

#include <msgpack.hpp>

#include "api/dht.hpp"
#include "core/dht/msgpack_value.hpp"
#include "messages/identity/multiaddr.hpp"
#include "messages/identity/peer_id.hpp"
#include "tests/support/apiary_command.hpp"
#include "tests/support/frame_recorder.hpp"
#include "transport/ucx/transport.hpp"

using namespace apiary;
using namespace std::chrono_literals;
using core::dht::FoundValue;

namespace {

using testing::run_apiary;

/// A running `apiary dht` node; `addr` is its multiaddr with /p2p/.
struct DhtProcess {
  std::unique_ptr<testing::Process> proc;
  std::string addr;
};

DhtProcess spawn_node(const std::string& args) {
  DhtProcess p;
  p.proc = testing::spawn_apiary("dht " + args);
  return p;
}

void await_listening(DhtProcess& p) {
  p.addr = testing::await_listening(*p.proc);
  REQUIRE(p.addr.find("/p2p/12D3KooW") != std::string::npos);
}

template <class T>
std::string packed(const T& v) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, v);
  return std::string(buf.data(), buf.size());
}

template <class T>
T ready(std::future<T> f) {
  REQUIRE(f.wait_for(60s) == std::future_status::ready);
  return f.get();
}

}  // namespace

TEST_CASE("a swarm of apiary dht processes stores, finds, merges and survives dead nodes", "[integration]") {
  constexpr int k_nodes = 12;
  std::vector<DhtProcess> nodes;
  nodes.push_back(spawn_node("--listen /ip4/127.0.0.1/tcp/0"));
  await_listening(nodes[0]);
  for (int i = 1; i < k_nodes; ++i) {
    nodes.push_back(spawn_node("--listen /ip4/127.0.0.1/tcp/0 --initial-peers " + nodes[0].addr));
  }
  for (int i = 1; i < k_nodes; ++i) await_listening(nodes[i]);

  DhtOptions co;
  co.client_mode = true;
  co.initial_peers = {nodes[1].addr, nodes[2].addr};
  auto client = Dht::start(co);
  REQUIRE(client.ok());
  auto& dht = **client;

  // One-shot clients: store through one node, get through another.
  auto stored = run_apiary("dht store --peer " + nodes[3].addr + " greeting abyrvalg --ttl 60");
  INFO(stored.out);
  CHECK(stored.rc == 0);
  CHECK_THAT(stored.out, Catch::Contains("stored greeting until ") && Catch::Contains(": ok (5 replicas)"));
  auto got = run_apiary("dht get --peer " + nodes[7].addr + " greeting");
  INFO(got.out);
  CHECK(got.rc == 0);
  CHECK_THAT(got.out, Catch::StartsWith("greeting = \"abyrvalg\" expires in "));
  auto missing = run_apiary("dht get --peer " + nodes[5].addr + " nobody-stored-this");
  CHECK(missing.rc == 1);
  CHECK_THAT(missing.out, Catch::Contains("nobody-stored-this: not found"));

  // Subkeys stored through two nodes are merged by a latest get through a third.
  CHECK(run_apiary("dht store --peer " + nodes[1].addr + " experts first --subkey a").rc == 0);
  CHECK(run_apiary("dht store --peer " + nodes[2].addr + " experts second --subkey b").rc == 0);
  auto merged = run_apiary("dht get --latest --peer " + nodes[9].addr + " experts");
  INFO(merged.out);
  CHECK(merged.rc == 0);
  CHECK_THAT(merged.out, Catch::Contains("experts[\"a\"] = \"first\" expires in "));
  CHECK_THAT(merged.out, Catch::Contains("experts[\"b\"] = \"second\" expires in "));
  auto from_client = ready(dht.get(DhtKey::str("experts"), true));
  REQUIRE(from_client.ok());
  REQUIRE(from_client->has_value());
  CHECK(std::get<FoundValue::Dictionary>((*from_client)->value).size() == 2);

  // hivemind's edge cases: falsy and odd keys, subkeys and values round-trip.
  const std::vector<std::string> keys = {packed(0), packed(std::string()), packed(false), packed(true),
                                         packed(std::string("abyrvalg")), packed(4555),
                                         core::dht::pack_tuple({})};
  const std::vector<std::string> values = {packed(0),    packed(std::string()), packed(false),
                                           packed(true), packed(std::string("abyrvalg")),
                                           packed(4555), core::dht::pack_tuple({}),
                                           packed(std::vector<int>{})};
  const double expiration = Dht::now() + 60;
  std::vector<DhtStoreItem> items;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto key = DhtKey::packed(keys[i]);
    REQUIRE(key.ok());
    items.push_back({*key, values[(i + 1) % values.size()], expiration, std::nullopt});
  }
  const auto dict_key = DhtKey::str("edge-case subkeys");
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto subkey = DhtKey::packed(keys[i]);
    REQUIRE(subkey.ok());
    items.push_back({dict_key, values[i], expiration + static_cast<double>(i), *subkey});
  }
  auto many = ready(dht.store_many(items));
  REQUIRE(many.ok());
  REQUIRE(many->size() == items.size());
  for (const auto& s : *many) {
    CHECK(s.ok);
    CHECK(s.replicas == 5);  // num_replicas
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto f = ready(dht.get(*DhtKey::packed(keys[i]), true));
    REQUIRE(f.ok());
    REQUIRE(f->has_value());
    CHECK(std::get<std::string>((*f)->value) == values[(i + 1) % values.size()]);
    CHECK((*f)->expiration == Approx(expiration));
  }
  auto dict = ready(dht.get(dict_key, true));
  REQUIRE(dict.ok());
  REQUIRE(dict->has_value());
  const auto& entries = std::get<FoundValue::Dictionary>((*dict)->value);
  REQUIRE(entries.size() == keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    REQUIRE(entries.count(keys[i]) == 1);
    CHECK(entries.at(keys[i]).value == values[i]);
  }

  // Two nodes die: gets still succeed, and the client bans the dead nodes.
  const std::vector<int> dead = {4, 8};
  for (int i : dead) {
    nodes[i].proc->kill(SIGKILL);
    nodes[i].proc->wait(10s);
  }
  for (int round = 0; round < 2; ++round) {
    auto again = ready(dht.get(DhtKey::str("greeting"), true));
    REQUIRE(again.ok());
    REQUIRE(again->has_value());
    CHECK(std::get<std::string>((*again)->value) == core::dht::pack_str("abyrvalg"));
  }
  for (int i : dead) {
    auto failures = dht.blacklist_failures(nodes[i].addr);
    REQUIRE(failures.ok());
    INFO(nodes[i].addr);
    CHECK(*failures >= 1);
  }
  auto stats = dht.stats();
  REQUIRE(stats.ok());
  CHECK(stats->node.bans >= dead.size());

  // A node whose only initial peer is dead refuses to start, naming it.
  const std::string gone = nodes[dead[0]].addr;
  auto lonely = run_apiary("dht --listen /ip4/127.0.0.1/tcp/0 --initial-peers " + gone);
  INFO(lonely.out);
  CHECK(lonely.rc == 1);
  CHECK_THAT(lonely.out, Catch::Contains(gone.substr(0, gone.find("/p2p/"))));

  // The rest shut down cleanly.
  dht.stop();
  for (int i = 0; i < k_nodes; ++i) {
    if (i == dead[0] || i == dead[1]) continue;
    nodes[i].proc->kill(SIGTERM);
  }
  for (int i = 0; i < k_nodes; ++i) {
    if (i == dead[0] || i == dead[1]) continue;
    std::string rest;
    while (auto line = nodes[i].proc->read_line(10s)) rest += *line + "\n";
    CHECK(nodes[i].proc->wait(10s) == 0);
    CHECK_THAT(rest, Catch::Contains("stopping on SIGTERM"));
  }
}

TEST_CASE("apiary dht store/get report bad usage and unreachable peers", "[integration]") {
  auto usage = run_apiary("dht store --peer /ip4/127.0.0.1/tcp/1 only-a-key");
  CHECK(usage.rc == 2);
  auto bad_addr = run_apiary("dht get --peer not-an-address key");
  CHECK(bad_addr.rc == 2);
  CHECK_THAT(bad_addr.out, Catch::Contains("must start with '/'"));
  auto no_identity = run_apiary("dht --identity /nonexistent/dir/key");
  CHECK(no_identity.rc == 1);
  CHECK_THAT(no_identity.out, Catch::Contains("no such file") && Catch::Contains("apiary identity create"));
  auto bad_listen = run_apiary("dht --listen /ip4/127.0.0.1/udp/5");
  CHECK(bad_listen.rc == 2);
  CHECK_THAT(bad_listen.out, Catch::Contains("udp"));
  auto unreachable = run_apiary("dht get --peer /ip4/127.0.0.1/tcp/1 key");
  INFO(unreachable.out);
  CHECK(unreachable.rc == 1);
  CHECK_THAT(unreachable.out, Catch::Contains("/ip4/127.0.0.1/tcp/1"));
}

TEST_CASE("with --authority, members store and get while clients without a token are refused", "[integration]") {
  char dir_template[] = "/tmp/apiary-auth-XXXXXX";
  REQUIRE(mkdtemp(dir_template) != nullptr);
  const std::string authority = std::string(dir_template) + "/authority.key";
  const std::string other = std::string(dir_template) + "/other.key";
  REQUIRE(run_apiary("identity create " + authority).rc == 0);
  REQUIRE(run_apiary("identity create " + other).rc == 0);
  std::vector<DhtProcess> nodes;
  nodes.push_back(spawn_node("--listen /ip4/127.0.0.1/tcp/0 --authority " + authority));
  await_listening(nodes[0]);
  for (int i = 1; i < 3; ++i) nodes.push_back(spawn_node("--listen /ip4/127.0.0.1/tcp/0 --authority " + authority +
                                                         " --initial-peers " + nodes[0].addr));
  for (int i = 1; i < 3; ++i) await_listening(nodes[i]);
  auto stored = run_apiary("dht store --authority " + authority + " --peer " + nodes[1].addr + " secret value");
  INFO(stored.out);
  CHECK(stored.rc == 0);
  auto got = run_apiary("dht get --authority " + authority + " --peer " + nodes[2].addr + " secret");
  INFO(got.out);
  CHECK(got.rc == 0);
  CHECK(got.out.find("secret = \"value\"") != std::string::npos);
  auto anonymous = run_apiary("dht get --peer " + nodes[2].addr + " secret");
  INFO(anonymous.out);
  CHECK(anonymous.rc == 1);
  CHECK(anonymous.out.find("none of the 1 initial peers") != std::string::npos);
  auto stranger = run_apiary("dht get --authority " + other + " --peer " + nodes[2].addr + " secret");
  CHECK(stranger.rc == 1);
  for (auto& n : nodes) {
    n.proc->kill(SIGTERM);
    CHECK(n.proc->wait(30s) == 0);
  }
}

TEST_CASE("a dialled PeerID that the node at that address does not prove is refused, naming both", "[integration]") {
  auto node = spawn_node("--listen /ip4/127.0.0.1/tcp/0");
  await_listening(node);
  const auto at = node.addr.find("/p2p/");
  const std::string real = node.addr.substr(at + 5);
  auto key = messages::Ed25519PrivateKey::generate();
  REQUIRE(key.ok());
  const std::string stale = messages::PeerId::from_public_key(key->public_key()).to_string();
  auto refused = run_apiary("dht get --peer " + node.addr.substr(0, at) + "/p2p/" + stale + " key");
  INFO(refused.out);
  CHECK(refused.rc == 1);
  CHECK_THAT(refused.out, Catch::Contains("dialled as PeerID " + stale) && Catch::Contains("proved PeerID " + real) &&
                              Catch::Contains("stale"));
  auto right = run_apiary("dht get --peer " + node.addr + " key");
  INFO(right.out);
  CHECK(right.rc == 1);  // reached, and the key has no value
  CHECK_THAT(right.out, Catch::Contains("key: not found"));
}

TEST_CASE("apiary dht --relay-service grants the limits its flags set and refuses bad ones", "[integration]") {
  auto relay = spawn_node(
      "--listen /ip4/127.0.0.1/tcp/0 --relay-service --relay-slots 1 --relay-slot-s 30 --relay-circuit-s 20 "
      "--relay-circuit-bytes 1mb");
  await_listening(relay);
  auto relay_addr = messages::Multiaddr::parse(relay.addr);
  REQUIRE(relay_addr.ok());

  /// A transport of its own identity that reserves a slot at the relay.
  struct Reserver {
    testing::FrameRecorder rec;
    std::unique_ptr<transport::ucx::Transport> t;
    Reserver() {
      auto key = messages::Ed25519PrivateKey::generate();
      REQUIRE(key.ok());
      transport::Config c;
      c.identity = *key;
      t = std::make_unique<transport::ucx::Transport>(std::move(c));
      REQUIRE(t->start(&rec, "127.0.0.1", 0).ok());
    }
    ~Reserver() { t->stop(); }
    Result<transport::RelayGrant> reserve(const PeerKey& at) {
      std::promise<Result<transport::RelayGrant>> answer;
      t->post([&] { t->reserve(at, {}, [&](Result<transport::RelayGrant> g) { answer.set_value(std::move(g)); }); });
      auto f = answer.get_future();
      if (f.wait_for(30s) != std::future_status::ready) return make_error(errc::deadline_exceeded, "no answer");
      return f.get();
    }
  };
  Reserver first;
  auto grant = first.reserve(relay_addr->host_port());
  REQUIRE(grant.ok());
  CHECK(grant->reservation == 30s);
  CHECK(grant->circuit == 20s);
  CHECK(grant->circuit_bytes == std::uint64_t{1} << 20);
  Reserver second;
  auto full = second.reserve(relay_addr->host_port());
  REQUIRE_FALSE(full.ok());
  CHECK_THAT(full.error().message, Catch::Contains("limit of 1 reservations"));
  CHECK(first.reserve(relay_addr->host_port()).ok());  // a renewal still fits

  SECTION("bad limits") {
    auto zero = run_apiary("dht --relay-service --relay-slots 0");
    CHECK(zero.rc == 2);
    CHECK_THAT(zero.out, Catch::Contains("--relay-slots"));
    auto alone = run_apiary("dht --relay-circuit-s 5");
    CHECK(alone.rc == 2);
    CHECK_THAT(alone.out, Catch::Contains("--relay-service"));
    auto unit = run_apiary("dht --relay-service --relay-circuit-bytes 3parsecs");
    CHECK(unit.rc == 2);
    CHECK_THAT(unit.out, Catch::Contains("--relay-circuit-bytes"));
  }
  relay.proc->kill(SIGTERM);
  CHECK(relay.proc->wait(30s) == 0);
}
