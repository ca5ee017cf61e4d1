#pragma once
/// Ed25519 keys (RFC 8032) on OpenSSL 3: every node's identity and request signatures.
/// Byte strings (keys, seeds, signatures, messages) are std::string, as in protobuf.
#include <openssl/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "messages/result.hpp"

namespace apiary::messages {

/// Size of a raw Ed25519 public key, in bytes.
inline constexpr std::size_t ed25519_public_key_size = 32;
/// Size of an Ed25519 private seed (the RFC 8032 "secret key"), in bytes.
inline constexpr std::size_t ed25519_seed_size = 32;
/// Size of an Ed25519 signature, in bytes.
inline constexpr std::size_t ed25519_signature_size = 64;

/// An Ed25519 public key: verifies signatures. Copies share the OpenSSL key.
class Ed25519PublicKey {
 public:
  /// A key from its raw 32 bytes. Errors: errc::invalid_argument on a wrong size,
  /// errc::crypto when OpenSSL refuses the bytes.
  static Result<Ed25519PublicKey> from_bytes(std::string_view raw);

  /// The raw 32-byte public key.
  [[nodiscard]] const std::string& bytes() const { return raw_; }

  /// True iff `signature` (64 bytes) is a valid signature of `message` by this key.
  /// A signature of the wrong size, or any OpenSSL failure, counts as invalid.
  [[nodiscard]] bool verify(std::string_view message, std::string_view signature) const;

  /// Keys are equal when their raw bytes are.
  friend bool operator==(const Ed25519PublicKey& a, const Ed25519PublicKey& b) {
    return a.raw_ == b.raw_;
  }
  friend bool operator!=(const Ed25519PublicKey& a, const Ed25519PublicKey& b) { return !(a == b); }

 private:
  Ed25519PublicKey(std::shared_ptr<EVP_PKEY> pkey, std::string raw)
      : pkey_(std::move(pkey)), raw_(std::move(raw)) {}
  friend class Ed25519PrivateKey;

  std::shared_ptr<EVP_PKEY> pkey_;
  std::string raw_;
};

/// An Ed25519 key pair: signs. Copies share the OpenSSL key; the seed stays inside
/// OpenSSL and is only copied out by seed().
class Ed25519PrivateKey {
 public:
  /// A fresh key from OpenSSL's random generator. Errors: errc::crypto.
  static Result<Ed25519PrivateKey> generate();

  /// The key derived from a 32-byte private seed (RFC 8032 secret key).
  /// Errors: errc::invalid_argument on a wrong size, errc::crypto from OpenSSL.
  static Result<Ed25519PrivateKey> from_seed(std::string_view seed);

  /// The 32-byte private seed. Secret: callers should not log or keep copies.
  [[nodiscard]] std::string seed() const;

  /// The matching public key.
  [[nodiscard]] const Ed25519PublicKey& public_key() const { return public_key_; }

  /// The 64-byte signature of `message` (pure Ed25519, no pre-hash, deterministic).
  /// Errors: errc::crypto when OpenSSL fails.
  [[nodiscard]] Result<std::string> sign(std::string_view message) const;

 private:
  Ed25519PrivateKey(std::shared_ptr<EVP_PKEY> pkey, Ed25519PublicKey public_key)
      : pkey_(std::move(pkey)), public_key_(std::move(public_key)) {}
  static Result<Ed25519PrivateKey> from_pkey(EVP_PKEY* owned);

  std::shared_ptr<EVP_PKEY> pkey_;
  Ed25519PublicKey public_key_;
};

}  // namespace apiary::messages
