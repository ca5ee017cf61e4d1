// Encrypted connections over real UCX on loopback: a UCX transport (secure by default)
// faced by a raw UCX client that runs the Noise XX handshake itself and then sends
// what apiary's transport never would: replayed, reordered, forged and truncated frames,
// plaintext after the handshake, garbage handshakes. Each closes that connection with a
// clear error, and other connections go on. Also: PeerIDs proven, and a secure node and
// an --insecure one refuse each other, saying why.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <cstring>
#include <mutex>

#include "messages/identity/key_proto.hpp"
#include "messages/identity/noise.hpp"
#include "noise.pb.h"
#include "messages/identity/peer_id.hpp"
#include "tests/integration/raw_ucx_client.hpp"
#include "tests/support/frame_recorder.hpp"
#include "tests/support/test_services.hpp"
#include "transport/ucx/transport.hpp"

using namespace apiary;
using namespace std::chrono_literals;
namespace noise = apiary::messages::noise;

namespace {

using Recorder = testing::FrameRecorder;

messages::Ed25519PrivateKey new_key() {
  auto k = messages::Ed25519PrivateKey::generate();
  REQUIRE(k.ok());
  return *k;
}

/// A server transport on 127.0.0.1 with its recorder.
struct Server {
  Recorder rec;
  transport::ucx::Transport t;
  std::string address;
  explicit Server(transport::Config c = {}) : t(std::move(c)) {
    auto bound = t.start(&rec, "127.0.0.1", 0);
    REQUIRE(bound.ok());
    address = *bound;
  }
  ~Server() { t.stop(); }
};

/// A raw client that speaks the handshake and seals frames as apiary's transport does.
struct SecureRaw {
  messages::Ed25519PrivateKey key = new_key();
  testing::RawUcxClient raw;
  std::optional<noise::Session> session;

  explicit SecureRaw(const std::string& server) : raw(server) {}

  static std::string handshake_envelope(std::size_t payload) {
    pb::Envelope env;
    env.set_kind(pb::HANDSHAKE);
    env.set_payload_size(payload);
    return env.SerializeAsString();
  }

  /// Runs the handshake and waits for the server's first sealed frame.
  void connect() {
    REQUIRE(raw.ok());
    auto hs = noise::Handshake::create(true, key, "");
    REQUIRE(hs.ok());
    auto m1 = hs->write_message();
    REQUIRE(m1.ok());
    REQUIRE(raw.send(0, handshake_envelope(m1->size()), *m1, 20s));
    auto m2 = raw.next_message(20s);
    REQUIRE(m2.has_value());
    pb::Envelope env;
    REQUIRE(env.ParseFromString(m2->first));
    REQUIRE(env.kind() == pb::HANDSHAKE);
    REQUIRE(hs->read_message(m2->second).ok());
    auto m3 = hs->write_message();
    REQUIRE(m3.ok());
    REQUIRE(raw.send(0, handshake_envelope(m3->size()), *m3, 20s));
    auto s = hs->finish();
    REQUIRE(s.ok());
    session = std::move(*s);
    auto first = raw.next_message(20s);
    REQUIRE(first.has_value());
    auto hello = open(first->first);
    REQUIRE(hello.has_value());
    CHECK(hello->kind() == pb::HELLO);
  }

  /// Seals `env` + `payload` as the transport does: the envelope under the next nonce,
  /// the payload under the one after, its tag in the envelope.
  std::pair<std::string, std::string> seal(pb::Envelope env, std::string payload) {
    env.set_payload_size(payload.size());
    auto first = session->send.reserve(payload.empty() ? 1 : 2);
    REQUIRE(first.ok());
    if (!payload.empty()) {
      std::byte tag[noise::k_tag_bytes];
      auto* p = reinterpret_cast<std::byte*>(payload.data());
      REQUIRE(session->send.seal_at(*first + 1, {}, p, payload.size(), p, tag).ok());
      env.set_payload_mac(tag, noise::k_tag_bytes);
    }
    std::string header = env.SerializeAsString();
    const std::size_t plain = header.size();
    header.resize(plain + noise::k_tag_bytes);
    auto* h = reinterpret_cast<std::byte*>(header.data());
    REQUIRE(session->send.seal_at(*first, {}, h, plain, h, h + plain).ok());
    return {header, payload};
  }

  std::optional<pb::Envelope> open(const std::string& header) {
    auto plain = session->recv.decrypt_with_ad({}, header);
    if (!plain) return std::nullopt;
    pb::Envelope env;
    if (!env.ParseFromString(*plain)) return std::nullopt;
    return env;
  }

  bool send(const std::pair<std::string, std::string>& frame) { return raw.send(0, frame.first, frame.second, 20s); }
};

pb::Envelope open_call(std::uint64_t id) {
  pb::Envelope env;
  env.set_kind(pb::OPEN);
  env.set_call_id(id);
  env.set_from_caller(true);
  env.set_handle("test.echo");
  env.set_has_message(true);
  env.set_end_of_stream(true);
  return env;
}

std::string text_of(const Buffer& b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

}  // namespace

TEST_CASE("an encrypted connection carries sealed frames, the caller's PeerID proven", "[integration][secure]") {
  Server s;
  SecureRaw c(s.address);
  c.connect();
  REQUIRE(c.send(c.seal(open_call(1), "hello")));
  const std::string big(1 << 20, 'b');  // by rendezvous, opened where it lands
  REQUIRE(c.send(c.seal(open_call(2), big)));
  REQUIRE(c.send(c.seal(open_call(3), "")));
  REQUIRE(s.rec.wait_frames(3));
  std::lock_guard<std::mutex> lock(s.rec.mu);
  REQUIRE(s.rec.frames.size() == 3);
  CHECK(s.rec.frames[0].second.envelope.handle() == "test.echo");
  CHECK(text_of(s.rec.frames[0].second.payload) == "hello");
  CHECK(text_of(s.rec.frames[1].second.payload) == big);
  CHECK(s.rec.frames[2].second.payload.empty());
  // The OPEN carries the PeerID the handshake proved, never one the caller claimed.
  CHECK(s.rec.frames[0].second.envelope.peer_id() == messages::PeerId::from_public_key(c.key.public_key()).bytes());
  CHECK(s.rec.frames[0].second.envelope.payload_mac().empty());
  CHECK(s.rec.downs.empty());
  CHECK(s.t.stats().handshakes == 1);
}

TEST_CASE("a replayed, reordered, forged or truncated frame closes its connection, and others go on",
          "[integration][secure]") {
  Server s;
  SecureRaw bystander(s.address);
  bystander.connect();
  SecureRaw c(s.address);
  c.connect();
  std::string expect;
  SECTION("replayed") {
    auto frame = c.seal(open_call(1), "once");
    REQUIRE(c.send(frame));
    REQUIRE(s.rec.wait_frames(1));
    REQUIRE(c.send(frame));
    expect = "failed authentication";
  }
  SECTION("reordered") {
    auto first = c.seal(open_call(1), "first");
    auto second = c.seal(open_call(2), "second");
    REQUIRE(c.send(second));
    expect = "failed authentication";
  }
  SECTION("forged envelope") {
    auto frame = c.seal(open_call(1), "x");
    frame.first[3] ^= 0x20;
    REQUIRE(c.send(frame));
    expect = "failed authentication";
  }
  SECTION("forged payload, eager") {
    auto frame = c.seal(open_call(1), "a payload");
    frame.second[0] ^= 0x01;
    REQUIRE(c.send(frame));
    expect = "payload from";
  }
  SECTION("forged payload, rendezvous") {
    auto frame = c.seal(open_call(1), std::string(1 << 20, 'r'));
    frame.second[12345] ^= 0x01;
    REQUIRE(c.send(frame));
    expect = "payload from";
  }
  SECTION("truncated") {
    auto frame = c.seal(open_call(1), "x");
    frame.first.resize(frame.first.size() - 4);
    REQUIRE(c.send(frame));
    expect = "failed authentication";
  }
  SECTION("a plaintext frame after the handshake") {
    REQUIRE(c.raw.send(0, open_call(1).SerializeAsString(), {}, 20s));
    expect = "failed authentication";
  }
  auto why = s.rec.wait_down();
  REQUIRE(why.has_value());
  CHECK(why->code == errc::crypto);
  CHECK_THAT(why->message, Catch::Contains(expect));
  CHECK_THAT(why->message, Catch::Contains("the connection is closed"));
  c.raw.linger(500ms);
  CHECK_FALSE(c.raw.ok());  // the server closed it
  // The other connection is untouched.
  const std::size_t before = s.rec.frame_count();
  REQUIRE(bystander.send(bystander.seal(open_call(9), "still here")));
  REQUIRE(s.rec.wait_frames(before + 1));
  std::lock_guard<std::mutex> lock(s.rec.mu);
  CHECK(text_of(s.rec.frames.back().second.payload) == "still here");
  CHECK(s.rec.downs.size() == 1);
  CHECK(s.t.stats().refused_connections == 1);
}

TEST_CASE("before the handshake: plaintext and garbage are refused, saying why", "[integration][secure]") {
  Server s;
  testing::RawUcxClient raw(s.address);
  REQUIRE(raw.ok());
  std::string expect;
  SECTION("a plaintext HELLO (an --insecure peer)") {
    pb::Envelope hello;
    hello.set_kind(pb::HELLO);
    REQUIRE(raw.send(0, hello.SerializeAsString(), {}, 20s));
    expect = "requires encrypted connections";
  }
  SECTION("a handshake message 1 of the wrong size") {
    REQUIRE(raw.send(0, SecureRaw::handshake_envelope(5), "12345", 20s));
    expect = "handshake with";
  }
  SECTION("a call before the handshake") {
    REQUIRE(raw.send(0, open_call(1).SerializeAsString(), {}, 20s));
    expect = "before the handshake finished";
  }
  SECTION("bytes that are no envelope") {
    REQUIRE(raw.send(0, std::string(40, '\xff'), {}, 20s));
    expect = "malformed handshake frame";
  }
  auto err = raw.next_frame(pb::ERROR, 20s);
  REQUIRE(err.has_value());
  CHECK_THAT(err->error_message(), Catch::Contains(expect));
  auto why = s.rec.wait_down();
  REQUIRE(why.has_value());
  CHECK_THAT(why->message, Catch::Contains(expect));
  CHECK(s.rec.frame_count() == 0);
}

TEST_CASE("transports prove their PeerIDs, and secure and --insecure nodes refuse each other", "[integration][secure]") {
  SECTION("both secure: the dialled side's PeerID is the one its key proves") {
    const auto key = new_key();
    transport::Config sc;
    sc.identity = key;
    Server s(sc);
    Server c;
    transport::Frame f;
    f.envelope = open_call(1);
    f.payload = Buffer::copy_of("ping");
    c.t.post([&] { c.t.send(s.address, std::move(f)); });
    REQUIRE(s.rec.wait_frames(1));
    std::promise<std::string> described;
    c.t.post([&] { described.set_value(c.t.describe(s.address)); });
    const std::string d = described.get_future().get();
    CHECK_THAT(d, Catch::Contains(std::string("encrypted: ") + std::string(noise::k_protocol)));
    CHECK_THAT(d, Catch::Contains(messages::PeerId::from_public_key(key.public_key()).to_string()));
  }
  SECTION("a secure node dials an --insecure one, and the other way round") {
    transport::Config plain;
    plain.insecure = true;
    for (bool secure_dials : {true, false}) {
      INFO("secure side dials: " << secure_dials);
      auto secure = std::make_unique<Server>();
      auto insecure = std::make_unique<Server>(plain);
      Server& dialler = secure_dials ? *secure : *insecure;
      Server& dialled = secure_dials ? *insecure : *secure;
      transport::Frame f;
      f.envelope = open_call(1);
      dialler.t.post([&] { dialler.t.send(dialled.address, std::move(f)); });
      auto why = dialler.rec.wait_down();
      REQUIRE(why.has_value());
      CHECK_THAT(why->message, Catch::Contains("--insecure"));
      CHECK_THAT(why->message, Catch::Contains("start both with --insecure, or neither"));
      auto other = dialled.rec.wait_down();
      REQUIRE(other.has_value());
      CHECK_THAT(other->message, Catch::Contains("--insecure"));
      CHECK(dialled.rec.frame_count() == 0);
    }
  }
  SECTION("a PeerID that is not the identity key's is refused at start") {
    transport::Config c;
    c.identity = new_key();
    c.peer_id = messages::PeerId::from_public_key(new_key().public_key()).bytes();
    Recorder rec;
    transport::ucx::Transport t(c);
    auto bound = t.start(&rec, "127.0.0.1", 0);
    REQUIRE_FALSE(bound.ok());
    CHECK(bound.error().code == errc::invalid_argument);
    CHECK_THAT(bound.error().message, Catch::Contains("identity key"));
  }
}

TEST_CASE("a caller naming a PeerID its connection has not proven is refused, and an IDENTITY proof admits it",
          "[integration][secure]") {
  Server s;
  SecureRaw c(s.address);
  c.connect();
  const auto other = new_key();  // a node behind the client's gateway
  const std::string other_id = messages::PeerId::from_public_key(other.public_key()).bytes();
  auto claim = [&](std::uint64_t id) {
    pb::Envelope env = open_call(id);
    env.set_peer_id(other_id);
    return c.seal(env, "claimed");
  };
  auto proof_of = [&](const messages::Ed25519PrivateKey& key, const std::string& signed_static) {
    pb::NoiseHandshakePayload p;
    p.set_identity_key(messages::encode_public_key_proto(key.public_key()));
    auto sig = key.sign(std::string(noise::k_static_key_prefix) + signed_static);
    REQUIRE(sig.ok());
    p.set_identity_sig(*sig);
    pb::Envelope env;
    env.set_kind(pb::IDENTITY);
    return c.seal(env, p.SerializeAsString());
  };
  SECTION("unproven: the call is refused, the connection stays") {
    REQUIRE(c.send(claim(1)));
    std::optional<pb::Envelope> err;
    for (int i = 0; i < 10 && !(err && err->kind() == pb::ERROR); ++i) {
      auto m = c.raw.next_message(20s);
      REQUIRE(m.has_value());
      err = c.open(m->first);
      REQUIRE(err.has_value());
    }
    REQUIRE(err->kind() == pb::ERROR);
    CHECK(err->call_id() == 1);
    CHECK_THAT(err->error_message(), Catch::Contains("has not proven"));
    CHECK_THAT(err->error_message(), Catch::Contains(messages::PeerId::from_public_key(other.public_key()).to_string()));
    CHECK(s.rec.frame_count() == 0);
    REQUIRE(c.send(c.seal(open_call(2), "own name")));  // calls in its own name still pass
    REQUIRE(s.rec.wait_frames(1));
  }
  SECTION("proven: the call passes, carrying that PeerID") {
    REQUIRE(c.send(proof_of(other, c.session->local_static)));
    REQUIRE(c.send(claim(3)));
    REQUIRE(s.rec.wait_frames(1));
    std::lock_guard<std::mutex> lock(s.rec.mu);
    CHECK(s.rec.frames[0].second.envelope.peer_id() == other_id);
    CHECK(s.rec.downs.empty());
  }
  SECTION("a proof that signs another static key closes the connection") {
    REQUIRE(c.send(proof_of(other, std::string(32, '\x05'))));
    auto why = s.rec.wait_down();
    REQUIRE(why.has_value());
    CHECK_THAT(why->message, Catch::Contains("signature does not bear out"));
  }
}

TEST_CASE("a call to a PeerID the peer did not prove is not sent, and its error names both", "[integration][secure]") {
  const auto key = new_key();
  const auto behind = new_key();  // a node sharing the server's gateway
  const std::string proven = messages::PeerId::from_public_key(key.public_key()).bytes();
  const std::string other = messages::PeerId::from_public_key(new_key().public_key()).bytes();
  transport::Config sc;
  sc.identity = key;
  Server s(sc);
  s.t.post([&] { s.t.prove_identity(behind); });
  Server c;
  auto call = [](std::uint64_t id, const std::string& expect) {
    transport::Frame f;
    f.envelope = open_call(id);
    f.envelope.set_end_of_stream(false);
    f.payload = Buffer::copy_of("ping");
    f.expect_peer = expect;
    return f;
  };
  auto more = [](std::uint64_t id) {
    transport::Frame f;
    f.envelope.set_kind(pb::MESSAGE);
    f.envelope.set_call_id(id);
    f.envelope.set_from_caller(true);
    f.envelope.set_has_message(true);
    f.envelope.set_end_of_stream(true);
    f.payload = Buffer::copy_of("secret");
    return f;
  };
  auto check_refusal = [&](std::uint64_t id) {
    REQUIRE(c.rec.wait_frames(1));
    std::lock_guard<std::mutex> lock(c.rec.mu);
    const auto& [from, f] = c.rec.frames.front();
    CHECK(from == s.address);
    CHECK(f.envelope.kind() == pb::ERROR);
    CHECK(f.envelope.call_id() == id);
    CHECK_FALSE(f.envelope.from_caller());
    CHECK(f.envelope.error_code() == static_cast<std::uint32_t>(errc::crypto));
    const std::string& msg = f.envelope.error_message();
    CHECK_THAT(msg, Catch::Contains("was dialled as PeerID " + messages::PeerId::from_bytes(other)->to_string()));
    CHECK_THAT(msg, Catch::Contains("proved PeerID " + messages::PeerId::from_bytes(proven)->to_string()));
    CHECK_THAT(msg, Catch::Contains(messages::PeerId::from_public_key(behind.public_key()).to_string()));
    CHECK_THAT(msg, Catch::Contains("stale"));
  };
  auto server_calls = [&] {
    std::lock_guard<std::mutex> lock(s.rec.mu);
    std::vector<std::pair<std::uint64_t, std::string>> seen;
    for (const auto& [from, f] : s.rec.frames) seen.emplace_back(f.envelope.call_id(), text_of(f.payload));
    return seen;
  };
  using Seen = std::vector<std::pair<std::uint64_t, std::string>>;

  SECTION("refused while the handshake runs: the call and its later frames stay here, other calls go") {
    c.t.post([&] {
      c.t.send(s.address, call(1, other));
      c.t.send(s.address, more(1));
      c.t.send(s.address, call(2, proven));
      c.t.send(s.address, more(2));
    });
    check_refusal(1);
    REQUIRE(s.rec.wait_frames(2));
    CHECK(server_calls() == Seen{{2, "ping"}, {2, "secret"}});
    CHECK(c.t.stats().refused_calls == 1);
    std::lock_guard<std::mutex> lock(c.rec.mu);
    CHECK(c.rec.downs.empty());
  }
  SECTION("refused on an established connection, which goes on") {
    c.t.post([&] { c.t.send(s.address, call(1, proven)); });
    REQUIRE(s.rec.wait_frames(1));
    c.t.post([&] {
      c.t.send(s.address, call(2, other));
      c.t.send(s.address, more(2));
      c.t.send(s.address, more(1));
    });
    check_refusal(2);
    REQUIRE(s.rec.wait_frames(2));
    CHECK(server_calls() == Seen{{1, "ping"}, {1, "secret"}});
    CHECK(c.t.stats().refused_calls == 1);
  }
  SECTION("a PeerID proven by a node behind the peer's gateway passes, and so does a call naming none") {
    c.t.post([&] {
      c.t.send(s.address, call(1, messages::PeerId::from_public_key(behind.public_key()).bytes()));
      c.t.send(s.address, call(2, ""));
    });
    REQUIRE(s.rec.wait_frames(2));
    CHECK(server_calls() == Seen{{1, "ping"}, {2, "ping"}});
    CHECK(c.rec.frame_count() == 0);
    CHECK(c.t.stats().refused_calls == 0);
  }
}

TEST_CASE("plaintext connections (--insecure) cannot prove a dialled PeerID, so it is not checked", "[integration][secure]") {
  transport::Config plain;
  plain.insecure = true;
  Server s(plain);
  Server c(plain);
  transport::Frame f;
  f.envelope = open_call(1);
  f.payload = Buffer::copy_of("ping");
  f.expect_peer = messages::PeerId::from_public_key(new_key().public_key()).bytes();
  c.t.post([&] { c.t.send(s.address, std::move(f)); });
  REQUIRE(s.rec.wait_frames(1));
  CHECK(c.t.stats().refused_calls == 0);
}

TEST_CASE("frames sent just before stop() arrive whole: stop lets sealing and rendezvous finish",
          "[integration][secure]") {
  // A node that answers and then stops (a replica hosting its node's proxy, a PS at the
  // end of a job) must not cut its last answers off: a large payload is still being sealed
  // on a crypto worker, or the peer is still fetching it, when stop() is called.
  const bool insecure = GENERATE(false, true);
  INFO("insecure: " << insecure);
  transport::Config config;
  config.insecure = insecure;
  Server receiver(config);
  auto sender = std::make_unique<Server>(config);
  transport::Frame hello;
  hello.envelope = open_call(1);
  hello.payload = Buffer::copy_of("hello");
  sender->t.post([&] { sender->t.send(receiver.address, std::move(hello)); });
  REQUIRE(receiver.rec.wait_frames(1));  // the connection is up both ways
  constexpr std::size_t k_frames = 3;
  constexpr std::size_t k_size = std::size_t{48} << 20;
  for (std::size_t i = 0; i < k_frames; ++i) {
    transport::Frame f;
    f.envelope = open_call(2 + i);
    f.payload = Buffer::allocate(k_size);
    testing::fill_pattern(f.payload.data(), k_size, 7 + i);
    sender->t.post([&t = sender->t, &to = receiver.address, f = std::make_shared<transport::Frame>(std::move(f))] {
      t.send(to, std::move(*f));
    });
  }
  sender->t.stop();
  REQUIRE(receiver.rec.wait_frames(1 + k_frames, 60s));
  Buffer expect = Buffer::allocate(k_size);
  for (std::size_t i = 0; i < k_frames; ++i) {
    auto got = receiver.rec.frame(1 + i);
    REQUIRE(got.has_value());
    CHECK(got->second.envelope.call_id() == 2 + i);
    CHECK_FALSE(got->second.payload_error.has_value());
    REQUIRE(got->second.payload.size() == k_size);
    testing::fill_pattern(expect.data(), k_size, 7 + i);
    CHECK(std::memcmp(got->second.payload.data(), expect.data(), k_size) == 0);
  }
}
