#pragma once
/// Authorization of every call between peers (hivemind's utils/auth.py, reference §5,
/// moved from the DHT's messages into the RPC layer): a caller puts a signed
/// RequestAuthInfo on each call's OPEN frame, the callee's gateway checks it before any
/// service sees the call (token, signature, intended service, ±60 s clock skew,
/// replayed nonce), answers with a signed ResponseAuthInfo on its first message, and
/// the caller checks that before its service sees the answer. Every service on a
/// gateway with an authorizer is covered alike: the DHT, averaging and state download,
/// the PS, collectives and their bootstrap, ping, experts.
///
/// Pure: time (Unix seconds, as hivemind's `get_dht_time`) comes in as `now`; nonces
/// come from a caller-supplied source.
///
/// What a signature covers. The call's statement, not its message bytes: the handle
/// called, the caller's PeerID (which must be the token holder's), the service key the
/// caller meant (empty: any), the time and the nonce; the response's statement names the
/// handle, the caller and the request's nonce. The messages themselves are protected by
/// the connection (Noise XX: their integrity, and the caller's PeerID proven by its key),
/// so a 100 MiB push costs one signature, not a hash of 100 MiB (and over an encrypted
/// connection the callee need not verify it: CallParties::channel_proves_caller); over `--insecure`
/// connections an on-path attacker could change messages, authorized or not (see
/// transport/README.md, "Threat model").
///
/// Differences from hivemind, on purpose:
/// - Keys and signatures are Ed25519 (upstream: RSA-2048 PSS, base64 signatures).
///   Token public keys are the raw 32-byte key (upstream: OpenSSH text).
/// - Every service is authorized (upstream: only DHTProtocol), and a request is bound to
///   the caller's proven PeerID, so a member that receives a request cannot replay it to
///   another service as the original caller.
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
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "auth.pb.h"
#include "core/dht/timed_storage.hpp"
#include "messages/identity/ed25519.hpp"
#include "messages/result.hpp"

namespace apiary::core::rpc {

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
/// How long a TokenAuthorizer believes a peer's token it found valid without asking its
/// issuer again, seconds (never past the token's expiration): a token its issuer stops
/// accepting is refused at most this long after.
inline constexpr double k_token_belief = 60.0;
/// Most peers' tokens a TokenAuthorizer remembers as valid.
inline constexpr std::size_t k_max_believed_tokens = 4096;

/// Unix seconds as naive ISO-8601 UTC with microseconds, "2026-11-30T15:38:46.123456",
/// the AccessToken.expiration_time form. Errors: errc::invalid_argument outside years
/// 1..9999 or for NaN.
[[nodiscard]] Result<std::string> format_iso_time(double seconds);
/// Unix seconds of "YYYY-MM-DD[T or space]HH:MM:SS[.1 to 6 digits]" (naive UTC, no
/// zone suffix; Python's `str(datetime)` form is accepted). Errors: errc::malformed.
[[nodiscard]] Result<double> parse_iso_time(std::string_view text);

/// Issues and checks access tokens: the application-defined part of authorization
/// (hivemind issue #253, "moderated network"). Plug your own to control who may join.
class TokenIssuer {
 public:
  virtual ~TokenIssuer() = default;
  /// A fresh token for the local holder, minted at `now` (Unix seconds).
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

/// A token for `username` holding `holder`, valid until `expiration_time` (Unix seconds,
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
  dht::TimedStorage<std::string, bool> nonces_;
};

/// The parties of one call, as its authorization binds them.
struct CallParties {
  std::string handle;  ///< the handle called, as on the wire ("rpc_x@<PeerID>" included)
  std::string caller;  ///< the caller's PeerID bytes (the OPEN's, proven on encrypted connections)
  std::string callee;  ///< the callee's PeerID bytes when the caller named it, else empty
  /// Callee: the connection proved `caller` and protects what it carries (an encrypted
  /// connection: Noise binds every frame to the proven PeerID and stops replays and
  /// changes), so the request's signature adds nothing and is not verified; the token,
  /// its holder being the caller, the service, the time and the nonce still are.
  bool channel_proves_caller = false;
};

/// Signs and checks the authorization of calls, for one local identity. A gateway holds
/// one per identity it serves and calls as (actors::Gateway::authorize).
class Authorizer {
 public:
  virtual ~Authorizer() = default;
  /// The PeerID bytes of the identity this authorizer speaks for.
  [[nodiscard]] virtual const std::string& peer_id() const = 0;
  /// Caller: the authorization of a call this identity opens, at `now`.
  [[nodiscard]] virtual Result<pb::RequestAuthInfo> sign_request(double now, const CallParties& call) = 0;
  /// Callee: OK iff `auth` authorizes `call` at `now` (remembering its nonce); an error
  /// says why not, and the call is refused with it.
  [[nodiscard]] virtual Status check_request(double now, const CallParties& call,
                                             const pb::RequestAuthInfo& auth) = 0;
  /// Callee: the authorization of its first answer to `call`, whose request carried `request`.
  [[nodiscard]] virtual Result<pb::ResponseAuthInfo> sign_response(double now, const CallParties& call,
                                                                   const pb::RequestAuthInfo& request) = 0;
  /// Caller: OK iff `auth` on the first answer to `call` comes from a member holding the
  /// key `request` named (if it named one) and echoes its nonce.
  [[nodiscard]] virtual Status check_response(double now, const CallParties& call,
                                              const pb::RequestAuthInfo& request,
                                              const pb::ResponseAuthInfo& auth) = 0;
};

/// Returns `k_auth_nonce_size` random bytes per call (e.g. a lambda over an injected RNG).
using NonceSource = std::function<std::string()>;

/// The bytes a caller signs for `call` under `auth` (its signature left out): a domain
/// tag, then each of handle, caller, service key, time, nonce and the token's key,
/// length-prefixed so no field can be re-split into another.
[[nodiscard]] std::string request_statement(const CallParties& call, const pb::RequestAuthInfo& auth);
/// The bytes a service signs answering `call` under `auth` (which echoes the request's nonce).
[[nodiscard]] std::string response_statement(const CallParties& call, const pb::ResponseAuthInfo& auth);

/// hivemind's TokenAuthorizerBase: signs with the local Ed25519 key under a token from a
/// TokenIssuer, checks peers' tokens with the same issuer, and rejects replays. A peer's
/// token found valid is believed for k_token_belief seconds (or until it expires), so a
/// call costs one signature check on each side, not two.
class TokenAuthorizer final : public Authorizer {
 public:
  /// An authorizer signing with `local_key`, holding tokens from `issuer` (non-null),
  /// drawing request nonces from `next_nonce`.
  TokenAuthorizer(messages::Ed25519PrivateKey local_key, std::shared_ptr<TokenIssuer> issuer,
                  NonceSource next_nonce);

  [[nodiscard]] const std::string& peer_id() const override { return peer_id_; }
  /// The key this authorizer signs with; services compare service_public_key to it.
  [[nodiscard]] const messages::Ed25519PublicKey& public_key() const {
    return local_key_.public_key();
  }
  /// The local token at `now`, fetched again from the issuer when it needs refreshing.
  /// Errors: the issuer's, or errc::invalid_argument if the token names another key.
  [[nodiscard]] Result<pb::AccessToken> token(double now);
  /// The replay store of nonces accepted from callers.
  [[nodiscard]] NonceWindow& recent_nonces() { return recent_nonces_; }

  Result<pb::RequestAuthInfo> sign_request(double now, const CallParties& call) override;
  Status check_request(double now, const CallParties& call, const pb::RequestAuthInfo& auth) override;
  Result<pb::ResponseAuthInfo> sign_response(double now, const CallParties& call,
                                             const pb::RequestAuthInfo& request) override;
  Status check_response(double now, const CallParties& call, const pb::RequestAuthInfo& request,
                        const pb::ResponseAuthInfo& auth) override;

 private:
  /// The holder key of `token` if it is valid at `now` and `signature` is its holder's
  /// over `statement`; errors begin with what(), the call named ("request to 'h' from X").
  /// With `verify` false the signature is only required to be there, not checked (the
  /// channel vouches for the sender: CallParties::channel_proves_caller).
  Result<messages::Ed25519PublicKey> check_signed(double now, const pb::AccessToken& token,
                                                  std::string_view statement, std::string_view signature,
                                                  const std::function<std::string()>& what, bool verify = true);
  /// The holder key of `token` if the issuer finds it valid at `now`, or did so within
  /// k_token_belief seconds and it has not expired.
  Result<messages::Ed25519PublicKey> believe(double now, const pb::AccessToken& token);

  messages::Ed25519PrivateKey local_key_;
  std::string peer_id_;
  std::shared_ptr<TokenIssuer> issuer_;
  NonceSource next_nonce_;
  std::optional<pb::AccessToken> token_;
  NonceWindow recent_nonces_;
  /// A peer's token found valid: until when it is believed, and its holder's key.
  struct Believed {
    double until = 0;
    messages::Ed25519PublicKey holder;
  };
  /// Peers' tokens found valid, by their serialization.
  std::map<std::string, Believed> believed_;
};

/// A TokenAuthorizer for `local_key` in a swarm whose members share the authority key
/// `authority` (each mints its own tokens, user name `username`), nonces from `next_nonce`.
/// Errors: AuthorityTokenIssuer::create's.
[[nodiscard]] Result<std::shared_ptr<TokenAuthorizer>> shared_authority_authorizer(
    const messages::Ed25519PrivateKey& authority, const messages::Ed25519PrivateKey& local_key,
    const std::string& username, NonceSource next_nonce);

}  // namespace apiary::core::rpc
