#pragma once
/// PeerId: a node's libp2p identity, the multihash of its protobuf-encoded public key.
/// Ed25519 keys are inlined (identity multihash, "12D3KooW..." in base58btc); larger keys,
/// such as hivemind's RSA ids, are sha2-256 hashed ("Qm...") and kept as opaque bytes.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "messages/identity/ed25519.hpp"
#include "messages/result.hpp"

namespace apiary::messages {

/// Multihash code of the identity "hash" (the digest is the input itself).
inline constexpr unsigned char multihash_identity = 0x00;
/// Multihash code of sha2-256.
inline constexpr unsigned char multihash_sha2_256 = 0x12;
/// Longest digest libp2p inlines with the identity multihash, in bytes.
inline constexpr std::size_t max_inline_key_size = 42;

/// A libp2p PeerID: validated multihash bytes, ordered and hashed by those bytes.
class PeerId {
 public:
  /// The empty id: a placeholder that no parser returns (check with empty()).
  PeerId() = default;

  /// The id of an Ed25519 key: 00 24 08 01 12 20 <32-byte key>.
  static PeerId from_public_key(const Ed25519PublicKey& key);

  /// An id from its multihash bytes (as in protobuf `peer_id` fields). Accepts the
  /// identity multihash (0x00, length, 1-42 bytes) and sha2-256 (0x12 0x20, 32 bytes).
  /// Errors: errc::malformed saying which part is wrong.
  static Result<PeerId> from_bytes(std::string_view bytes);

  /// An id from its base58btc text ("12D3KooW...", "Qm..."). Errors: errc::malformed.
  static Result<PeerId> from_string(std::string_view text);

  /// The multihash bytes.
  [[nodiscard]] const std::string& bytes() const { return bytes_; }

  /// The base58btc text, as libp2p prints it.
  [[nodiscard]] std::string to_string() const;

  /// True for the default-constructed placeholder.
  [[nodiscard]] bool empty() const { return bytes_.empty(); }

  /// The Ed25519 key inlined in an identity-multihash id. Errors: errc::unsupported
  /// for hashed ids (the key must come from elsewhere) and inlined non-Ed25519 keys,
  /// errc::malformed if the inlined bytes are not a libp2p PublicKey.
  [[nodiscard]] Result<Ed25519PublicKey> public_key() const;

  friend bool operator==(const PeerId& a, const PeerId& b) { return a.bytes_ == b.bytes_; }
  friend bool operator!=(const PeerId& a, const PeerId& b) { return a.bytes_ != b.bytes_; }
  friend bool operator<(const PeerId& a, const PeerId& b) { return a.bytes_ < b.bytes_; }
  friend bool operator>(const PeerId& a, const PeerId& b) { return a.bytes_ > b.bytes_; }
  friend bool operator<=(const PeerId& a, const PeerId& b) { return a.bytes_ <= b.bytes_; }
  friend bool operator>=(const PeerId& a, const PeerId& b) { return a.bytes_ >= b.bytes_; }

 private:
  explicit PeerId(std::string bytes) : bytes_(std::move(bytes)) {}

  std::string bytes_;
};

}  // namespace apiary::messages

namespace std {
/// Hashes a PeerId by its bytes, for unordered containers.
template <>
struct hash<apiary::messages::PeerId> {
  std::size_t operator()(const apiary::messages::PeerId& id) const noexcept {
    return std::hash<std::string>{}(id.bytes());
  }
};
}  // namespace std
