#pragma once
/// The libp2p key format (crypto.proto, proto2): PublicKey / PrivateKey
/// { required KeyType key_type = 1; required bytes data = 2; }, for Ed25519 keys.
/// Encoded by hand: these two-field messages appear in PeerIDs and key files, and
/// must be byte-identical to libp2p's deterministic encoding.
#include <cstdint>
#include <string>
#include <string_view>

#include "messages/identity/ed25519.hpp"
#include "messages/result.hpp"

namespace apiary::messages {

/// libp2p's KeyType enum values.
enum class libp2p_key_type : std::uint64_t { rsa = 0, ed25519 = 1, secp256k1 = 2, ecdsa = 3 };

/// Size of an encoded Ed25519 PublicKey: 08 01 12 20 <32 bytes>.
inline constexpr std::size_t ed25519_public_key_proto_size = 4 + ed25519_public_key_size;
/// Size of an encoded Ed25519 PrivateKey: 08 01 12 40 <32-byte seed> <32-byte public key>.
inline constexpr std::size_t ed25519_private_key_proto_size =
    4 + ed25519_seed_size + ed25519_public_key_size;

/// PublicKey{key_type=Ed25519, data=<32 raw bytes>}, as libp2p encodes it.
std::string encode_public_key_proto(const Ed25519PublicKey& key);

/// Parses an encoded PublicKey. Errors: errc::malformed (not a PublicKey, wrong data
/// size), errc::unsupported (a key type other than Ed25519, named in the message).
Result<Ed25519PublicKey> decode_public_key_proto(std::string_view bytes);

/// PrivateKey{key_type=Ed25519, data=<seed ‖ public key>} (64 bytes of data), as libp2p
/// encodes it. The result holds the secret seed.
std::string encode_private_key_proto(const Ed25519PrivateKey& key);

/// Parses an encoded PrivateKey. The data must be 64 bytes (seed ‖ public key) and the
/// public half must match the seed. Errors: errc::malformed, errc::unsupported (a key
/// type other than Ed25519).
Result<Ed25519PrivateKey> decode_private_key_proto(std::string_view bytes);

}  // namespace apiary::messages
