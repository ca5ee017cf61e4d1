#pragma once
/// Request/response authorization of DHTProtocol (hivemind's utils/auth.py, reference §5):
/// a client signs each request with the key its access token names, a service validates
/// it (token, signature, intended service, clock skew, replayed nonce) before serving,
/// signs its response and the client validates that too. Pure: DHT time (seconds, as
/// `get_dht_time`) comes in as `now`; nonces come from a caller-supplied generator.
///
/// Differences from hivemind, on purpose:
/// - Keys and signatures are Ed25519 (upstream: RSA-2048 PSS, base64 signatures).
///   Token public keys are the raw 32-byte key (upstream: OpenSSH text).
/// - A request time that is NaN or infinite is rejected (upstream's `abs(t - now) > 60`
///   is false for NaN, so a NaN time passed the skew check).
/// - A nonce must be 8 to 64 bytes (upstream: any length, even empty), which bounds the
///   memory a replay store entry takes.
/// - A token's authority signature covers `username 0x00 public_key 0x00
///   expiration_time` with a 32-byte key and no NUL in the username, so the fields cannot
///   be re-split (upstream signs `f"{username} {public_key!r} {expiration_time}"`).
/// - AuthorityTokenIssuer's default token lifetime (600 s) exceeds the refresh margin
///   (60 s); upstream's mock issues 60 s tokens with a 60 s margin, so every request
///   minted a new token.
/// - When a request named the service it meant to reach (service_public_key), the
///   response is accepted only from a token holding that key (upstream does not check).
/// - Signatures cover the message serialized deterministically by C++ protobuf (fields
///   in number order, unknown fields last), as upstream's Python serializer does.
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <google/protobuf/message_lite.h>

#include "auth.pb.h"
#include "core/dht/timed_storage.hpp"
#include "messages/identity/ed25519.hpp"
#include "messages/result.hpp"

namespace apiary::core::dht {

/// Largest difference between a request's signing time and the service's clock, seconds.
inline constexpr double k_auth_max_clock_skew = 60.0;
/// How long a service remembers a nonce, seconds; above 2 × the skew, so a replay is
/// caught by the nonce store while its time is still within the skew.
inline constexpr double k_auth_nonce_lifetime = 180.0;
/// Size of the nonces this module draws, bytes (as upstream).
inline constexpr std::size_t k_auth_nonce_size = 8;
/// Smallest nonce a service accepts, bytes.
inline constexpr std::size_t k_auth_min_nonce_size = 8;
/// Largest nonce a service accepts, bytes (bounds a replay-store entry).
inline constexpr std::size_t k_auth_max_nonce_size = 64;
/// A token expiring within this many seconds is refreshed before signing (as upstream).
inline constexpr double k_token_refresh_margin = 60.0;
/// Lifetime of the tokens AuthorityTokenIssuer mints by default, seconds.
inline constexpr double k_default_token_lifetime = 600.0;

/// `message` serialized deterministically (fields in number order): the bytes signed.
[[nodiscard]] Result<std::string> serialize_deterministic(
    const google::protobuf::MessageLite& message);

/// DHT time (Unix seconds) as naive ISO-8601 UTC with microseconds,
/// "2026-11-30T15:38:46.123456", the AccessToken.expiration_time form. Errors:
/// errc::invalid_argument outside years 1..9999 or for NaN.
[[nodiscard]] Result<std::string> format_iso_time(double seconds);
/// Unix seconds of "YYYY-MM-DD[T or space]HH:MM:SS[.1 to 6 digits]" (naive UTC, no
/// zone suffix; Python's `str(datetime)` form is accepted). Errors: errc::malformed.
[[nodiscard]] Result<double> parse_iso_time(std::string_view text);

/// Issues and checks access tokens: the application-defined part of authorization
/// (hivemind issue #253, "moderated network"). Plug your own to control who may join.
class TokenIssuer {
 public:
  virtual ~TokenIssuer() = default;
  /// A fresh token for the local holder, minted at `now` (DHT seconds).
  [[nodiscard]] virtual Result<pb::AccessToken> get_token(double now) = 0;
  /// OK iff `token` is valid at `now`; otherwise an error saying what is wrong.
  [[nodiscard]] virtual Status is_token_valid(double now,
                                              const pb::AccessToken& token) const = 0;
  /// True when the holder should fetch a new token before using `token` at `now`.
  [[nodiscard]] virtual bool does_token_need_refreshing(
      double now, const pb::AccessToken& token) const = 0;
};

/// The bytes an authority signs for `token`: username 0x00 public_key 0x00 expiration_time.
[[nodiscard]] std::string access_token_signed_bytes(const pb::AccessToken& token);

/// A token for `username` holding `holder`, valid until `expiration_time` (DHT seconds,
/// written as ISO-8601), signed by `authority`. Errors: errc::invalid_argument for a
/// username holding a NUL byte or a time out of range; errc::crypto from signing.
[[nodiscard]] Result<pb::AccessToken> issue_access_token(
    const messages::Ed25519PrivateKey& authority, const std::string& username,
    const messages::Ed25519PublicKey& holder, double expiration_time);

/// OK iff `token` is well formed (32-byte key, NUL-free username, ISO time), signed by
/// `authority` and not expired at `now` (valid while expiration >= now).
[[nodiscard]] Status verify_access_token(const messages::Ed25519PublicKey& authority,
                                         double now, const pb::AccessToken& token);

/// A token issuer that holds the authority key itself (tests, single-operator swarms):
/// mints tokens of `lifetime` seconds for one holder; accepts any token the same
/// authority signed; refreshes tokens expiring within k_token_refresh_margin.
class AuthorityTokenIssuer final : public TokenIssuer {
 public:
  /// An issuer for `username` holding `holder`. Errors: errc::invalid_argument when
  /// `lifetime` (seconds) is not above k_token_refresh_margin or the username has a NUL.
  [[nodiscard]] static Result<AuthorityTokenIssuer> create(
      messages::Ed25519PrivateKey authority, std::string username,
      messages::Ed25519PublicKey holder, double lifetime = k_default_token_lifetime);

  /// A token expiring at now + lifetime.
  [[nodiscard]] Result<pb::AccessToken> get_token(double now) override;
  /// verify_access_token against this issuer's authority.
  [[nodiscard]] Status is_token_valid(double now, const pb::AccessToken& token) const override;
  /// True when `token` expires before now + k_token_refresh_margin (or is unreadable).
  [[nodiscard]] bool does_token_need_refreshing(double now,
                                                const pb::AccessToken& token) const override;

 private:
  AuthorityTokenIssuer(messages::Ed25519PrivateKey authority, std::string username,
                       messages::Ed25519PublicKey holder, double lifetime)
      : authority_(std::move(authority)),
        username_(std::move(username)),
        holder_(std::move(holder)),
        lifetime_(lifetime) {}

  messages::Ed25519PrivateKey authority_;
  std::string username_;
  messages::Ed25519PublicKey holder_;
  double lifetime_;
};

/// Nonces seen in the last k_auth_nonce_lifetime seconds: a service's replay store.
class NonceWindow {
 public:
  /// Remembers `nonce` until now + k_auth_nonce_lifetime; false (and nothing changes)
  /// when it is already remembered at `now`.
  bool remember(double now, const std::string& nonce);
  /// True when `nonce` is remembered at `now`.
  [[nodiscard]] bool contains(double now, const std::string& nonce);
  /// Nonces still remembered at `now`; forgotten ones are dropped first.
  [[nodiscard]] std::size_t size(double now);

 private:
  TimedStorage<std::string, bool> nonces_;
};

/// Signs and validates the `auth` field of DHTProtocol requests and responses (any
/// message type with a RequestAuthInfo / ResponseAuthInfo field named `auth`).
/// Signatures cover the whole message serialized with `auth.signature` empty.
class Authorizer {
 public:
  virtual ~Authorizer() = default;

  /// Fills `request.auth` and signs `request` at `now` for the service holding
  /// `service_public_key` (raw 32 bytes; empty: any service).
  template <class Request>
  [[nodiscard]] Status sign_request(double now, Request& request,
                                    std::string_view service_public_key = {}) {
    return sign_request_auth(now, *request.mutable_auth(), service_public_key,
                             [&request] { return serialize_deterministic(request); });
  }
  /// OK iff `request` is authorized at `now`; a service calls it before serving.
  template <class Request>
  [[nodiscard]] Status validate_request(double now, const Request& request) {
    auto bytes = unsigned_bytes(request);
    if (!bytes) return bytes.error();
    return validate_request_auth(now, request.auth(), *bytes);
  }
  /// Fills `response.auth` and signs `response` to `request` at `now`.
  template <class Response, class Request>
  [[nodiscard]] Status sign_response(double now, Response& response, const Request& request) {
    return sign_response_auth(now, *response.mutable_auth(), request.auth(),
                              [&response] { return serialize_deterministic(response); });
  }
  /// OK iff `response` is an authorized answer to `request` at `now`.
  template <class Response, class Request>
  [[nodiscard]] Status validate_response(double now, const Response& response,
                                         const Request& request) {
    auto bytes = unsigned_bytes(response);
    if (!bytes) return bytes.error();
    return validate_response_auth(now, response.auth(), request.auth(), *bytes);
  }

 protected:
  /// Serializes the message whose `auth` is being signed (its signature empty).
  using SerializeUnsigned = std::function<Result<std::string>()>;

 private:
  /// `message` serialized with its auth signature (if any) cleared.
  template <class Message>
  static Result<std::string> unsigned_bytes(const Message& message) {
    if (!message.has_auth()) return serialize_deterministic(message);
    Message copy = message;
    copy.mutable_auth()->clear_signature();
    return serialize_deterministic(copy);
  }

  /// Fills `auth` (signature last, over serialize_unsigned()).
  virtual Status sign_request_auth(double now, pb::RequestAuthInfo& auth,
                                   std::string_view service_public_key,
                                   const SerializeUnsigned& serialize_unsigned) = 0;
  /// Checks `auth` of a request whose unsigned serialization is `unsigned_request`.
  virtual Status validate_request_auth(double now, const pb::RequestAuthInfo& auth,
                                       std::string_view unsigned_request) = 0;
  /// Fills `auth` of a response to a request carrying `request_auth`.
  virtual Status sign_response_auth(double now, pb::ResponseAuthInfo& auth,
                                    const pb::RequestAuthInfo& request_auth,
                                    const SerializeUnsigned& serialize_unsigned) = 0;
  /// Checks `auth` of a response (unsigned serialization `unsigned_response`).
  virtual Status validate_response_auth(double now, const pb::ResponseAuthInfo& auth,
                                        const pb::RequestAuthInfo& request_auth,
                                        std::string_view unsigned_response) = 0;
};

/// Returns `k_auth_nonce_size` random bytes per call (e.g. a lambda over an injected RNG).
using NonceSource = std::function<std::string()>;

/// hivemind's TokenAuthorizerBase: signs with the local Ed25519 key under a token from a
/// TokenIssuer, validates peers' tokens with the same issuer, and rejects replays.
class TokenAuthorizer final : public Authorizer {
 public:
  /// An authorizer signing with `local_key`, holding tokens from `issuer` (non-null),
  /// drawing request nonces from `next_nonce`.
  TokenAuthorizer(messages::Ed25519PrivateKey local_key, std::shared_ptr<TokenIssuer> issuer,
                  NonceSource next_nonce);

  /// The key this authorizer signs with; services compare service_public_key to it.
  [[nodiscard]] const messages::Ed25519PublicKey& public_key() const {
    return local_key_.public_key();
  }
  /// The local token at `now`, fetched again from the issuer when it needs refreshing.
  /// Errors: the issuer's, or errc::invalid_argument if the token names another key.
  [[nodiscard]] Result<pb::AccessToken> token(double now);
  /// The replay store of nonces accepted from clients.
  [[nodiscard]] NonceWindow& recent_nonces() { return recent_nonces_; }

 private:
  Status sign_request_auth(double now, pb::RequestAuthInfo& auth,
                           std::string_view service_public_key,
                           const SerializeUnsigned& serialize_unsigned) override;
  Status validate_request_auth(double now, const pb::RequestAuthInfo& auth,
                               std::string_view unsigned_request) override;
  Status sign_response_auth(double now, pb::ResponseAuthInfo& auth,
                            const pb::RequestAuthInfo& request_auth,
                            const SerializeUnsigned& serialize_unsigned) override;
  Status validate_response_auth(double now, const pb::ResponseAuthInfo& auth,
                                const pb::RequestAuthInfo& request_auth,
                                std::string_view unsigned_response) override;
  /// OK iff `token` is valid and `signature` is its holder's over `message`; errors
  /// name `what` ("request", "response").
  Status check_signed(double now, const pb::AccessToken& token, std::string_view message,
                      std::string_view signature, const char* what) const;
  /// Clears `auth`'s signature, then signs the message as `serialize_unsigned` writes it
  /// and stores the signature in `auth`.
  template <class AuthInfo>
  Status sign_into(AuthInfo& auth, const SerializeUnsigned& serialize_unsigned) const {
    auth.clear_signature();
    auto bytes = serialize_unsigned();
    if (!bytes) return bytes.error();
    auto signature = local_key_.sign(*bytes);
    if (!signature) return signature.error();
    auth.set_signature(std::move(*signature));
    return ok_status();
  }

  messages::Ed25519PrivateKey local_key_;
  std::shared_ptr<TokenIssuer> issuer_;
  NonceSource next_nonce_;
  std::optional<pb::AccessToken> token_;
  NonceWindow recent_nonces_;
};

// Byte-level helpers for a DHT node. `handle` is one of k_ping_handle, k_store_handle,
// k_find_handle (core/dht/protocol.hpp); other handles give errc::not_found. With a null
// `authorizer` each returns its input bytes unchanged and checks nothing.

/// The request re-serialized with its auth filled and signed (client, before sending).
[[nodiscard]] Result<std::string> sign_outbound_request(Authorizer* authorizer, double now,
                                                        const std::string& handle,
                                                        const std::string& request_bytes,
                                                        std::string_view service_public_key = {});
/// `request_bytes` if the request is authorized (service, before serving); an error means
/// "do not serve, answer with an error".
[[nodiscard]] Result<std::string> authorize_inbound(Authorizer* authorizer, double now,
                                                    const std::string& handle,
                                                    const std::string& request_bytes);
/// The response re-serialized with its auth filled and signed (service, after serving).
[[nodiscard]] Result<std::string> sign_outbound_response(Authorizer* authorizer, double now,
                                                         const std::string& handle,
                                                         const std::string& request_bytes,
                                                         const std::string& response_bytes);
/// `response_bytes` if it is an authorized answer to the request (client, on receipt);
/// an error means "treat as no response".
[[nodiscard]] Result<std::string> validate_inbound_response(Authorizer* authorizer, double now,
                                                            const std::string& handle,
                                                            const std::string& request_bytes,
                                                            const std::string& response_bytes);

}  // namespace apiary::core::dht
