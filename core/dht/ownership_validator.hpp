#pragma once
/// Owner-protected records (hivemind's RSASignatureValidator, reference §2.8, with
/// Ed25519 keys): a record whose key or subkey names an owner must carry that owner's
/// signature, so only the owner can write under such a (sub)key.
///
/// Text forms, all inside the record's bytes:
/// - owner marker `[owner:<base64 of the 32 raw Ed25519 public key bytes>]` (standard
///   base64 alphabet with '=' padding, 44 characters), in the key or the subkey;
/// - signature marker `[signature:<base64 of the 64-byte signature>]`, appended to the
///   value.
/// The signed message is msgpack(tuple ext 0x40 of [bin key, bin subkey, bin value
/// without signature markers, float64 expiration]).
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/dht/validation.hpp"
#include "messages/identity/ed25519.hpp"
#include "messages/identity/rsa.hpp"

namespace apiary::core::dht {

/// Checks owner signatures; signs records that name its own key.
class OwnershipValidator final : public RecordValidator {
 public:
  /// A validator that signs with `private_key` (validation needs no key of its own).
  explicit OwnershipValidator(messages::Ed25519PrivateKey private_key);
  /// A validator that signs with an RSA key, as hivemind's RSASignatureValidator: its owner
  /// marker is "[owner:ssh-rsa <base64>]", its signatures RSA-PSS SHA-256.
  explicit OwnershipValidator(messages::RsaPrivateKey private_key);

  /// The owner marker naming `public_key`: "[owner:" + base64(raw 32 bytes) + "]".
  [[nodiscard]] static std::string owner_marker(const messages::Ed25519PublicKey& public_key);
  /// The signature marker carrying `signature`: "[signature:" + base64 + "]".
  [[nodiscard]] static std::string signature_marker(std::string_view signature);
  /// The bytes an owner signs for `record` (its value taken as given, not stripped).
  [[nodiscard]] static std::string signed_message(const DhtRecord& record);

  /// The owner marker naming an RSA `public_key`: "[owner:" + its OpenSSH text + "]".
  [[nodiscard]] static std::string owner_marker(const messages::RsaPublicKey& public_key);

  /// The owner marker of this validator's own public key.
  [[nodiscard]] const std::string& own_marker() const { return signers_.front().marker; }

  /// True when neither key nor subkey holds an owner marker. Otherwise true iff every
  /// owner marker in key and subkey names the same valid public key, the value holds
  /// exactly one signature marker, and its signature verifies over signed_message of the
  /// record with the value stripped. An owner named "ssh-rsa <base64>" (hivemind's OpenSSH
  /// RSA key text) needs an RSA-PSS SHA-256 signature instead of an Ed25519 one.
  [[nodiscard]] bool validate(const DhtRecord& record) const override;

  /// The stripped value plus a signature marker when key or subkey holds the owner marker
  /// of one of this validator's keys (signed with that key); the value unchanged
  /// otherwise. Errors: errc::crypto.
  [[nodiscard]] Result<std::string> sign_value(const DhtRecord& record) const override;

  /// The value with every signature marker removed.
  [[nodiscard]] std::string strip_value(const DhtRecord& record) const override;

  /// 10: signatures are checked and stripped before schemas look at a value.
  [[nodiscard]] int priority() const override { return 10; }

  /// Absorbs any other OwnershipValidator, keys included: records naming either
  /// validator's key are signed with that key (upstream keeps only the first key, which
  /// its process-wide key makes the same; here validators of several keys may share a
  /// node, e.g. a trainer's and a progress tracker's).
  [[nodiscard]] bool merge_with(const RecordValidator& other) override;

 private:
  struct Signer {
    std::variant<messages::Ed25519PrivateKey, messages::RsaPrivateKey> key;
    std::string marker;  ///< the owner marker of its public key
  };
  std::vector<Signer> signers_;  ///< this validator's key first, then those of merged ones
};

/// Standard base64 (RFC 4648 §4) with '=' padding.
[[nodiscard]] std::string base64_encode(std::string_view bytes);
/// Decodes canonical padded base64; errc::malformed on any other character, a length
/// that is not a multiple of 4, misplaced padding or non-zero trailing bits.
[[nodiscard]] Result<std::string> base64_decode(std::string_view text);

}  // namespace apiary::core::dht
