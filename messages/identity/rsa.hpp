#pragma once
/// RSA keys as hivemind uses them for record ownership (reference §2.8 and §5): public keys
/// in OpenSSH text form ("ssh-rsa AAAA..."), signatures RSA-PSS with SHA-256, MGF1(SHA-256)
/// and the maximal salt length. apiary signs with Ed25519 unless asked for RSA (a peer
/// owning records the way hivemind's peers do); records signed by hivemind peers verify.
#include <openssl/types.h>

#include <memory>
#include <string>
#include <string_view>

#include "messages/result.hpp"

namespace apiary::messages {

/// An RSA public key: verifies RSA-PSS signatures. Copies share the OpenSSL key.
class RsaPublicKey {
 public:
  /// A key from its OpenSSH text: "ssh-rsa <base64 blob>" with an optional comment after
  /// a second space. Errors: errc::malformed naming what does not parse.
  static Result<RsaPublicKey> from_openssh(std::string_view text);

  /// The OpenSSH text "ssh-rsa <base64 blob>" (no comment).
  [[nodiscard]] const std::string& openssh() const { return openssh_; }

  /// True iff `signature` is an RSA-PSS (SHA-256, MGF1 SHA-256, any salt length) signature
  /// of `message` by this key. Any OpenSSL failure counts as invalid.
  [[nodiscard]] bool verify_pss(std::string_view message, std::string_view signature) const;

 private:
  RsaPublicKey(std::shared_ptr<EVP_PKEY> pkey, std::string openssh)
      : pkey_(std::move(pkey)), openssh_(std::move(openssh)) {}
  friend class RsaPrivateKey;

  std::shared_ptr<EVP_PKEY> pkey_;
  std::string openssh_;
};

/// An RSA key pair: signs with RSA-PSS (maximal salt), as hivemind's RSAPrivateKey does.
class RsaPrivateKey {
 public:
  /// A fresh key of `bits` bits (hivemind: 2048) with e = 65537. Errors: errc::crypto.
  static Result<RsaPrivateKey> generate(int bits = 2048);

  /// A key from its DER bytes (PKCS#1 RSAPrivateKey or PKCS#8). Errors: errc::malformed.
  static Result<RsaPrivateKey> from_der(std::string_view der);

  [[nodiscard]] const RsaPublicKey& public_key() const { return public_key_; }

  /// The key's DER bytes (PKCS#1 RSAPrivateKey, OpenSSL's traditional form). Errors:
  /// errc::crypto.
  [[nodiscard]] Result<std::string> to_der() const;

  /// The RSA-PSS signature of `message`. Errors: errc::crypto.
  [[nodiscard]] Result<std::string> sign_pss(std::string_view message) const;

 private:
  RsaPrivateKey(std::shared_ptr<EVP_PKEY> pkey, RsaPublicKey public_key)
      : pkey_(std::move(pkey)), public_key_(std::move(public_key)) {}

  std::shared_ptr<EVP_PKEY> pkey_;
  RsaPublicKey public_key_;
};

}  // namespace apiary::messages
