// Request/response authorization (core/dht/auth.hpp): tokens, signatures, clock skew,
// replays, service keys and the byte-level helpers a DHT node uses.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "core/dht/auth.hpp"
#include "core/dht/protocol.hpp"
#include "dht.pb.h"

namespace {

using apiary::errc;
using apiary::Status;
using apiary::core::dht::AuthorityTokenIssuer;
using apiary::core::dht::TokenAuthorizer;
using apiary::core::dht::TokenIssuer;
using apiary::messages::Ed25519PrivateKey;
using apiary::messages::Ed25519PublicKey;
namespace dht = apiary::core::dht;
namespace pb = apiary::pb;

constexpr double k_t0 = 1764517126.5;  // 2025-11-30T15:38:46.5, DHT seconds

Ed25519PrivateKey key_from(char fill) {
  auto key = Ed25519PrivateKey::from_seed(std::string(32, fill));
  REQUIRE(key.ok());
  return *key;
}

/// Distinct 8-byte nonces: a per-authorizer tag byte and a counter.
dht::NonceSource counter_nonces(char tag) {
  auto counter = std::make_shared<std::uint8_t>(0);
  return [tag, counter] { return std::string(7, tag) + static_cast<char>(++*counter); };
}

std::shared_ptr<TokenIssuer> issuer_for(const Ed25519PrivateKey& authority,
                                        const std::string& user, const Ed25519PrivateKey& holder,
                                        double lifetime = dht::k_default_token_lifetime) {
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
    return dht::verify_access_token(authority_, now, token);
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
    return inner_->is_token_valid(now, token);
  }
  bool does_token_need_refreshing(double now, const pb::AccessToken& token) const override {
    return inner_->does_token_need_refreshing(now, token);
  }
  int calls = 0;

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

/// Re-signs `message` (auth filled) with `key`, as a forger would.
template <class Message>
void resign(Message& message, const Ed25519PrivateKey& key) {
  message.mutable_auth()->clear_signature();
  auto bytes = dht::serialize_deterministic(message);
  REQUIRE(bytes.ok());
  auto signature = key.sign(*bytes);
  REQUIRE(signature.ok());
  message.mutable_auth()->set_signature(*signature);
}

void require_error(const Status& status, errc code, const std::string& fragment) {
  REQUIRE_FALSE(status.ok());
  INFO(status.error().what());
  CHECK(status.error().code == code);
  CHECK(status.error().message.find(fragment) != std::string::npos);
}

pb::PingRequest ping_request() {
  pb::PingRequest request;
  request.mutable_peer()->set_node_id(std::string(20, '\x11'));
  request.set_validate(true);
  return request;
}

pb::PingResponse ping_response() {
  pb::PingResponse response;
  response.mutable_peer()->set_node_id(std::string(20, '\x22'));
  response.set_dht_time(k_t0);
  return response;
}

/// One request/response pair per RPC, filled with a little payload.
template <class Request, class Response>
struct Rpc {
  using RequestType = Request;
  using ResponseType = Response;
};

void fill(pb::PingRequest& r) { r = ping_request(); }
void fill(pb::PingResponse& r) { r = ping_response(); }
void fill(pb::StoreRequest& r) {
  r.add_keys(std::string(20, '\x01'));
  r.add_subkeys("\xc0");
  r.add_values("\xa5hello");
  r.add_expiration_time(k_t0 + 30);
  r.add_in_cache(false);
  r.mutable_peer()->set_node_id(std::string(20, '\x11'));
}
void fill(pb::StoreResponse& r) {
  r.add_store_ok(true);
  r.mutable_peer()->set_node_id(std::string(20, '\x22'));
}
void fill(pb::FindRequest& r) {
  r.add_keys(std::string(20, '\x01'));
  r.mutable_peer()->set_node_id(std::string(20, '\x11'));
}
void fill(pb::FindResponse& r) {
  auto* result = r.add_results();
  result->set_type(pb::FOUND_REGULAR);
  result->set_value("\xa5hello");
  result->set_expiration_time(k_t0 + 30);
  r.mutable_peer()->set_node_id(std::string(20, '\x22'));
}

}  // namespace

TEST_CASE("ISO times round-trip DHT seconds", "[auth]") {
  CHECK(*dht::format_iso_time(0) == "1970-01-01T00:00:00.000000");
  CHECK(*dht::format_iso_time(-1) == "1969-12-31T23:59:59.000000");
  CHECK(*dht::format_iso_time(951782400) == "2000-02-29T00:00:00.000000");
  CHECK(*dht::format_iso_time(k_t0) == "2025-11-30T15:38:46.500000");
  CHECK(*dht::parse_iso_time("2025-11-30 15:38:46.5") == k_t0);  // Python's str(datetime)
  CHECK(*dht::parse_iso_time("2000-02-29T00:00:00") == 951782400.0);
  for (double t : {0.0, 86399.25, 1e9 + 0.125, k_t0, -86400.75}) {
    CHECK(*dht::parse_iso_time(*dht::format_iso_time(t)) == Approx(t).margin(1e-6));
  }
  for (const char* bad : {"2025-11-30", "2025-13-01T00:00:00", "2025-02-29T00:00:00",
                          "2025-11-30T24:00:00", "2025-11-30T10:00:00Z", "2025-11-30T10:00:00.",
                          "2025-11-30T10:00:00.1234567", "0000-01-01T00:00:00"}) {
    INFO(bad);
    CHECK(dht::parse_iso_time(bad).error().code == errc::malformed);
  }
  CHECK_FALSE(dht::format_iso_time(std::nan("")).ok());
  CHECK_FALSE(dht::format_iso_time(253402300799.9999999).ok());
  CHECK_FALSE(dht::format_iso_time(1e300).ok());
}

TEST_CASE("access tokens verify only under their authority and until they expire", "[auth]") {
  Swarm s;
  auto token = dht::issue_access_token(s.authority, "alice", s.alice_key.public_key(), k_t0);
  REQUIRE(token.ok());
  CHECK(token->expiration_time() == "2025-11-30T15:38:46.500000");
  CHECK(token->public_key() == s.alice_key.public_key().bytes());
  CHECK(dht::verify_access_token(s.authority.public_key(), k_t0, *token).ok());
  require_error(dht::verify_access_token(s.authority.public_key(), k_t0 + 0.001, *token),
                errc::protocol, "expired");
  require_error(dht::verify_access_token(s.other_authority.public_key(), k_t0, *token),
                errc::crypto, "authority");
  auto renamed = *token;
  renamed.set_username("mallory");
  require_error(dht::verify_access_token(s.authority.public_key(), k_t0, renamed), errc::crypto,
                "authority");
  auto short_key = *token;
  short_key.set_public_key("short");
  require_error(dht::verify_access_token(s.authority.public_key(), k_t0, short_key),
                errc::malformed, "32-byte");
  CHECK(dht::issue_access_token(s.authority, std::string("al\0ice", 6), s.alice_key.public_key(),
                                k_t0)
            .error()
            .code == errc::invalid_argument);
  CHECK(AuthorityTokenIssuer::create(s.authority, "alice", s.alice_key.public_key(), 60).error()
            .code == errc::invalid_argument);
}

TEMPLATE_TEST_CASE("a signed request and response round-trip", "[auth]",
                   (Rpc<pb::PingRequest, pb::PingResponse>),
                   (Rpc<pb::StoreRequest, pb::StoreResponse>),
                   (Rpc<pb::FindRequest, pb::FindResponse>)) {
  Swarm s;
  typename TestType::RequestType request;
  typename TestType::ResponseType response;
  fill(request);
  fill(response);
  REQUIRE(s.alice.sign_request(k_t0, request).ok());
  CHECK(request.auth().client_access_token().username() == "alice");
  CHECK(request.auth().nonce().size() == dht::k_auth_nonce_size);
  CHECK(request.auth().time() == k_t0);
  CHECK(request.auth().service_public_key().empty());
  REQUIRE(s.bob.validate_request(k_t0 + 1, request).ok());

  REQUIRE(s.bob.sign_response(k_t0 + 1, response, request).ok());
  CHECK(response.auth().service_access_token().username() == "bob");
  CHECK(response.auth().nonce() == request.auth().nonce());
  CHECK(s.alice.validate_response(k_t0 + 2, response, request).ok());

  SECTION("a tampered payload is rejected both ways") {
    auto forged_request = request;
    forged_request.mutable_peer()->set_node_id(std::string(20, '\x66'));
    require_error(s.bob.validate_request(k_t0, forged_request), errc::crypto, "does not verify");
    auto forged_response = response;
    forged_response.mutable_peer()->set_node_id(std::string(20, '\x66'));
    require_error(s.alice.validate_response(k_t0, forged_response, request), errc::crypto,
                  "does not verify");
  }
  SECTION("a tampered auth field is rejected both ways") {
    auto forged_request = request;
    forged_request.mutable_auth()->set_time(k_t0 + 2);
    require_error(s.bob.validate_request(k_t0, forged_request), errc::crypto, "does not verify");
    auto forged_response = response;
    forged_response.mutable_auth()->mutable_service_access_token()->set_username("bobby");
    require_error(s.alice.validate_response(k_t0, forged_response, request), errc::crypto,
                  "authority");
  }
  SECTION("a response signed by a key other than its token's is rejected") {
    auto forged_response = response;
    resign(forged_response, s.mallory_key);
    require_error(s.alice.validate_response(k_t0, forged_response, request), errc::crypto,
                  "does not verify");
  }
}

TEST_CASE("request validation rejects each kind of bad request", "[auth]") {
  Swarm s;
  auto request = ping_request();
  REQUIRE(s.alice.sign_request(k_t0, request).ok());

  SECTION("unsigned") {
    require_error(s.bob.validate_request(k_t0, ping_request()), errc::malformed, "got none");
  }
  SECTION("signed by a key other than the token's") {
    resign(request, s.mallory_key);
    require_error(s.bob.validate_request(k_t0, request), errc::crypto, "does not verify");
  }
  SECTION("expired token") {
    auto old = dht::issue_access_token(s.authority, "alice", s.alice_key.public_key(), k_t0 - 1);
    REQUIRE(old.ok());
    TokenAuthorizer stale{s.alice_key,
                          std::make_shared<FixedTokenIssuer>(*old, s.authority.public_key()),
                          counter_nonces('s')};
    auto stale_request = ping_request();
    REQUIRE(stale.sign_request(k_t0, stale_request).ok());
    require_error(s.bob.validate_request(k_t0, stale_request), errc::protocol, "expired");
  }
  SECTION("token from another authority") {
    TokenAuthorizer carol{s.mallory_key, issuer_for(s.other_authority, "carol", s.mallory_key),
                          counter_nonces('c')};
    auto carol_request = ping_request();
    REQUIRE(carol.sign_request(k_t0, carol_request).ok());
    require_error(s.bob.validate_request(k_t0, carol_request), errc::crypto, "authority");
  }
  SECTION("signing time outside the clock skew") {
    CHECK(s.bob.validate_request(k_t0 + dht::k_auth_max_clock_skew, request).ok());
    auto late = ping_request();
    REQUIRE(s.alice.sign_request(k_t0, late).ok());
    require_error(s.bob.validate_request(k_t0 + 60.5, late), errc::protocol, "auth.time");
    auto early = ping_request();
    REQUIRE(s.alice.sign_request(k_t0, early).ok());
    require_error(s.bob.validate_request(k_t0 - 60.5, early), errc::protocol, "auth.time");
    request.mutable_auth()->set_time(std::numeric_limits<double>::quiet_NaN());
    resign(request, s.alice_key);
    require_error(s.bob.validate_request(k_t0, request), errc::protocol, "auth.time");
  }
  SECTION("replayed nonce") {
    REQUIRE(s.bob.validate_request(k_t0, request).ok());
    require_error(s.bob.validate_request(k_t0 + 1, request), errc::protocol, "repeated");
    // A new request that reuses the nonce is a replay too, and a rejected one is not kept.
    auto again = ping_request();
    again.set_validate(false);
    REQUIRE(s.alice.sign_request(k_t0, again).ok());
    *again.mutable_auth()->mutable_nonce() = request.auth().nonce();
    resign(again, s.alice_key);
    require_error(s.bob.validate_request(k_t0 + 2, again), errc::protocol, "repeated");
    CHECK(s.bob.recent_nonces().size(k_t0 + 2) == 1);
  }
  SECTION("nonce of a bad size") {
    request.mutable_auth()->set_nonce("tiny");
    resign(request, s.alice_key);
    require_error(s.bob.validate_request(k_t0, request), errc::malformed, "nonce");
  }
  SECTION("service key of another service") {
    auto to_mallory = ping_request();
    REQUIRE(s.alice.sign_request(k_t0, to_mallory, s.mallory_key.public_key().bytes()).ok());
    require_error(s.bob.validate_request(k_t0, to_mallory), errc::protocol,
                  "service_public_key");
    auto to_bob = ping_request();
    REQUIRE(s.alice.sign_request(k_t0, to_bob, s.bob.public_key().bytes()).ok());
    CHECK(s.bob.validate_request(k_t0, to_bob).ok());
  }
}

TEST_CASE("response validation rejects answers to other requests and services", "[auth]") {
  Swarm s;
  auto first = ping_request();
  auto second = ping_request();
  REQUIRE(s.alice.sign_request(k_t0, first).ok());
  REQUIRE(s.alice.sign_request(k_t0, second).ok());
  REQUIRE(first.auth().nonce() != second.auth().nonce());
  auto response = ping_response();
  REQUIRE(s.bob.sign_response(k_t0, response, first).ok());
  CHECK(s.alice.validate_response(k_t0, response, first).ok());
  require_error(s.alice.validate_response(k_t0, response, second), errc::protocol, "nonce");

  // A request addressed to bob accepts only a response under bob's key.
  auto to_bob = ping_request();
  REQUIRE(s.alice.sign_request(k_t0, to_bob, s.bob.public_key().bytes()).ok());
  TokenAuthorizer impostor{s.mallory_key, issuer_for(s.authority, "mallory", s.mallory_key),
                           counter_nonces('m')};
  auto impostor_response = ping_response();
  REQUIRE(impostor.sign_response(k_t0, impostor_response, to_bob).ok());
  require_error(s.alice.validate_response(k_t0, impostor_response, to_bob), errc::protocol,
                "service_public_key");
  auto bob_response = ping_response();
  REQUIRE(s.bob.sign_response(k_t0, bob_response, to_bob).ok());
  CHECK(s.alice.validate_response(k_t0, bob_response, to_bob).ok());
}

TEST_CASE("the nonce window forgets nonces after their lifetime", "[auth]") {
  dht::NonceWindow window;
  CHECK(window.remember(0, "nonce-01"));
  CHECK_FALSE(window.remember(100, "nonce-01"));
  CHECK(window.remember(100, "nonce-02"));
  CHECK(window.contains(dht::k_auth_nonce_lifetime, "nonce-01"));
  CHECK(window.size(dht::k_auth_nonce_lifetime) == 2);
  CHECK_FALSE(window.contains(dht::k_auth_nonce_lifetime + 0.5, "nonce-01"));
  CHECK(window.size(dht::k_auth_nonce_lifetime + 0.5) == 1);
  CHECK(window.remember(dht::k_auth_nonce_lifetime + 1, "nonce-01"));
  CHECK(window.size(1000) == 0);
}

TEST_CASE("a token is refreshed only when it nears expiry", "[auth]") {
  Swarm s;
  auto counting =
      std::make_shared<CountingIssuer>(issuer_for(s.authority, "alice", s.alice_key, 600));
  TokenAuthorizer alice{s.alice_key, counting, counter_nonces('a')};
  auto request = ping_request();
  REQUIRE(alice.sign_request(k_t0, request).ok());
  const auto first_expiry = request.auth().client_access_token().expiration_time();
  REQUIRE(alice.sign_request(k_t0 + 540, request).ok());  // expires at +600: 60 s left
  CHECK(counting->calls == 1);
  CHECK(request.auth().client_access_token().expiration_time() == first_expiry);
  REQUIRE(alice.sign_request(k_t0 + 540.5, request).ok());  // under 60 s left: refresh
  CHECK(counting->calls == 2);
  CHECK(request.auth().client_access_token().expiration_time() ==
        *dht::format_iso_time(k_t0 + 1140.5));
  CHECK(s.bob.validate_request(k_t0 + 541, request).ok());

  // An issuer whose tokens name another key is a configuration error, caught at signing.
  TokenAuthorizer mismatched{s.mallory_key, issuer_for(s.authority, "alice", s.alice_key),
                             counter_nonces('x')};
  require_error(mismatched.sign_request(k_t0, request), errc::invalid_argument, "key");
}

TEST_CASE("byte helpers sign and check every DHTProtocol handle", "[auth]") {
  Swarm s;
  pb::StoreRequest store_request;
  pb::StoreResponse store_response;
  pb::FindRequest find_request;
  pb::FindResponse find_response;
  fill(store_request);
  fill(store_response);
  fill(find_request);
  fill(find_response);
  const std::pair<std::string, std::pair<std::string, std::string>> rpcs[] = {
      {dht::k_ping_handle,
       {ping_request().SerializeAsString(), ping_response().SerializeAsString()}},
      {dht::k_store_handle,
       {store_request.SerializeAsString(), store_response.SerializeAsString()}},
      {dht::k_find_handle, {find_request.SerializeAsString(), find_response.SerializeAsString()}}};
  for (const auto& [handle, bytes] : rpcs) {
    INFO(handle);
    const auto& [request, response] = bytes;
    auto signed_request = dht::sign_outbound_request(&s.alice, k_t0, handle, request);
    REQUIRE(signed_request.ok());
    CHECK(*signed_request != request);
    auto served = dht::authorize_inbound(&s.bob, k_t0, handle, *signed_request);
    REQUIRE(served.ok());
    CHECK(*served == *signed_request);
    CHECK_FALSE(dht::authorize_inbound(&s.bob, k_t0, handle, *signed_request).ok());  // replay
    CHECK_FALSE(dht::authorize_inbound(&s.bob, k_t0, handle, request).ok());          // unsigned
    auto signed_response =
        dht::sign_outbound_response(&s.bob, k_t0, handle, *signed_request, response);
    REQUIRE(signed_response.ok());
    auto accepted =
        dht::validate_inbound_response(&s.alice, k_t0, handle, *signed_request, *signed_response);
    REQUIRE(accepted.ok());
    CHECK(*accepted == *signed_response);
    CHECK_FALSE(dht::validate_inbound_response(&s.alice, k_t0, handle, *signed_request, response)
                    .ok());
    // Without an authorizer the bytes pass unchanged.
    CHECK(*dht::sign_outbound_request(nullptr, k_t0, handle, request) == request);
    CHECK(*dht::authorize_inbound(nullptr, k_t0, handle, request) == request);
    CHECK(*dht::sign_outbound_response(nullptr, k_t0, handle, request, response) == response);
    CHECK(*dht::validate_inbound_response(nullptr, k_t0, handle, request, response) == response);
  }
  CHECK(dht::authorize_inbound(&s.bob, k_t0, "DHTProtocol.rpc_nope", "").error().code ==
        errc::not_found);
  CHECK(dht::authorize_inbound(&s.bob, k_t0, dht::k_ping_handle, "\xff\xff").error().code ==
        errc::malformed);
}
