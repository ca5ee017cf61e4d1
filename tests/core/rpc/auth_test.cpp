// Call authorization (core/rpc/auth.hpp): tokens, signed call statements, clock skew,
// replays, callers bound to their tokens, service keys.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "core/rpc/auth.hpp"
#include "messages/identity/peer_id.hpp"

namespace {

using apiary::errc;
using apiary::Status;
using apiary::core::rpc::AuthorityTokenIssuer;
using apiary::core::rpc::TokenAuthorizer;
using apiary::core::rpc::TokenIssuer;
using apiary::messages::Ed25519PrivateKey;
using apiary::messages::Ed25519PublicKey;
namespace rpc = apiary::core::rpc;
namespace pb = apiary::pb;

constexpr double k_t0 = 1764517126.5;  // 2025-11-30T15:38:46.5, Unix seconds

Ed25519PrivateKey key_from(char fill) {
  auto key = Ed25519PrivateKey::from_seed(std::string(32, fill));
  REQUIRE(key.ok());
  return *key;
}

/// Distinct 8-byte nonces: a per-authorizer tag byte and a counter.
rpc::NonceSource counter_nonces(char tag) {
  auto counter = std::make_shared<std::uint8_t>(0);
  return [tag, counter] { return std::string(7, tag) + static_cast<char>(++*counter); };
}

std::shared_ptr<TokenIssuer> issuer_for(const Ed25519PrivateKey& authority,
                                        const std::string& user, const Ed25519PrivateKey& holder,
                                        double lifetime = rpc::k_default_token_lifetime) {
  auto issuer = AuthorityTokenIssuer::create(authority, user, holder.public_key(), lifetime);
  REQUIRE(issuer.ok());
  return std::make_shared<AuthorityTokenIssuer>(std::move(*issuer));
}

/// An issuer whose tokens come from elsewhere, validated against one authority.
class FixedTokenIssuer final : public TokenIssuer {
 public:
  FixedTokenIssuer(pb::AccessToken token, Ed25519PublicKey authority)
      : token_(std::move(token)), authority_(std::move(authority)) {}
  apiary::Result<pb::AccessToken> get_token(double) override { return token_; }
  Status is_token_valid(double now, const pb::AccessToken& token) const override {
    return rpc::verify_access_token(authority_, now, token);
  }
  bool does_token_need_refreshing(double, const pb::AccessToken&) const override { return false; }

 private:
  pb::AccessToken token_;
  Ed25519PublicKey authority_;
};

/// Counts get_token calls of a wrapped issuer.
class CountingIssuer final : public TokenIssuer {
 public:
  explicit CountingIssuer(std::shared_ptr<TokenIssuer> inner) : inner_(std::move(inner)) {}
  apiary::Result<pb::AccessToken> get_token(double now) override {
    ++calls;
    return inner_->get_token(now);
  }
  Status is_token_valid(double now, const pb::AccessToken& token) const override {
    ++checks;
    return inner_->is_token_valid(now, token);
  }
  bool does_token_need_refreshing(double now, const pb::AccessToken& token) const override {
    return inner_->does_token_need_refreshing(now, token);
  }
  int calls = 0;
  mutable int checks = 0;

 private:
  std::shared_ptr<TokenIssuer> inner_;
};

/// A small swarm: alice (client) and bob (service) under one authority; mallory holds a
/// key but no token; carol holds a token from another authority.
struct Swarm {
  Ed25519PrivateKey authority = key_from('A');
  Ed25519PrivateKey other_authority = key_from('O');
  Ed25519PrivateKey alice_key = key_from('a');
  Ed25519PrivateKey bob_key = key_from('b');
  Ed25519PrivateKey mallory_key = key_from('m');
  TokenAuthorizer alice{alice_key, issuer_for(authority, "alice", alice_key), counter_nonces('a')};
  TokenAuthorizer bob{bob_key, issuer_for(authority, "bob", bob_key), counter_nonces('b')};
};

std::string peer_of(const Ed25519PrivateKey& key) {
  return apiary::messages::PeerId::from_public_key(key.public_key()).bytes();
}

/// Re-signs `auth` for `call` with `key`, as a forger would.
void resign(pb::RequestAuthInfo& auth, const rpc::CallParties& call, const Ed25519PrivateKey& key) {
  auto signature = key.sign(rpc::request_statement(call, auth));
  REQUIRE(signature.ok());
  auth.set_signature(*signature);
}
void resign(pb::ResponseAuthInfo& auth, const rpc::CallParties& call, const Ed25519PrivateKey& key) {
  auto signature = key.sign(rpc::response_statement(call, auth));
  REQUIRE(signature.ok());
  auth.set_signature(*signature);
}

void require_error(const Status& status, errc code, const std::string& fragment) {
  REQUIRE_FALSE(status.ok());
  INFO(status.error().what());
  CHECK(status.error().code == code);
  CHECK(status.error().message.find(fragment) != std::string::npos);
}

}  // namespace

TEST_CASE("ISO times round-trip Unix seconds", "[auth]") {
  CHECK(*rpc::format_iso_time(0) == "1970-01-01T00:00:00.000000");
  CHECK(*rpc::format_iso_time(-1) == "1969-12-31T23:59:59.000000");
  CHECK(*rpc::format_iso_time(951782400) == "2000-02-29T00:00:00.000000");
  CHECK(*rpc::format_iso_time(k_t0) == "2025-11-30T15:38:46.500000");
  CHECK(*rpc::parse_iso_time("2025-11-30 15:38:46.5") == k_t0);  // Python's str(datetime)
  CHECK(*rpc::parse_iso_time("2000-02-29T00:00:00") == 951782400.0);
  for (double t : {0.0, 86399.25, 1e9 + 0.125, k_t0, -86400.75}) {
    CHECK(*rpc::parse_iso_time(*rpc::format_iso_time(t)) == Approx(t).margin(1e-6));
  }
  for (const char* bad : {"2025-11-30", "2025-13-01T00:00:00", "2025-02-29T00:00:00",
                          "2025-11-30T24:00:00", "2025-11-30T10:00:00Z", "2025-11-30T10:00:00.",
                          "2025-11-30T10:00:00.1234567", "0000-01-01T00:00:00"}) {
    INFO(bad);
    CHECK(rpc::parse_iso_time(bad).error().code == errc::malformed);
  }
  CHECK_FALSE(rpc::format_iso_time(std::nan("")).ok());
  CHECK_FALSE(rpc::format_iso_time(253402300799.9999999).ok());
  CHECK_FALSE(rpc::format_iso_time(1e300).ok());
}

TEST_CASE("access tokens verify only under their authority and until they expire", "[auth]") {
  Swarm s;
  auto token = rpc::issue_access_token(s.authority, "alice", s.alice_key.public_key(), k_t0);
  REQUIRE(token.ok());
  CHECK(token->expiration_time() == "2025-11-30T15:38:46.500000");
  CHECK(token->public_key() == s.alice_key.public_key().bytes());
  CHECK(rpc::verify_access_token(s.authority.public_key(), k_t0, *token).ok());
  require_error(rpc::verify_access_token(s.authority.public_key(), k_t0 + 0.001, *token), errc::protocol, "expired");
  require_error(rpc::verify_access_token(s.other_authority.public_key(), k_t0, *token), errc::crypto, "authority");
  auto renamed = *token;
  renamed.set_username("mallory");
  require_error(rpc::verify_access_token(s.authority.public_key(), k_t0, renamed), errc::crypto, "authority");
  auto short_key = *token;
  short_key.set_public_key("short");
  require_error(rpc::verify_access_token(s.authority.public_key(), k_t0, short_key), errc::malformed, "32-byte");
  CHECK(rpc::issue_access_token(s.authority, std::string("al\0ice", 6), s.alice_key.public_key(), k_t0)
            .error()
            .code == errc::invalid_argument);
  CHECK(AuthorityTokenIssuer::create(s.authority, "alice", s.alice_key.public_key(), 60).error().code ==
        errc::invalid_argument);
}

TEST_CASE("a signed request and answer round-trip, and forgeries are refused", "[auth]") {
  Swarm s;
  const std::string alice = peer_of(s.alice_key);
  const rpc::CallParties call{"DHTProtocol.rpc_find", alice, peer_of(s.bob_key)};
  auto request = s.alice.sign_request(k_t0, call);
  REQUIRE(request.ok());
  CHECK(request->client_access_token().username() == "alice");
  CHECK(request->nonce().size() == rpc::k_auth_nonce_size);
  CHECK(request->time() == k_t0);
  CHECK(request->service_public_key() == s.bob_key.public_key().bytes());
  REQUIRE(s.bob.check_request(k_t0 + 1, call, *request).ok());

  auto answer = s.bob.sign_response(k_t0 + 1, call, *request);
  REQUIRE(answer.ok());
  CHECK(answer->service_access_token().username() == "bob");
  CHECK(answer->nonce() == request->nonce());
  CHECK(s.alice.check_response(k_t0 + 2, call, *request, *answer).ok());

  SECTION("another handle or caller does not verify") {
    Swarm fresh;
    const rpc::CallParties other_handle{"DHTProtocol.rpc_store", alice, {}};
    require_error(fresh.bob.check_request(k_t0, other_handle, *request), errc::crypto, "does not verify");
    const rpc::CallParties other_caller{call.handle, peer_of(s.mallory_key), {}};
    require_error(fresh.bob.check_request(k_t0, other_caller, *request), errc::crypto, "does not verify");
    require_error(s.alice.check_response(k_t0, other_handle, *request, *answer), errc::crypto, "does not verify");
  }
  SECTION("a tampered auth field is refused both ways") {
    Swarm fresh;
    auto forged = *request;
    forged.set_time(k_t0 + 2);
    require_error(fresh.bob.check_request(k_t0, call, forged), errc::crypto, "does not verify");
    auto forged_answer = *answer;
    forged_answer.mutable_service_access_token()->set_username("bobby");
    require_error(s.alice.check_response(k_t0, call, *request, forged_answer), errc::crypto, "authority");
  }
  SECTION("an answer signed by a key other than its token's is refused") {
    auto forged_answer = *answer;
    resign(forged_answer, call, s.mallory_key);
    require_error(s.alice.check_response(k_t0, call, *request, forged_answer), errc::crypto, "does not verify");
  }
  SECTION("a member's request presented by another caller is refused") {
    // Mallory holds a token too, but a request signed by alice stays alice's: its
    // statement names alice as the caller, and her token is not mallory's.
    Swarm fresh;
    TokenAuthorizer mallory{s.mallory_key, issuer_for(s.authority, "mallory", s.mallory_key), counter_nonces('m')};
    const rpc::CallParties from_mallory{call.handle, peer_of(s.mallory_key), {}};
    auto stolen = *request;
    resign(stolen, from_mallory, s.mallory_key);
    require_error(fresh.bob.check_request(k_t0, from_mallory, stolen), errc::crypto, "does not verify");
    auto own = mallory.sign_request(k_t0, from_mallory);
    REQUIRE(own.ok());
    CHECK(fresh.bob.check_request(k_t0, from_mallory, *own).ok());
    require_error(fresh.bob.check_request(k_t0, call, *own), errc::crypto, "does not verify");
  }
}

TEST_CASE("request checks refuse each kind of bad request", "[auth]") {
  Swarm s;
  const rpc::CallParties call{"apiary.Ping.rpc_ping", peer_of(s.alice_key), {}};
  auto request = s.alice.sign_request(k_t0, call);
  REQUIRE(request.ok());

  SECTION("no authorization") {
    require_error(s.bob.check_request(k_t0, call, pb::RequestAuthInfo{}), errc::protocol, "access token");
  }
  SECTION("unsigned") {
    auto unsigned_request = *request;
    unsigned_request.clear_signature();
    require_error(s.bob.check_request(k_t0, call, unsigned_request), errc::malformed, "got none");
  }
  SECTION("signed by a key other than the token's") {
    resign(*request, call, s.mallory_key);
    require_error(s.bob.check_request(k_t0, call, *request), errc::crypto, "does not verify");
  }
  SECTION("a token of another peer than the caller") {
    // Mallory signs a statement naming alice as the caller, under her own valid token.
    TokenAuthorizer mallory{s.mallory_key, issuer_for(s.authority, "mallory", s.mallory_key), counter_nonces('m')};
    auto forged = mallory.sign_request(k_t0, call);
    REQUIRE(forged.ok());
    require_error(s.bob.check_request(k_t0, call, *forged), errc::protocol, "token of the calling peer");
  }
  SECTION("expired token") {
    auto old = rpc::issue_access_token(s.authority, "alice", s.alice_key.public_key(), k_t0 - 1);
    REQUIRE(old.ok());
    TokenAuthorizer stale{s.alice_key, std::make_shared<FixedTokenIssuer>(*old, s.authority.public_key()),
                          counter_nonces('s')};
    auto stale_request = stale.sign_request(k_t0, call);
    REQUIRE(stale_request.ok());
    require_error(s.bob.check_request(k_t0, call, *stale_request), errc::protocol, "expired");
  }
  SECTION("token from another authority") {
    TokenAuthorizer carol{s.alice_key, issuer_for(s.other_authority, "carol", s.alice_key), counter_nonces('c')};
    auto carol_request = carol.sign_request(k_t0, call);
    REQUIRE(carol_request.ok());
    require_error(s.bob.check_request(k_t0, call, *carol_request), errc::crypto, "authority");
  }
  SECTION("signing time outside the clock skew") {
    CHECK(s.bob.check_request(k_t0 + rpc::k_auth_max_clock_skew, call, *request).ok());
    auto late = s.alice.sign_request(k_t0, call);
    REQUIRE(late.ok());
    require_error(s.bob.check_request(k_t0 + 60.5, call, *late), errc::protocol, "auth.time");
    auto early = s.alice.sign_request(k_t0, call);
    REQUIRE(early.ok());
    require_error(s.bob.check_request(k_t0 - 60.5, call, *early), errc::protocol, "auth.time");
    auto nan_time = s.alice.sign_request(k_t0, call);
    REQUIRE(nan_time.ok());
    nan_time->set_time(std::numeric_limits<double>::quiet_NaN());
    resign(*nan_time, call, s.alice_key);
    require_error(s.bob.check_request(k_t0, call, *nan_time), errc::protocol, "auth.time");
  }
  SECTION("replayed nonce") {
    REQUIRE(s.bob.check_request(k_t0, call, *request).ok());
    require_error(s.bob.check_request(k_t0 + 1, call, *request), errc::protocol, "repeated");
    // A new request that reuses the nonce is a replay too, and a refused one is not kept.
    auto again = s.alice.sign_request(k_t0, call);
    REQUIRE(again.ok());
    again->set_nonce(request->nonce());
    resign(*again, call, s.alice_key);
    require_error(s.bob.check_request(k_t0 + 2, call, *again), errc::protocol, "repeated");
    CHECK(s.bob.recent_nonces().size(k_t0 + 2) == 1);
  }
  SECTION("nonce of a bad size") {
    request->set_nonce("tiny");
    resign(*request, call, s.alice_key);
    require_error(s.bob.check_request(k_t0, call, *request), errc::malformed, "nonce");
  }
  SECTION("service key of another service") {
    const rpc::CallParties to_mallory{call.handle, call.caller, peer_of(s.mallory_key)};
    auto meant_for_mallory = s.alice.sign_request(k_t0, to_mallory);
    REQUIRE(meant_for_mallory.ok());
    require_error(s.bob.check_request(k_t0, to_mallory, *meant_for_mallory), errc::protocol, "service_public_key");
    const rpc::CallParties to_bob{call.handle, call.caller, peer_of(s.bob_key)};
    auto meant_for_bob = s.alice.sign_request(k_t0, to_bob);
    REQUIRE(meant_for_bob.ok());
    CHECK(s.bob.check_request(k_t0, to_bob, *meant_for_bob).ok());
  }
}

TEST_CASE("answer checks refuse answers to other requests and from other services", "[auth]") {
  Swarm s;
  const rpc::CallParties call{"apiary.Ping.rpc_ping", peer_of(s.alice_key), {}};
  auto first = s.alice.sign_request(k_t0, call);
  auto second = s.alice.sign_request(k_t0, call);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  REQUIRE(first->nonce() != second->nonce());
  auto answer = s.bob.sign_response(k_t0, call, *first);
  REQUIRE(answer.ok());
  CHECK(s.alice.check_response(k_t0, call, *first, *answer).ok());
  require_error(s.alice.check_response(k_t0, call, *second, *answer), errc::protocol, "nonce");
  require_error(s.alice.check_response(k_t0, call, *first, pb::ResponseAuthInfo{}), errc::protocol,
                "not a member");

  // A request addressed to bob accepts only an answer under bob's key.
  const rpc::CallParties to_bob{call.handle, call.caller, peer_of(s.bob_key)};
  auto request = s.alice.sign_request(k_t0, to_bob);
  REQUIRE(request.ok());
  TokenAuthorizer impostor{s.mallory_key, issuer_for(s.authority, "mallory", s.mallory_key), counter_nonces('m')};
  auto impostor_answer = impostor.sign_response(k_t0, to_bob, *request);
  REQUIRE(impostor_answer.ok());
  require_error(s.alice.check_response(k_t0, to_bob, *request, *impostor_answer), errc::protocol,
                "service the request named");
  auto bob_answer = s.bob.sign_response(k_t0, to_bob, *request);
  REQUIRE(bob_answer.ok());
  CHECK(s.alice.check_response(k_t0, to_bob, *request, *bob_answer).ok());
}

TEST_CASE("the nonce window forgets nonces after their lifetime", "[auth]") {
  rpc::NonceWindow window;
  CHECK(window.remember(0, "nonce-01"));
  CHECK_FALSE(window.remember(100, "nonce-01"));
  CHECK(window.remember(100, "nonce-02"));
  CHECK(window.contains(rpc::k_auth_nonce_lifetime, "nonce-01"));
  CHECK(window.size(rpc::k_auth_nonce_lifetime) == 2);
  CHECK_FALSE(window.contains(rpc::k_auth_nonce_lifetime + 0.5, "nonce-01"));
  CHECK(window.size(rpc::k_auth_nonce_lifetime + 0.5) == 1);
  CHECK(window.remember(rpc::k_auth_nonce_lifetime + 1, "nonce-01"));
  CHECK(window.size(1000) == 0);
}

TEST_CASE("a token is refreshed only when it nears expiry", "[auth]") {
  Swarm s;
  auto counting = std::make_shared<CountingIssuer>(issuer_for(s.authority, "alice", s.alice_key, 600));
  TokenAuthorizer alice{s.alice_key, counting, counter_nonces('a')};
  const rpc::CallParties call{"apiary.Ping.rpc_ping", peer_of(s.alice_key), {}};
  auto request = alice.sign_request(k_t0, call);
  REQUIRE(request.ok());
  const auto first_expiry = request->client_access_token().expiration_time();
  request = alice.sign_request(k_t0 + 540, call);  // expires at +600: 60 s left
  REQUIRE(request.ok());
  CHECK(counting->calls == 1);
  CHECK(request->client_access_token().expiration_time() == first_expiry);
  request = alice.sign_request(k_t0 + 540.5, call);  // under 60 s left: refresh
  REQUIRE(request.ok());
  CHECK(counting->calls == 2);
  CHECK(request->client_access_token().expiration_time() == *rpc::format_iso_time(k_t0 + 1140.5));
  CHECK(s.bob.check_request(k_t0 + 541, call, *request).ok());

  // An issuer whose tokens name another key is a configuration error, caught at signing.
  TokenAuthorizer mismatched{s.mallory_key, issuer_for(s.authority, "alice", s.alice_key), counter_nonces('x')};
  require_error(mismatched.sign_request(k_t0, call).error(), errc::invalid_argument, "key");
}

TEST_CASE("a peer's token found valid is believed for a while, never past its expiration", "[auth]") {
  Swarm s;
  auto counting = std::make_shared<CountingIssuer>(issuer_for(s.authority, "bob", s.bob_key));
  TokenAuthorizer bob{s.bob_key, counting, counter_nonces('b')};
  const rpc::CallParties call{"apiary.Ping.rpc_ping", peer_of(s.alice_key), {}};
  for (int i = 0; i < 3; ++i) {
    auto request = s.alice.sign_request(k_t0 + i, call);
    REQUIRE(request.ok());
    CHECK(bob.check_request(k_t0 + i, call, *request).ok());
  }
  CHECK(counting->checks == 1);  // the token was checked once, each signature every time
  auto later = s.alice.sign_request(k_t0 + rpc::k_token_belief + 1, call);
  REQUIRE(later.ok());
  CHECK(bob.check_request(k_t0 + rpc::k_token_belief + 1, call, *later).ok());
  CHECK(counting->checks == 2);  // believed no longer than k_token_belief

  // A token that expires is refused from then on, believed or not.
  auto short_lived = rpc::issue_access_token(s.authority, "alice", s.alice_key.public_key(), k_t0 + 10);
  REQUIRE(short_lived.ok());
  TokenAuthorizer alice{s.alice_key, std::make_shared<FixedTokenIssuer>(*short_lived, s.authority.public_key()),
                        counter_nonces('t')};
  auto before = alice.sign_request(k_t0, call);
  REQUIRE(before.ok());
  CHECK(bob.check_request(k_t0, call, *before).ok());
  auto after = alice.sign_request(k_t0 + 10.5, call);
  REQUIRE(after.ok());
  require_error(bob.check_request(k_t0 + 10.5, call, *after), errc::protocol, "expired");
}

TEST_CASE("over a channel that proves the caller, the request's signature is not verified, the rest is",
          "[auth]") {
  Swarm s;
  rpc::CallParties call{"apiary.Ping.rpc_ping", peer_of(s.alice_key), {}};
  call.channel_proves_caller = true;
  auto request = s.alice.sign_request(k_t0, call);
  REQUIRE(request.ok());
  auto garbled = *request;
  garbled.set_signature(std::string(64, 'x'));
  CHECK(s.bob.check_request(k_t0, call, garbled).ok());  // the channel vouches for alice
  require_error(s.bob.check_request(k_t0, call, garbled), errc::protocol, "repeated");  // the nonce still counts
  // A copy of alice's token presented by mallory's proven connection is still refused.
  rpc::CallParties from_mallory{call.handle, peer_of(s.mallory_key), {}};
  from_mallory.channel_proves_caller = true;
  auto copied = s.alice.sign_request(k_t0, call);
  REQUIRE(copied.ok());
  require_error(s.bob.check_request(k_t0, from_mallory, *copied), errc::protocol, "token of the calling peer");
  // An expired token, a missing one and a missing signature are refused as before.
  auto old = rpc::issue_access_token(s.authority, "alice", s.alice_key.public_key(), k_t0 - 1);
  REQUIRE(old.ok());
  TokenAuthorizer stale{s.alice_key, std::make_shared<FixedTokenIssuer>(*old, s.authority.public_key()),
                        counter_nonces('s')};
  auto stale_request = stale.sign_request(k_t0, call);
  REQUIRE(stale_request.ok());
  require_error(s.bob.check_request(k_t0, call, *stale_request), errc::protocol, "expired");
  require_error(s.bob.check_request(k_t0, call, pb::RequestAuthInfo{}), errc::protocol, "access token");
  auto unsigned_request = s.alice.sign_request(k_t0, call);
  REQUIRE(unsigned_request.ok());
  unsigned_request->clear_signature();
  require_error(s.bob.check_request(k_t0, call, *unsigned_request), errc::malformed, "got none");
}
