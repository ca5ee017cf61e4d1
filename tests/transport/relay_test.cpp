// Relayed connections over real UCX on loopback (transport/README.md "Relays"): a peer
// reserves a slot at a relay, another dials it through the relay, and the two talk end
// to end encrypted (the relay passes on sealed frames it cannot open). Limits, refusals,
// a relay's wrong PeerID and a relay's loss each end the relayed connection saying why.
#include <catch2/catch.hpp>

#include <future>

#include "messages/identity/multiaddr.hpp"
#include "tests/support/frame_recorder.hpp"
#include "transport/ucx/transport.hpp"

using namespace apiary;
using namespace std::chrono_literals;

namespace {

using Recorder = testing::FrameRecorder;

messages::Ed25519PrivateKey new_key() {
  auto k = messages::Ed25519PrivateKey::generate();
  REQUIRE(k.ok());
  return *k;
}

/// A transport on 127.0.0.1 with its recorder and identity.
struct Node {
  Recorder rec;
  messages::Ed25519PrivateKey key = new_key();
  std::unique_ptr<transport::ucx::Transport> t;
  std::string address;
  explicit Node(std::optional<transport::RelayLimits> relay = std::nullopt, bool insecure = false) {
    transport::Config c;
    c.insecure = insecure;
    c.relay_service = relay;
    if (!insecure) {
      c.identity = key;
    } else {
      c.peer_id = id().bytes();
    }
    t = std::make_unique<transport::ucx::Transport>(std::move(c));
    auto bound = t->start(&rec, "127.0.0.1", 0);
    REQUIRE(bound.ok());
    address = *bound;
  }
  ~Node() { t->stop(); }
  [[nodiscard]] messages::PeerId id() const { return messages::PeerId::from_public_key(key.public_key()); }
  /// Runs `fn` on the transport's thread and waits for it.
  void on_thread(std::function<void()> fn) {
    std::promise<void> done;
    t->post([&] {
      fn();
      done.set_value();
    });
    done.get_future().wait();
  }
  /// Reserves at `relay`, waiting for the answer.
  Result<transport::RelayGrant> reserve(const Node& relay, const std::string& peer_id = {}) {
    std::promise<Result<transport::RelayGrant>> answer;
    t->post([&] {
      t->reserve(relay.address, peer_id, [&](Result<transport::RelayGrant> g) { answer.set_value(std::move(g)); });
    });
    auto f = answer.get_future();
    if (f.wait_for(20s) != std::future_status::ready) return make_error(errc::deadline_exceeded, "no answer");
    return f.get();
  }
  void send(const PeerKey& to, transport::Frame f) {
    t->post([this, to, f = std::move(f)]() mutable { t->send(to, std::move(f)); });
  }
};

/// The key that dials `target` through `relay`.
PeerKey relayed_key(const Node& relay, const messages::PeerId& target) {
  auto relay_addr = messages::Multiaddr::from_host_port(relay.address, "relay", relay.id());
  REQUIRE(relay_addr.ok());
  messages::Multiaddr m = *relay_addr;
  m.relay = m.peer;
  m.peer = target;
  return m.host_port();
}

transport::Frame call(std::uint64_t id, std::string payload, const messages::PeerId& callee) {
  transport::Frame f;
  f.envelope.set_kind(pb::OPEN);
  f.envelope.set_call_id(id);
  f.envelope.set_from_caller(true);
  f.envelope.set_handle("test.echo");
  f.envelope.set_has_message(true);
  f.payload = Buffer::copy_of(payload);
  f.expect_peer = callee.bytes();
  return f;
}

transport::Frame answer(std::uint64_t id, std::string payload) {
  transport::Frame f;
  f.envelope.set_kind(pb::MESSAGE);
  f.envelope.set_call_id(id);
  f.envelope.set_has_message(true);
  f.payload = Buffer::copy_of(payload);
  return f;
}

std::string text_of(const Buffer& b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

}  // namespace

TEST_CASE("a peer reached through a relay answers end to end encrypted and large frames pass whole",
          "[integration][relay]") {
  Node relay(transport::RelayLimits{});
  Node b, a;
  auto grant = b.reserve(relay);
  REQUIRE(grant.ok());
  CHECK(grant->reservation == transport::RelayLimits{}.reservation);
  CHECK(grant->circuit_bytes == transport::RelayLimits{}.circuit_bytes);

  const PeerKey key = relayed_key(relay, b.id());
  a.send(key, call(1, "hello through the relay", b.id()));
  auto got = b.rec.frame(0);
  REQUIRE(got);
  CHECK(got->first.rfind("inbound:", 0) == 0);
  CHECK(got->second.envelope.kind() == pb::OPEN);
  CHECK(text_of(got->second.payload) == "hello through the relay");
  CHECK(got->second.envelope.peer_id() == a.id().bytes());  // proven by the end-to-end handshake
  const PeerKey back = got->first;

  // An answer, then a payload large enough for rendezvous on both hops, each way.
  std::string big(3 << 20, 'x');
  for (std::size_t i = 0; i < big.size(); i += 4093) big[i] = static_cast<char>('a' + i % 26);
  b.send(back, answer(1, "answered"));
  auto reply = a.rec.frame(0);
  REQUIRE(reply);
  CHECK(reply->first == key);
  CHECK(text_of(reply->second.payload) == "answered");
  a.send(key, call(2, big, b.id()));
  b.send(back, answer(1, big));
  auto big_at_b = b.rec.frame(1, 60s);
  auto big_at_a = a.rec.frame(1, 60s);
  REQUIRE(big_at_b);
  REQUIRE(big_at_a);
  CHECK(text_of(big_at_b->second.payload) == big);
  CHECK(text_of(big_at_a->second.payload) == big);

  std::string how;
  a.on_thread([&] { how = a.t->describe(key); });
  CHECK_THAT(how, Catch::Contains("relayed through " + relay.address));
  CHECK_THAT(how, Catch::Contains("encrypted"));
  CHECK(relay.t->stats().frames_relayed >= 4);
  CHECK(a.t->stats().circuits == 1);
  CHECK(b.t->stats().circuits == 1);
  CHECK(relay.rec.frame_count() == 0);  // the relay's own handler sees nothing of it
}

TEST_CASE("relayed connections work between --insecure nodes too", "[integration][relay]") {
  Node relay(transport::RelayLimits{}, true);
  Node b(std::nullopt, true), a(std::nullopt, true);
  REQUIRE(b.reserve(relay).ok());
  const PeerKey key = relayed_key(relay, b.id());
  transport::Frame f = call(7, "plain", b.id());
  f.expect_peer.clear();
  a.send(key, std::move(f));
  auto got = b.rec.frame(0);
  REQUIRE(got);
  CHECK(text_of(got->second.payload) == "plain");
  b.send(got->first, answer(7, "plain back"));
  auto reply = a.rec.frame(0);
  REQUIRE(reply);
  CHECK(text_of(reply->second.payload) == "plain back");
}

TEST_CASE("dialling a peer without a reservation at the relay fails saying so", "[integration][relay]") {
  Node relay(transport::RelayLimits{});
  Node a;
  const auto nobody = Node().id();
  const PeerKey key = relayed_key(relay, nobody);
  a.send(key, call(1, "anyone?", nobody));
  auto why = a.rec.down(key);
  REQUIRE(why);
  CHECK(why->code == errc::not_found);
  CHECK_THAT(why->message, Catch::Contains("holds no reservation for PeerID " + nobody.to_string()));
}

TEST_CASE("a node that is not a relay refuses reservations and relayed connections", "[integration][relay]") {
  Node plain, b, a;
  auto grant = b.reserve(plain);
  REQUIRE_FALSE(grant.ok());
  CHECK(grant.error().code == errc::unsupported);
  CHECK_THAT(grant.error().message, Catch::Contains("is not a relay"));
  const PeerKey key = relayed_key(plain, b.id());
  a.send(key, call(1, "x", b.id()));
  auto why = a.rec.down(key);
  REQUIRE(why);
  CHECK_THAT(why->message, Catch::Contains("is not a relay"));
}

TEST_CASE("a relay that proves another PeerID than the address names is not used", "[integration][relay]") {
  Node relay(transport::RelayLimits{});
  Node b, a;
  REQUIRE(b.reserve(relay).ok());
  const auto impostor = Node().id();
  auto addr = messages::Multiaddr::from_host_port(relay.address, "relay", impostor);
  REQUIRE(addr.ok());
  messages::Multiaddr m = *addr;
  m.relay = m.peer;
  m.peer = b.id();
  const PeerKey key = m.host_port();
  a.send(key, call(1, "x", b.id()));
  auto why = a.rec.down(key);
  REQUIRE(why);
  CHECK(why->code == errc::crypto);
  CHECK_THAT(why->message, Catch::Contains("as PeerID " + impostor.to_string()));
  CHECK_THAT(why->message, Catch::Contains("proved PeerID " + relay.id().to_string()));
  CHECK(b.rec.frame_count() == 0);
}

TEST_CASE("a relayed connection past the relay's byte limit is closed at both ends saying why",
          "[integration][relay]") {
  transport::RelayLimits limits;
  limits.circuit_bytes = 256 * 1024;
  Node relay(limits);
  Node b, a;
  REQUIRE(b.reserve(relay).ok());
  const PeerKey key = relayed_key(relay, b.id());
  a.send(key, call(1, "small", b.id()));
  auto got = b.rec.frame(0);
  REQUIRE(got);
  a.send(key, call(2, std::string(512 * 1024, 'z'), b.id()));
  auto at_a = a.rec.down(key);
  auto at_b = b.rec.down(got->first);
  REQUIRE(at_a);
  REQUIRE(at_b);
  CHECK(at_a->code == errc::too_large);
  CHECK_THAT(at_a->message, Catch::Contains("limit of 262144 bytes"));
  CHECK_THAT(at_b->message, Catch::Contains("limit of 262144 bytes"));
  CHECK(b.rec.frame_count() == 1);  // the large frame never arrived
  // The relay, and B's reservation, go on: A dials B again.
  a.send(key, call(3, "again", b.id()));
  auto again = b.rec.frame(1);
  REQUIRE(again);
  CHECK(text_of(again->second.payload) == "again");
}

TEST_CASE("a relay that stops fails the relayed connections at both ends", "[integration][relay]") {
  auto relay = std::make_unique<Node>(transport::RelayLimits{});
  Node b, a;
  REQUIRE(b.reserve(*relay).ok());
  const PeerKey key = relayed_key(*relay, b.id());
  a.send(key, call(1, "before", b.id()));
  auto got = b.rec.frame(0);
  REQUIRE(got);
  relay.reset();
  auto at_a = a.rec.down(key);
  auto at_b = b.rec.down(got->first);
  REQUIRE(at_a);
  REQUIRE(at_b);
  CHECK(at_a->code == errc::peer_down);
  CHECK_THAT(at_a->message, Catch::Contains("relay"));
  CHECK_THAT(at_b->message, Catch::Contains("relay"));
}

TEST_CASE("the relay itself dials a reserved peer through its own relayed address", "[integration][relay]") {
  Node relay(transport::RelayLimits{});
  Node b;
  REQUIRE(b.reserve(relay).ok());
  const PeerKey key = relayed_key(relay, b.id());
  relay.send(key, call(1, "from the relay", b.id()));
  auto got = b.rec.frame(0);
  REQUIRE(got);
  CHECK(text_of(got->second.payload) == "from the relay");
  CHECK(got->second.envelope.peer_id() == relay.id().bytes());
  b.send(got->first, answer(1, "to the relay"));
  auto reply = relay.rec.frame(0);
  REQUIRE(reply);
  CHECK(reply->first == key);
  CHECK(text_of(reply->second.payload) == "to the relay");
}

TEST_CASE("a reserved peer's new listen address reaches the peers it is connected to", "[integration][relay]") {
  Node relay(transport::RelayLimits{});
  Node b;
  REQUIRE(b.reserve(relay).ok());
  // The relay's listen form: a peer reaches each PeerID behind B at it, then /p2p/PEER.
  auto listen = messages::Multiaddr::from_host_port(relayed_key(relay, b.id()), "key");
  REQUIRE(listen.ok());
  listen->peer.reset();
  const PeerKey advertised = listen->host_port();
  b.on_thread([&] { b.t->advertise(advertised); });
  // B's next call to the relay names the relayed address as its caller's.
  b.send(relay.address, call(3, "who am I", relay.id()));
  auto got = relay.rec.frame(0);
  REQUIRE(got);
  CHECK(got->second.envelope.listen_addr() == advertised);
  auto caller = messages::Multiaddr::from_host_port(got->second.envelope.listen_addr(), "caller", b.id());
  REQUIRE(caller.ok());
  CHECK(caller->host_port() == relayed_key(relay, b.id()));
}

TEST_CASE("a node sharing a peer's transport reserves its own slot and is dialled through the relay by its PeerID",
          "[integration][relay]") {
  Node relay(transport::RelayLimits{});
  Node b, a;
  const auto second = new_key();
  const auto second_id = messages::PeerId::from_public_key(second.public_key());
  // Not proven yet: refused.
  auto early = b.reserve(relay, second_id.bytes());
  REQUIRE_FALSE(early.ok());
  CHECK(early.error().code == errc::crypto);
  CHECK_THAT(early.error().message, Catch::Contains("has not proven"));
  b.on_thread([&] { b.t->prove_identity(second); });
  REQUIRE(b.reserve(relay, second_id.bytes()).ok());
  const PeerKey key = relayed_key(relay, second_id);
  a.send(key, call(1, "to the second node", second_id));  // leaves only once the far end proved it
  auto got = b.rec.frame(0);
  REQUIRE(got);
  CHECK(text_of(got->second.payload) == "to the second node");
}
