#include "core/rpc/auth.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <utility>

#include "messages/identity/peer_id.hpp"

namespace apiary::core::rpc {

namespace {

using messages::Ed25519PrivateKey;
using messages::Ed25519PublicKey;

constexpr std::int64_t k_seconds_per_day = 86400;

bool is_leap(std::int64_t year) { return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0; }

int days_in_month(std::int64_t year, int month) {
  static constexpr int k_days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && is_leap(year) ? 29 : k_days[month - 1];
}

/// Leap years among 1 .. year - 1 (year >= 1).
std::int64_t leap_years_before(std::int64_t year) {
  const std::int64_t y = year - 1;
  return y / 4 - y / 100 + y / 400;
}

/// Days from 1970-01-01 to year-month-day (proleptic Gregorian, year >= 1).
std::int64_t days_since_epoch(std::int64_t year, int month, int day) {
  std::int64_t days = 365 * (year - 1970) + leap_years_before(year) - leap_years_before(1970);
  for (int m = 1; m < month; ++m) days += days_in_month(year, m);
  return days + day - 1;
}

/// Reads exactly `width` decimal digits at `at`, advancing it; nullopt otherwise.
std::optional<int> read_digits(std::string_view text, std::size_t& at, std::size_t width) {
  if (at + width > text.size()) return std::nullopt;
  int value = 0;
  for (std::size_t i = 0; i < width; ++i) {
    const char c = text[at + i];
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  at += width;
  return value;
}

/// True when `at` holds `c`, advancing past it.
bool read_char(std::string_view text, std::size_t& at, char c) {
  if (at >= text.size() || text[at] != c) return false;
  ++at;
  return true;
}

/// The holder key of `token`, or a malformed error.
Result<Ed25519PublicKey> token_key(const pb::AccessToken& token) {
  auto key = Ed25519PublicKey::from_bytes(token.public_key());
  if (!key) {
    return make_error(errc::malformed,
                      "access token of \"{}\": expected a raw 32-byte Ed25519 public key, got "
                      "{} bytes ({}); the authority must issue tokens naming raw keys",
                      token.username(), token.public_key().size(), key.error().message);
  }
  return key;
}

}  // namespace

Result<std::string> format_iso_time(double seconds) {
  // Whole seconds and microseconds, rounded; 0001-01-01 .. 9999-12-31T23:59:59.999999.
  constexpr std::int64_t k_first = -62135596800;
  constexpr std::int64_t k_last = 253402300799;
  const double whole = std::floor(seconds);
  const bool in_range = whole >= static_cast<double>(k_first) &&
                        whole <= static_cast<double>(k_last);  // false for NaN
  auto total = in_range ? static_cast<std::int64_t>(whole) : k_last + 1;
  auto micros = in_range ? static_cast<std::int64_t>(std::llround((seconds - whole) * 1e6)) : 0;
  if (micros == 1000000) {
    ++total;
    micros = 0;
  }
  if (total > k_last) {
    return make_error(errc::invalid_argument,
                      "expected a time between years 1 and 9999, got {}; pass Unix seconds",
                      seconds);
  }
  // Split into days and seconds of the day (floor division for times before 1970).
  std::int64_t days = total / k_seconds_per_day;
  std::int64_t of_day = total % k_seconds_per_day;
  if (of_day < 0) {
    of_day += k_seconds_per_day;
    --days;
  }
  // Find the year by estimate and correction, then the month by walking.
  std::int64_t year = 1970 + days / 366;
  while (days_since_epoch(year + 1, 1, 1) <= days) ++year;
  while (days_since_epoch(year, 1, 1) > days) --year;
  std::int64_t day_of_year = days - days_since_epoch(year, 1, 1);
  int month = 1;
  while (day_of_year >= days_in_month(year, month)) day_of_year -= days_in_month(year, month++);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}", year, month, day_of_year + 1,
                     of_day / 3600, of_day / 60 % 60, of_day % 60, micros);
}

Result<double> parse_iso_time(std::string_view text) {
  std::size_t at = 0;
  const auto year = read_digits(text, at, 4);
  const bool dash1 = read_char(text, at, '-');
  const auto month = read_digits(text, at, 2);
  const bool dash2 = read_char(text, at, '-');
  const auto day = read_digits(text, at, 2);
  const bool separator = read_char(text, at, 'T') || read_char(text, at, ' ');
  const auto hour = read_digits(text, at, 2);
  const bool colon1 = read_char(text, at, ':');
  const auto minute = read_digits(text, at, 2);
  const bool colon2 = read_char(text, at, ':');
  const auto second = read_digits(text, at, 2);
  double fraction = 0;
  if (read_char(text, at, '.')) {
    double scale = 0.1;
    const std::size_t first = at;
    for (; at < text.size() && at - first < 6 && text[at] >= '0' && text[at] <= '9'; ++at) {
      fraction += (text[at] - '0') * scale;
      scale /= 10;
    }
    if (at == first) at = text.size() + 1;  // a '.' with no digits is malformed
  }
  const bool fields = year && month && day && hour && minute && second && dash1 && dash2 &&
                      separator && colon1 && colon2 && at == text.size();
  if (!fields || *year < 1 || *month < 1 || *month > 12 || *day < 1 ||
      *day > days_in_month(*year, *month) || *hour > 23 || *minute > 59 || *second > 59) {
    return make_error(errc::malformed,
                      "expected a naive UTC time \"YYYY-MM-DDTHH:MM:SS[.ffffff]\", got \"{}\"; "
                      "write expiration times with format_iso_time",
                      text);
  }
  const std::int64_t whole = days_since_epoch(*year, *month, *day) * k_seconds_per_day +
                             *hour * 3600 + *minute * 60 + *second;
  return static_cast<double>(whole) + fraction;
}

std::string access_token_signed_bytes(const pb::AccessToken& token) {
  std::string out = token.username();
  out.push_back('\0');
  out += token.public_key();
  out.push_back('\0');
  out += token.expiration_time();
  return out;
}

Result<pb::AccessToken> issue_access_token(const Ed25519PrivateKey& authority,
                                           const std::string& username,
                                           const Ed25519PublicKey& holder,
                                           double expiration_time) {
  if (username.find('\0') != std::string::npos) {
    return make_error(errc::invalid_argument,
                      "token username: expected no NUL byte, got one in a {}-byte name; "
                      "choose a printable name",
                      username.size());
  }
  auto expiration = format_iso_time(expiration_time);
  if (!expiration) return expiration.error();
  pb::AccessToken token;
  token.set_username(username);
  token.set_public_key(holder.bytes());
  token.set_expiration_time(*expiration);
  auto signature = authority.sign(access_token_signed_bytes(token));
  if (!signature) return signature.error();
  token.set_signature(*signature);
  return token;
}

Status verify_access_token(const Ed25519PublicKey& authority, double now,
                           const pb::AccessToken& token) {
  auto holder = token_key(token);
  if (!holder) return holder.error();
  if (token.username().find('\0') != std::string::npos) {
    return make_error(errc::malformed,
                      "access token: expected a username without NUL bytes, got one; the "
                      "authority must not issue such names");
  }
  if (!authority.verify(access_token_signed_bytes(token), token.signature())) {
    return make_error(errc::crypto,
                      "access token of \"{}\": expected the authority's signature, got one "
                      "that does not verify; get a token from this network's authority",
                      token.username());
  }
  auto expiration = parse_iso_time(token.expiration_time());
  if (!expiration) return expiration.error();
  if (!(now <= *expiration)) {  // also rejects a NaN now
    return make_error(errc::protocol,
                      "access token of \"{}\": expected it unexpired, but it expired at {} "
                      "(Unix time {:.3f}, now {:.3f}); refresh the token",
                      token.username(), token.expiration_time(), *expiration, now);
  }
  return ok_status();
}

Result<AuthorityTokenIssuer> AuthorityTokenIssuer::create(Ed25519PrivateKey authority,
                                                          std::string username,
                                                          Ed25519PublicKey holder,
                                                          double lifetime) {
  if (!(lifetime > k_token_refresh_margin) || std::isinf(lifetime)) {
    return make_error(errc::invalid_argument,
                      "token lifetime: expected finite seconds above the {} s refresh margin, "
                      "got {}; pass a longer lifetime",
                      k_token_refresh_margin, lifetime);
  }
  if (username.find('\0') != std::string::npos) {
    return make_error(errc::invalid_argument,
                      "token username: expected no NUL byte, got one; choose a printable name");
  }
  return AuthorityTokenIssuer(std::move(authority), std::move(username), std::move(holder),
                              lifetime);
}

Result<pb::AccessToken> AuthorityTokenIssuer::get_token(double now) {
  return issue_access_token(authority_, username_, holder_, now + lifetime_);
}

Status AuthorityTokenIssuer::is_token_valid(double now, const pb::AccessToken& token) const {
  return verify_access_token(authority_.public_key(), now, token);
}

bool AuthorityTokenIssuer::does_token_need_refreshing(double now,
                                                      const pb::AccessToken& token) const {
  auto expiration = parse_iso_time(token.expiration_time());
  return !expiration || *expiration < now + k_token_refresh_margin;
}

bool NonceWindow::remember(double now, const std::string& nonce) {
  if (nonces_.contains(now, nonce)) return false;
  return nonces_.store(now, nonce, true, now + k_auth_nonce_lifetime);
}

bool NonceWindow::contains(double now, const std::string& nonce) {
  return nonces_.contains(now, nonce);
}

std::size_t NonceWindow::size(double now) { return nonces_.size(now); }

TokenAuthorizer::TokenAuthorizer(Ed25519PrivateKey local_key, std::shared_ptr<TokenIssuer> issuer,
                                 NonceSource next_nonce)
    : local_key_(std::move(local_key)),
      peer_id_(messages::PeerId::from_public_key(local_key_.public_key()).bytes()),
      issuer_(std::move(issuer)),
      next_nonce_(std::move(next_nonce)) {}

Result<pb::AccessToken> TokenAuthorizer::token(double now) {
  if (!issuer_) {
    return make_error(errc::invalid_argument,
                      "TokenAuthorizer: expected a token issuer, got none; construct it with one");
  }
  if (!token_ || issuer_->does_token_need_refreshing(now, *token_)) {
    auto fresh = issuer_->get_token(now);
    if (!fresh) return fresh.error();
    if (fresh->public_key() != public_key().bytes()) {
      return make_error(errc::invalid_argument,
                        "TokenAuthorizer: expected a token for this node's key, got one for "
                        "another {}-byte key (user \"{}\"); give the issuer this node's public key",
                        fresh->public_key().size(), fresh->username());
    }
    token_ = std::move(*fresh);
  }
  return *token_;
}

namespace {

/// Appends `field` to `out` behind its length (4 bytes, little-endian).
void put_field(std::string& out, std::string_view field) {
  const auto n = static_cast<std::uint32_t>(field.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out.append(field.data(), field.size());
}

/// The 8 bytes of `value`'s IEEE-754 representation, little-endian.
std::string double_bytes(double value) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((bits >> (8 * i)) & 0xff);
  return out;
}

/// The raw Ed25519 key of the PeerID bytes `peer_id`, or "" when it inlines none.
std::string key_of_peer(std::string_view peer_id) {
  if (peer_id.empty()) return {};
  auto id = messages::PeerId::from_bytes(peer_id);
  if (!id) return {};
  auto key = id->public_key();
  return key ? key->bytes() : std::string();
}

/// "request to 'h' from <PeerID>" for error messages.
std::string describe(const char* what, const CallParties& call) {
  auto id = messages::PeerId::from_bytes(call.caller);
  return fmt::format("{} '{}' from {}", what, call.handle, id ? id->to_string() : std::string("an unnamed caller"));
}

}  // namespace

std::string request_statement(const CallParties& call, const pb::RequestAuthInfo& auth) {
  std::string out;
  put_field(out, "apiary.rpc.request/1");
  put_field(out, call.handle);
  put_field(out, call.caller);
  put_field(out, auth.service_public_key());
  put_field(out, double_bytes(auth.time()));
  put_field(out, auth.nonce());
  put_field(out, auth.client_access_token().public_key());
  return out;
}

std::string response_statement(const CallParties& call, const pb::ResponseAuthInfo& auth) {
  std::string out;
  put_field(out, "apiary.rpc.response/1");
  put_field(out, call.handle);
  put_field(out, call.caller);
  put_field(out, auth.nonce());
  put_field(out, auth.service_access_token().public_key());
  return out;
}

Result<pb::RequestAuthInfo> TokenAuthorizer::sign_request(double now, const CallParties& call) {
  auto current = token(now);
  if (!current) return current.error();
  std::string nonce = next_nonce_ ? next_nonce_() : std::string();
  if (nonce.size() != k_auth_nonce_size) {
    return make_error(errc::invalid_argument,
                      "request nonce: expected {} random bytes from the nonce source, got {}; "
                      "fix the NonceSource given to TokenAuthorizer",
                      k_auth_nonce_size, nonce.size());
  }
  pb::RequestAuthInfo auth;
  *auth.mutable_client_access_token() = std::move(*current);
  auth.set_service_public_key(key_of_peer(call.callee));
  auth.set_time(now);
  auth.set_nonce(std::move(nonce));
  auto signature = local_key_.sign(request_statement(call, auth));
  if (!signature) return signature.error();
  auth.set_signature(std::move(*signature));
  return auth;
}

Result<Ed25519PublicKey> TokenAuthorizer::believe(double now, const pb::AccessToken& token) {
  std::string key = token.SerializeAsString();
  if (auto it = believed_.find(key); it != believed_.end()) {
    if (now <= it->second.until) return it->second.holder;
    believed_.erase(it);
  }
  auto valid = issuer_->is_token_valid(now, token);
  if (!valid) return valid.error();
  auto holder = token_key(token);
  if (!holder) return holder.error();
  auto expiration = parse_iso_time(token.expiration_time());
  if (!expiration) return holder;  // valid by its issuer's rules, but not to be remembered
  if (believed_.size() >= k_max_believed_tokens) {
    for (auto it = believed_.begin(); it != believed_.end();) {
      it = it->second.until < now ? believed_.erase(it) : std::next(it);
    }
    if (believed_.size() >= k_max_believed_tokens) believed_.clear();
  }
  believed_.emplace(std::move(key), Believed{std::min(*expiration, now + k_token_belief), *holder});
  return holder;
}

Result<Ed25519PublicKey> TokenAuthorizer::check_signed(double now, const pb::AccessToken& token,
                                                       std::string_view statement, std::string_view signature,
                                                       const std::function<std::string()>& what, bool verify) {
  if (signature.empty()) {
    return make_error(errc::malformed,
                      "{}: expected an auth signature, got none; the sender must sign with an authorizer", what());
  }
  if (!issuer_) {
    return make_error(errc::invalid_argument,
                      "TokenAuthorizer: expected a token issuer, got none; construct it with one");
  }
  auto holder = believe(now, token);
  if (!holder) return Error{holder.error().code, fmt::format("{}: {}", what(), holder.error().message)};
  if (verify && !holder->verify(statement, signature)) {
    return make_error(errc::crypto,
                      "{}: expected a signature by the key in the access token of \"{}\", got one "
                      "that does not verify (tampered or signed by another key); drop it",
                      what(), token.username());
  }
  return holder;
}

Status TokenAuthorizer::check_request(double now, const CallParties& call, const pb::RequestAuthInfo& auth) {
  const auto what = [&call] { return describe("request to", call); };
  if (!auth.has_client_access_token()) {
    return make_error(errc::protocol,
                      "{}: expected an access token, got none; this service admits only members of its "
                      "swarm (start the caller with the swarm's authority)",
                      what());
  }
  // The token is valid and its holder signed this call's statement.
  auto holder = check_signed(now, auth.client_access_token(), request_statement(call, auth), auth.signature(), what,
                             !call.channel_proves_caller);
  if (!holder) return holder.error();
  // The token holder is the caller the connection named (proved, when encrypted).
  if (messages::PeerId::from_public_key(*holder).bytes() != call.caller) {
    return make_error(errc::protocol,
                      "{}: expected the token of the calling peer, got the token of \"{}\", another peer; a "
                      "request is valid only from its signer",
                      what(), auth.client_access_token().username());
  }
  // The caller meant this service (or any).
  if (!auth.service_public_key().empty() && auth.service_public_key() != public_key().bytes()) {
    return make_error(errc::protocol,
                      "{}: expected service_public_key empty or this service's key, got another {}-byte key; "
                      "the caller addressed another service",
                      what(), auth.service_public_key().size());
  }
  // It was signed recently by the service's clock.
  if (!(std::fabs(auth.time() - now) <= k_auth_max_clock_skew)) {  // false for NaN
    return make_error(errc::protocol,
                      "{}: expected auth.time within {} s of now {:.3f}, got {}; sync the caller's clock",
                      what(), k_auth_max_clock_skew, now, auth.time());
  }
  // The nonce is fresh: not seen within the nonce lifetime.
  if (auth.nonce().size() < k_auth_min_nonce_size || auth.nonce().size() > k_auth_max_nonce_size) {
    return make_error(errc::malformed,
                      "{}: expected a nonce of {} to {} bytes, got {}; draw {} random bytes per request", what(),
                      k_auth_min_nonce_size, k_auth_max_nonce_size, auth.nonce().size(), k_auth_nonce_size);
  }
  if (!recent_nonces_.remember(now, auth.nonce())) {
    return make_error(errc::protocol,
                      "{}: expected a nonce not used in the last {} s, got a repeated one (a replayed "
                      "request); sign each request afresh",
                      what(), k_auth_nonce_lifetime);
  }
  return ok_status();
}

Result<pb::ResponseAuthInfo> TokenAuthorizer::sign_response(double now, const CallParties& call,
                                                           const pb::RequestAuthInfo& request) {
  auto current = token(now);
  if (!current) return current.error();
  pb::ResponseAuthInfo auth;
  *auth.mutable_service_access_token() = std::move(*current);
  auth.set_nonce(request.nonce());
  auto signature = local_key_.sign(response_statement(call, auth));
  if (!signature) return signature.error();
  auth.set_signature(std::move(*signature));
  return auth;
}

Status TokenAuthorizer::check_response(double now, const CallParties& call, const pb::RequestAuthInfo& request,
                                       const pb::ResponseAuthInfo& auth) {
  const auto what = [&call] { return fmt::format("response of '{}'", call.handle); };
  if (!auth.has_service_access_token()) {
    return make_error(errc::protocol,
                      "{}: expected the service's access token, got none; the service is not a member of "
                      "this swarm (or runs without authorization)",
                      what());
  }
  // The token is valid and its holder signed the answer.
  if (auto holder = check_signed(now, auth.service_access_token(), response_statement(call, auth), auth.signature(),
                                 what);
      !holder) {
    return holder.error();
  }
  // It answers our request: the nonce is echoed.
  if (auth.nonce() != request.nonce()) {
    return make_error(errc::protocol,
                      "{}: expected the request's {}-byte nonce echoed, got another {}-byte nonce; it "
                      "answers a different request",
                      what(), request.nonce().size(), auth.nonce().size());
  }
  // It comes from the service the request named, if it named one.
  if (!request.service_public_key().empty() &&
      auth.service_access_token().public_key() != request.service_public_key()) {
    return make_error(errc::protocol,
                      "{}: expected a token for the service the request named, got the token of \"{}\" for "
                      "another key; ignore this response",
                      what(), auth.service_access_token().username());
  }
  return ok_status();
}

Result<std::shared_ptr<TokenAuthorizer>> shared_authority_authorizer(const Ed25519PrivateKey& authority,
                                                                     const Ed25519PrivateKey& local_key,
                                                                     const std::string& username,
                                                                     NonceSource next_nonce) {
  auto issuer = AuthorityTokenIssuer::create(authority, username, local_key.public_key());
  if (!issuer) return issuer.error();
  return std::make_shared<TokenAuthorizer>(local_key, std::make_shared<AuthorityTokenIssuer>(std::move(*issuer)),
                                           std::move(next_nonce));
}

}  // namespace apiary::core::rpc
