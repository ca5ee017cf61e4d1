// Bad input between real processes over UCX on loopback: garbage envelopes and
// messages to unused active-message ids from a raw UCX client, malformed request
// bodies, oversized frames and envelopes, listen addresses in use or invalid, and
// unreachable peers, and bad relay frames (refusals, unknown circuits, a byte limit, and
// thousands of random ones) to an `apiary dht --relay-service`. Every case ends with a
// clear error, and the server keeps serving.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <iterator>
#include <random>

#include "actors/rpc.hpp"
#include "messages/identity/multiaddr.hpp"
#include "messages/identity/peer_id.hpp"
#include "test.pb.h"
#include "tests/integration/raw_ucx_client.hpp"
#include "tests/support/apiary_command.hpp"
#include "tests/support/server_fixture.hpp"
#include "tests/support/test_messages.hpp"
#include "tests/support/test_services.hpp"

using namespace apiary;
using namespace std::chrono_literals;

namespace {

/// A client gateway config in --insecure mode (the raw client below speaks plaintext).
actors::GatewayConfig plaintext() {
  actors::GatewayConfig gc;
  gc.transport.insecure = true;
  return gc;
}

/// A test server process plus a client gateway in this process.
struct Fixture : testing::ServerFixture {
  explicit Fixture(const std::vector<std::string>& server_args = {}, actors::GatewayConfig client = {})
      : ServerFixture(server_args, std::move(client)) {}

  /// rpc_square(n) answers n*n: the server is alive and serving this gateway.
  void check_serving(int n) {
    caf::scoped_actor self{*sys};
    auto out = actors::call_unary(self, *gw, peer, "test.rpc_square", testing::test_request(n), 20s);
    REQUIRE(out.ok());
    CHECK(testing::response_number(*out) == n * n);
    CHECK(server->wait(10ms) == -1);  // still running
  }
};

/// A port on 127.0.0.1 that nothing listens on (bound, then released).
std::uint16_t unused_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sin;
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin) == 0);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&sin), &len) == 0);
  close(fd);
  return ntohs(sin.sin_port);
}

Buffer bytes(std::size_t n, std::uint64_t seed) {
  Buffer b = Buffer::allocate(n);
  testing::fill_pattern(b.data(), n, seed);
  return b;
}

/// Waits for the server's HELLO: once heard, the server has adopted the connection.
void connect(testing::RawUcxClient& raw) {
  if (!raw.ok()) FAIL(raw.error());
  if (!raw.next_frame(pb::HELLO, 20s)) FAIL("no HELLO from the server: " << raw.error());
}

}  // namespace

TEST_CASE("garbage envelopes are answered with ERROR frames on the same connection", "[integration]") {
  Fixture f({}, plaintext());
  testing::RawUcxClient raw(f.peer);
  connect(raw);
  struct Case {
    const char* what;
    std::string header;
    std::string payload;
    std::uint64_t call_id;  ///< the ERROR names the call when the envelope named one
    std::string says;
  };
  pb::Envelope no_kind;  // well-formed protobuf, but no frame
  no_kind.set_call_id(77);
  no_kind.set_handle("test.rpc_square");
  pb::Envelope odd_kind = no_kind;
  odd_kind.set_kind(static_cast<pb::FrameKind>(99));
  pb::Envelope long_one;  // longer than apiary's 4096-byte limit, under UCX's max_am_header
  long_one.set_kind(pb::OPEN);
  long_one.set_call_id(5);
  long_one.set_from_caller(true);
  long_one.set_handle(std::string(5000, 'h'));
  pb::Envelope lying;  // announces more payload than it carries
  lying.set_kind(pb::OPEN);
  lying.set_call_id(9);
  lying.set_from_caller(true);
  lying.set_handle("test.rpc_square");
  lying.set_has_message(true);
  lying.set_end_of_stream(true);
  lying.set_payload_size(1000);
  const std::vector<Case> cases{
      {"40 bytes of 0xff", std::string(40, '\xff'), "payload", 0, "malformed envelope of 40 bytes"},
      {"an envelope without a kind", no_kind.SerializeAsString(), {}, 0, "malformed envelope"},
      {"an envelope of unknown kind", odd_kind.SerializeAsString(), {}, 0, "unknown frame kind 99"},
      {"an envelope over the size limit", long_one.SerializeAsString(), {}, 0, "4096 byte limit"},
      {"a payload shorter than announced", lying.SerializeAsString(), "\x08\x03", 9, "match the 1000 bytes"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    if (!raw.send(0, c.header, c.payload, 20s)) FAIL(raw.error());
    auto err = raw.next_frame(pb::ERROR, 20s);
    if (!err) FAIL("no ERROR frame: " << raw.error());
    CHECK(err->call_id() == c.call_id);
    CHECK(err->error_code() == static_cast<std::uint32_t>(errc::malformed));
    CHECK_THAT(err->error_message(), Catch::Contains(c.says));
  }
  CHECK(raw.error() == "");
  f.check_serving(12);
}

TEST_CASE("messages to unused active-message ids are dropped without harm", "[integration]") {
  Fixture f({}, plaintext());
  testing::RawUcxClient raw(f.peer);
  connect(raw);
  // Including the ids that crash an unprotected UCX 1.13 receiver (stack.md,
  // active-message hazards 1 and 2).
  for (unsigned id : {1u, 13u, 14u, 15u, 16383u, 32767u, 65535u}) {
    if (!raw.send(id, "hdr", "data", 20s)) FAIL("active-message id " << id << ": " << raw.error());
  }
  // Big enough for rendezvous: the server must release its data, or this send would
  // never complete (hazard 6).
  if (!raw.send(7, "hdr", std::string(std::size_t{1} << 20, 'x'), 20s)) FAIL("rendezvous to id 7: " << raw.error());
  // A garbage envelope answered after them: the server got past them on this connection.
  if (!raw.send(0, std::string(8, '\xff'), {}, 20s)) FAIL(raw.error());
  auto err = raw.next_frame(pb::ERROR, 20s);
  if (!err) FAIL("no ERROR frame after the stray messages: " << raw.error());
  CHECK(err->error_code() == static_cast<std::uint32_t>(errc::malformed));
  CHECK(raw.stray_received() == 0);
  CHECK(raw.error() == "");
  f.check_serving(8);
}

TEST_CASE("a malformed request body is answered with an error naming the handle and type", "[integration]") {
  Fixture f;
  caf::scoped_actor self{*f.sys};
  auto r = actors::call_unary(self, *f.gw, f.peer, "test.rpc_square", Buffer::copy_of("\xff\xff\xff\xff\xff"), 20s);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == errc::malformed);
  CHECK_THAT(r.error().message, Catch::Contains("test.rpc_square") && Catch::Contains("apiary.pb.TestRequest"));
  f.check_serving(5);
}

TEST_CASE("an oversized frame is refused with both sizes, and the connection survives", "[integration]") {
  Fixture f({"--max-frame", "1048576"});
  caf::scoped_actor self{*f.sys};
  auto big = actors::call_unary(self, *f.gw, f.peer, "test.rpc_hash", bytes(2 << 20, 1), 20s);
  REQUIRE_FALSE(big.ok());
  CHECK(big.error().code == errc::too_large);
  CHECK_THAT(big.error().message, Catch::Contains("2097152") && Catch::Contains("1048576"));

  // At the limit and well under it, on the same connection.
  for (std::size_t size : {std::size_t{1} << 20, std::size_t{1024}}) {
    INFO("payload " << size << " B");
    Buffer payload = bytes(size, size);
    const std::uint64_t want = testing::fnv1a(payload.data(), payload.size());
    auto ok = actors::call_unary(self, *f.gw, f.peer, "test.rpc_hash", payload, 20s);
    REQUIRE(ok.ok());
    REQUIRE(ok->size() == 16);
    std::uint64_t got = 0, n = 0;
    std::memcpy(&got, ok->data(), 8);
    std::memcpy(&n, ok->data() + 8, 8);
    CHECK(got == want);
    CHECK(n == size);
  }
  CHECK(f.gw->transport_stats().peers_down == 0);
  f.check_serving(3);
}

TEST_CASE("an oversized envelope is refused locally and nothing is sent", "[integration]") {
  Fixture f;
  caf::scoped_actor self{*f.sys};
  auto r = actors::call_unary(self, *f.gw, f.peer, std::string(600, 'h'), Buffer::copy_of("x"), 20s);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == errc::invalid_argument);
  CHECK_THAT(r.error().message, Catch::Contains("600") && Catch::Contains("512"));
  CHECK(f.gw->transport_stats().frames_sent == 0);  // not even a connection was made
  // The longest handle allowed travels, and the server answers that it does not know it.
  auto longest = actors::call_unary(self, *f.gw, f.peer, std::string(512, 'h'), Buffer::copy_of("x"), 20s);
  REQUIRE_FALSE(longest.ok());
  CHECK(longest.error().code == errc::not_found);
  f.check_serving(4);
}

TEST_CASE("listening on a port in use or on a bad host fails clearly", "[integration]") {
  Fixture f;
  const auto port = static_cast<std::uint16_t>(std::stoi(f.peer.substr(f.peer.rfind(':') + 1)));
  actors::GatewayConfig taken;
  taken.port = port;
  auto second = actors::Gateway::start(*f.sys, taken);
  REQUIRE_FALSE(second.ok());
  CHECK(second.error().code == errc::unavailable);
  CHECK_THAT(second.error().message, Catch::Contains(f.peer) && Catch::Contains("in use"));

  actors::GatewayConfig bad_host;
  bad_host.host = "300.1.2.3";
  auto third = actors::Gateway::start(*f.sys, bad_host);
  REQUIRE_FALSE(third.ok());
  CHECK(third.error().code == errc::invalid_argument);
  CHECK_THAT(third.error().message, Catch::Contains("300.1.2.3"));
  f.check_serving(6);
}

TEST_CASE("a call to an unreachable peer fails with peer_down, not at its deadline", "[integration]") {
  Fixture f;
  caf::scoped_actor self{*f.sys};
  const std::string nowhere = "127.0.0.1:" + std::to_string(unused_port());
  auto r = actors::call_unary(self, *f.gw, nowhere, "test.rpc_square", testing::test_request(2), 30s);
  REQUIRE_FALSE(r.ok());
  INFO(r.error().what());
  CHECK((r.error().code == errc::peer_down || r.error().code == errc::unavailable));
  CHECK_THAT(r.error().message, Catch::Contains(nowhere));
  // The gateway still reaches live peers.
  f.check_serving(9);
}

namespace {

/// A raw client on a relay's connection, named by a PeerID of its own (its HELLO; the
/// relay runs --insecure, so the HELLO's PeerID stands as the connection's).
struct RelayClient {
  testing::RawUcxClient raw;
  std::string peer_id;
  explicit RelayClient(const std::string& relay, bool hello = true) : raw(relay) {
    connect(raw);
    auto key = messages::Ed25519PrivateKey::generate();
    REQUIRE(key.ok());
    peer_id = messages::PeerId::from_public_key(key->public_key()).bytes();
    if (hello) {
      pb::Envelope h;
      h.set_kind(pb::HELLO);
      h.set_peer_id(peer_id);
      send(h);
    }
  }
  void send(pb::Envelope env, const std::string& payload = {}) {
    env.set_payload_size(payload.size());
    if (!raw.send(0, env.SerializeAsString(), payload, 20s)) FAIL(raw.error());
  }
  /// The next frame of `kind`; fails the test when none comes.
  pb::Envelope next(pb::FrameKind kind) {
    auto f = raw.next_frame(kind, 20s);
    if (!f) FAIL("no frame of kind " << pb::FrameKind_Name(kind) << ": " << raw.error());
    return *f;
  }
};

pb::Envelope relay_envelope(pb::FrameKind kind, std::uint64_t circuit, bool from_opener, const std::string& peer = {}) {
  pb::Envelope e;
  e.set_kind(kind);
  e.mutable_relay()->set_circuit(circuit);
  e.mutable_relay()->set_from_opener(from_opener);
  if (!peer.empty()) e.set_peer_id(peer);
  return e;
}

}  // namespace

TEST_CASE("bad relay frames are refused saying why, and the relay goes on relaying", "[integration]") {
  auto relay = testing::spawn_apiary(
      "dht --listen /ip4/127.0.0.1/tcp/0 --insecure --relay-service --relay-circuit-bytes 64kb "
      "--relay-circuits-per-peer 1000 2>&1");
  const std::string relay_addr = testing::await_listening(*relay);
  auto parsed = messages::Multiaddr::parse(relay_addr);
  REQUIRE(parsed.ok());
  const std::string at = parsed->host_port();

  RelayClient a(at);  // reserves; the others reach it through the relay
  auto forged = relay_envelope(pb::RELAY_RESERVE, 0, false, std::string("\x00\x24\x08\x01", 4) + "not a key");
  a.send(forged);
  auto refused = a.next(pb::RELAY_RESERVED);
  CHECK(refused.error_code() == static_cast<std::uint32_t>(errc::crypto));
  CHECK_THAT(refused.error_message(), Catch::Contains("has not proven"));
  a.send(relay_envelope(pb::RELAY_RESERVE, 0, false));
  auto granted = a.next(pb::RELAY_RESERVED);
  CHECK(granted.error_code() == 0);
  CHECK(granted.relay().circuit_bytes() == 65536);

  RelayClient nameless(at, false);
  nameless.send(relay_envelope(pb::RELAY_RESERVE, 0, false));
  CHECK_THAT(nameless.next(pb::RELAY_RESERVED).error_message(), Catch::Contains("needs the peer's PeerID"));

  RelayClient b(at);
  RelayClient stranger(at);  // holds no reservation
  b.send(relay_envelope(pb::CIRCUIT_OPEN, 7, true, stranger.peer_id));
  auto no_slot = b.next(pb::CIRCUIT_CLOSE);
  CHECK(no_slot.relay().circuit() == 7);
  CHECK_THAT(no_slot.error_message(), Catch::Contains("holds no reservation for PeerID"));
  b.send(relay_envelope(pb::CIRCUIT_DATA, 99, true), "data for no circuit");
  auto unknown = b.next(pb::CIRCUIT_CLOSE);
  CHECK(unknown.relay().circuit() == 99);
  CHECK_THAT(unknown.error_message(), Catch::Contains("knows no circuit 99"));
  b.send(relay_envelope(pb::CIRCUIT_CLOSE, 12345, false));  // nothing to close: no answer
  b.send(relay_envelope(pb::RELAY_RESERVED, 0, false));     // never asked for: ignored

  // A relayed connection carries what it is given, unopened, up to its byte limit.
  b.send(relay_envelope(pb::CIRCUIT_OPEN, 1, true, a.peer_id));
  auto opened = a.next(pb::CIRCUIT_OPEN);
  CHECK(opened.peer_id() == b.peer_id);
  auto data = relay_envelope(pb::CIRCUIT_DATA, 1, true);
  data.mutable_relay()->set_header(std::string(300, '\xee'));  // not an envelope: the relay does not look
  b.send(data, std::string(40000, 'x'));
  auto passed = a.next(pb::CIRCUIT_DATA);
  CHECK(passed.relay().circuit() == opened.relay().circuit());
  CHECK(passed.relay().from_opener());  // the relay opened the circuit on a's connection
  CHECK(passed.relay().header() == std::string(300, '\xee'));
  CHECK(passed.payload_size() == 40000);
  b.send(data, std::string(40000, 'y'));
  CHECK_THAT(b.next(pb::CIRCUIT_CLOSE).error_message(), Catch::Contains("limit of 65536 bytes"));
  CHECK_THAT(a.next(pb::CIRCUIT_CLOSE).error_message(), Catch::Contains("limit of 65536 bytes"));

  // Thousands of relay frames with fields drawn at random (seeded), from a client of its
  // own: kinds, circuit ids, directions, PeerIDs (a's, none, garbage), headers, payloads,
  // error fields and grants.
  {
    RelayClient noise(at);
    std::mt19937_64 rng(20261206);
    const pb::FrameKind kinds[] = {pb::RELAY_RESERVE, pb::RELAY_RESERVED, pb::CIRCUIT_OPEN, pb::CIRCUIT_DATA,
                                   pb::CIRCUIT_CLOSE, pb::HELLO};
    const auto bytes_of = [&rng](std::size_t most) {
      std::string s(rng() % (most + 1), '\0');
      for (auto& c : s) c = static_cast<char>(rng());
      return s;
    };
    for (int i = 0; i < 3000; ++i) {
      pb::Envelope e;
      e.set_kind(kinds[rng() % std::size(kinds)]);
      if (e.kind() == pb::HELLO) continue;  // keeps the client's name: a's frames stay a's
      const std::uint64_t circuits[] = {0, 1, 2, 3, rng()};
      e.mutable_relay()->set_circuit(circuits[rng() % 5]);
      e.mutable_relay()->set_from_opener(rng() % 2 == 0);
      switch (rng() % 4) {
        case 0: e.set_peer_id(a.peer_id); break;
        case 1: e.set_peer_id(bytes_of(300)); break;
        case 2: e.set_peer_id(noise.peer_id); break;
        default: break;
      }
      if (rng() % 2 == 0) e.mutable_relay()->set_header(bytes_of(3000));
      if (rng() % 4 == 0) {
        e.set_error_code(static_cast<std::uint32_t>(rng()));
        e.set_error_message(std::string(rng() % 2000, 'm'));  // a string field: UTF-8 only
      }
      if (e.kind() == pb::RELAY_RESERVED) {
        e.mutable_relay()->set_reservation_ms(rng());
        e.mutable_relay()->set_circuit_bytes(rng());
      }
      noise.send(e, rng() % 3 == 0 ? bytes_of(16384) : std::string());
    }
    CHECK(noise.raw.linger(1s));  // its connection stands: every frame was answered or passed on
  }
  CHECK(a.raw.linger(1s));
  CHECK(b.raw.linger(1s));

  // The relay goes on: a's slot still takes new relayed connections, and it answers pings.
  b.send(relay_envelope(pb::CIRCUIT_OPEN, 2, true, a.peer_id));
  for (;;) {
    auto open = a.next(pb::CIRCUIT_OPEN);
    if (open.peer_id() == b.peer_id) break;  // after the ones the random frames opened
  }
  auto get = testing::run_apiary("dht get --insecure --peer " + relay_addr + " key");
  INFO(get.out);
  CHECK(get.rc == 1);  // reached, and the key has no value
  CHECK_THAT(get.out, Catch::Contains("key: not found"));
  relay->kill(SIGTERM);
  std::string rest;
  while (auto line = relay->read_line(10s)) rest += *line + "\n";
  INFO(rest);
  CHECK(relay->wait(30s) == 0);
}
