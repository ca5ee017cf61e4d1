#include "messages/identity/noise.hpp"

#include <catch2/catch.hpp>

#include <cstring>

#include "messages/identity/peer_id.hpp"

using apiary::errc;
using apiary::messages::Ed25519PrivateKey;
using apiary::messages::PeerId;
namespace noise = apiary::messages::noise;

namespace {

Ed25519PrivateKey fresh_key() {
  auto k = Ed25519PrivateKey::generate();
  REQUIRE(k.ok());
  return *k;
}

/// Runs the three messages between `a` (initiator) and `b`, returning the sessions.
std::pair<noise::Session, noise::Session> complete(noise::Handshake& a, noise::Handshake& b) {
  auto m1 = a.write_message();
  REQUIRE(m1.ok());
  REQUIRE(b.read_message(*m1).ok());
  auto m2 = b.write_message();
  REQUIRE(m2.ok());
  REQUIRE(a.read_message(*m2).ok());
  auto m3 = a.write_message();
  REQUIRE(m3.ok());
  REQUIRE(b.read_message(*m3).ok());
  REQUIRE(a.done());
  REQUIRE(b.done());
  auto sa = a.finish();
  auto sb = b.finish();
  REQUIRE(sa.ok());
  REQUIRE(sb.ok());
  return {std::move(*sa), std::move(*sb)};
}

std::string seal(noise::CipherState& c, const std::string& text) {
  std::string out(text.size() + noise::k_tag_bytes, '\0');
  auto* o = reinterpret_cast<std::byte*>(out.data());
  REQUIRE(c.seal("ad", reinterpret_cast<const std::byte*>(text.data()), text.size(), o, o + text.size()).ok());
  return out;
}

apiary::Result<std::string> open(noise::CipherState& c, const std::string& sealed) {
  std::string out(sealed.size() - noise::k_tag_bytes, '\0');
  const auto* in = reinterpret_cast<const std::byte*>(sealed.data());
  auto st = c.open("ad", in, out.size(), reinterpret_cast<std::byte*>(out.data()), in + out.size());
  if (!st) return st.error();
  return out;
}

}  // namespace

TEST_CASE("noise XX: both sides prove their PeerIDs and agree on keys", "[identity][noise]") {
  const auto ka = fresh_key();
  const auto kb = fresh_key();
  auto a = noise::Handshake::create(true, ka, "127.0.0.1:1000");
  auto b = noise::Handshake::create(false, kb, "127.0.0.1:2000");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->my_turn());
  CHECK_FALSE(b->my_turn());
  auto [sa, sb] = complete(*a, *b);
  CHECK(a->handshake_hash() == b->handshake_hash());
  CHECK(sa.remote == PeerId::from_public_key(kb.public_key()));
  CHECK(sb.remote == PeerId::from_public_key(ka.public_key()));
  CHECK(sa.remote_listen_addr == "127.0.0.1:2000");
  CHECK(sb.remote_listen_addr == "127.0.0.1:1000");
  // Each direction decrypts what the other side sealed, in order.
  for (int i = 0; i < 3; ++i) {
    const std::string text = "frame " + std::to_string(i);
    auto there = open(sb.recv, seal(sa.send, text));
    REQUIRE(there.ok());
    CHECK(*there == text);
    auto back = open(sa.recv, seal(sb.send, text + " back"));
    REQUIRE(back.ok());
    CHECK(*back == text + " back");
  }
  // In place works too (the transport decrypts large payloads where they landed).
  std::string big(1 << 20, 'x');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  std::string buf = big;
  std::byte tag[noise::k_tag_bytes];
  auto* p = reinterpret_cast<std::byte*>(buf.data());
  REQUIRE(sa.send.seal({}, p, buf.size(), p, tag).ok());
  CHECK(buf != big);
  REQUIRE(sb.recv.open({}, p, buf.size(), p, tag).ok());
  CHECK(buf == big);
}

TEST_CASE("noise transport messages: replayed, reordered, forged and truncated ones fail", "[identity][noise]") {
  const auto ka = fresh_key();
  const auto kb = fresh_key();
  auto a = noise::Handshake::create(true, ka, "");
  auto b = noise::Handshake::create(false, kb, "");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto [sa, sb] = complete(*a, *b);
  const std::string m0 = seal(sa.send, "zero");
  const std::string m1 = seal(sa.send, "one");
  SECTION("reordered") {
    auto r = open(sb.recv, m1);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::crypto);
    CHECK(r.error().message.find("replayed, reordered") != std::string::npos);
    CHECK(open(sb.recv, m0).ok());  // a failure does not advance the nonce
  }
  SECTION("replayed") {
    REQUIRE(open(sb.recv, m0).ok());
    CHECK_FALSE(open(sb.recv, m0).ok());
  }
  SECTION("forged: one bit flipped in the ciphertext or the tag") {
    std::string bad = m0;
    bad[1] ^= 0x01;
    CHECK_FALSE(open(sb.recv, bad).ok());
    bad = m0;
    bad.back() ^= 0x80;
    CHECK_FALSE(open(sb.recv, bad).ok());
  }
  SECTION("truncated") {
    std::string cut = m0.substr(0, m0.size() - 1);
    CHECK_FALSE(sb.recv.decrypt_with_ad("ad", cut).ok());
    CHECK_FALSE(sb.recv.decrypt_with_ad("ad", "short").ok());
  }
  SECTION("the wrong direction's key") { CHECK_FALSE(open(sa.recv, m0).ok()); }
}

TEST_CASE("noise XX: a tampered handshake message fails, naming why", "[identity][noise]") {
  const auto ka = fresh_key();
  const auto kb = fresh_key();
  auto a = noise::Handshake::create(true, ka, "");
  auto b = noise::Handshake::create(false, kb, "");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto m1 = a->write_message();
  REQUIRE(m1.ok());
  SECTION("message 1 of a wrong size") {
    auto st = b->read_message(m1->substr(0, 31));
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code == errc::malformed);
  }
  SECTION("message 2 with a flipped bit in the static key or payload") {
    REQUIRE(b->read_message(*m1).ok());
    auto m2 = b->write_message();
    REQUIRE(m2.ok());
    for (std::size_t at : {std::size_t{40}, m2->size() - 5}) {
      auto a2 = noise::Handshake::create(true, ka, "");
      REQUIRE(a2.ok());
      // A fresh initiator cannot read b's answer to another message 1 either.
      REQUIRE(a2->write_message().ok());
      std::string bad = *m2;
      bad[at] ^= 0x04;
      auto st = a2->read_message(bad);
      REQUIRE_FALSE(st.ok());
      CHECK(st.error().code == errc::crypto);
    }
    std::string bad = *m2;
    bad[m2->size() - 5] ^= 0x04;
    auto st = a->read_message(bad);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code == errc::crypto);
  }
  SECTION("message 1 with a low-order key: message 2 is refused, not written") {
    auto b2 = noise::Handshake::create(false, kb, "");
    REQUIRE(b2.ok());
    REQUIRE(b2->read_message(std::string(32, '\0')).ok());  // the point 0: X25519 gives all zeros
    auto m2 = b2->write_message();
    REQUIRE_FALSE(m2.ok());
    CHECK(m2.error().code == errc::crypto);
    CHECK(m2.error().message.find("low-order") != std::string::npos);
  }
  SECTION("messages out of turn") {
    auto again = a->write_message();
    REQUIRE_FALSE(again.ok());
    CHECK(again.error().code == errc::protocol);
    auto w = b->write_message();
    REQUIRE_FALSE(w.ok());
    CHECK(w.error().code == errc::protocol);
    CHECK_FALSE(a->finish().ok());
  }
}

TEST_CASE("noise XX: fixed keys give a fixed transcript, and a key not signed by the identity is refused",
          "[identity][noise]") {
  auto ka = Ed25519PrivateKey::from_seed(std::string(32, '\x01'));
  auto kb = Ed25519PrivateKey::from_seed(std::string(32, '\x02'));
  REQUIRE(ka.ok());
  REQUIRE(kb.ok());
  auto make = [&](bool init, const Ed25519PrivateKey& id, char s, char e) {
    auto hs = noise::Handshake::create_with_keys(init, id, "", std::string(32, s), std::string(32, e));
    REQUIRE(hs.ok());
    return std::move(*hs);
  };
  auto a = make(true, *ka, '\x11', '\x12');
  auto b = make(false, *kb, '\x21', '\x22');
  auto [sa, sb] = complete(a, b);
  auto a2 = make(true, *ka, '\x11', '\x12');
  auto b2 = make(false, *kb, '\x21', '\x22');
  complete(a2, b2);
  CHECK(a.handshake_hash() == a2.handshake_hash());  // deterministic given the keys

  // A responder whose identity signs some other static key (one it relays, say) proves
  // nothing: the initiator refuses message 2, naming the identity that failed.
  auto a3 = make(true, *ka, '\x11', '\x12');
  auto m1 = a3.write_message();
  REQUIRE(m1.ok());
  auto forger = noise::Handshake::create_with_keys(false, *kb, "", std::string(32, '\x31'), std::string(32, '\x32'),
                                                   std::string(32, '\x07'));
  REQUIRE(forger.ok());
  REQUIRE(forger->read_message(*m1).ok());
  auto m2 = forger->write_message();
  REQUIRE(m2.ok());
  auto st = a3.read_message(*m2);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == errc::crypto);
  CHECK(st.error().message.find(PeerId::from_public_key(kb->public_key()).to_string()) != std::string::npos);
  CHECK_FALSE(a3.done());
}
