#include "core/dht/ownership_validator.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dht/msgpack_value.hpp"
#include "messages/identity/rsa.hpp"

namespace apiary::core::dht {
namespace {

constexpr std::string_view k_owner_open = "[owner:";
constexpr std::string_view k_signature_open = "[signature:";
constexpr std::string_view k_alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// A marker found in some bytes: where it starts and ends, and the text between the
/// brackets' prefix and the closing ']'.
struct Marker {
  std::size_t begin = 0;
  std::size_t end = 0;  // one past the ']'
  std::string_view content;
};

/// Every non-overlapping `<open><content>]` in `bytes`, left to right, where content is
/// the shortest run of at least one character other than '\n' (the regex `open(.+?)\]`).
std::vector<Marker> find_markers(std::string_view bytes, std::string_view open) {
  std::vector<Marker> found;
  std::size_t from = 0;
  while ((from = bytes.find(open, from)) != std::string_view::npos) {
    const std::size_t content_begin = from + open.size();
    std::size_t close = std::string_view::npos;
    for (std::size_t i = content_begin; i < bytes.size() && bytes[i] != '\n'; ++i) {
      if (bytes[i] == ']' && i > content_begin) {
        close = i;
        break;
      }
    }
    if (close == std::string_view::npos) {
      ++from;  // no match starting here; a later '[' may still start one
      continue;
    }
    found.push_back({from, close + 1, bytes.substr(content_begin, close - content_begin)});
    from = close + 1;
  }
  return found;
}

/// `value` without the signature markers.
std::string without_signatures(std::string_view value) {
  std::string out;
  std::size_t kept = 0;
  for (const auto& marker : find_markers(value, k_signature_open)) {
    out.append(value.substr(kept, marker.begin - kept));
    kept = marker.end;
  }
  out.append(value.substr(kept));
  return out;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t group = 0;
    for (std::size_t j = 0; j < 3; ++j) {
      const auto byte = j < n ? static_cast<std::uint8_t>(bytes[i + j]) : std::uint8_t{0};
      group = (group << 8) | byte;
    }
    for (std::size_t j = 0; j < 4; ++j) {
      out.push_back(j <= n ? k_alphabet[(group >> (18 - 6 * j)) & 0x3f] : '=');
    }
  }
  return out;
}

Result<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) {
    return make_error(errc::malformed,
                      "base64: expected a length that is a multiple of 4, got {} characters; "
                      "pass padded standard base64",
                      text.size());
  }
  std::string out;
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    // Only the last group may end in one or two '='.
    std::size_t padding = 0;
    if (last && text[i + 3] == '=') padding = text[i + 2] == '=' ? 2 : 1;
    std::uint32_t group = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      const char c = text[i + j];
      const auto digit = j < 4 - padding ? k_alphabet.find(c) : std::string_view::size_type{0};
      if (digit == std::string_view::npos) {
        return make_error(errc::malformed,
                          "base64: expected a character of the standard alphabet at position "
                          "{}, got byte 0x{:02x}; pass padded standard base64",
                          i + j, static_cast<unsigned>(static_cast<unsigned char>(c)));
      }
      group = (group << 6) | static_cast<std::uint32_t>(digit);
    }
    // Bits that the padding hides must be zero, so each byte string has one encoding.
    if ((padding == 1 && (group & 0xff) != 0) || (padding == 2 && (group & 0xffff) != 0)) {
      return make_error(errc::malformed,
                        "base64: expected zero bits before the padding at position {}; "
                        "pass canonical base64",
                        i);
    }
    for (std::size_t j = 0; j < 3 - padding; ++j) {
      out.push_back(static_cast<char>((group >> (16 - 8 * j)) & 0xff));
    }
  }
  return out;
}

OwnershipValidator::OwnershipValidator(messages::Ed25519PrivateKey private_key)
    : signers_{Signer{private_key, owner_marker(private_key.public_key())}} {}  // copies share the key

OwnershipValidator::OwnershipValidator(messages::RsaPrivateKey private_key)
    : signers_{Signer{private_key, owner_marker(private_key.public_key())}} {}  // copies share the key

std::string OwnershipValidator::owner_marker(const messages::RsaPublicKey& public_key) {
  return std::string(k_owner_open) + public_key.openssh() + "]";
}

std::string OwnershipValidator::owner_marker(const messages::Ed25519PublicKey& public_key) {
  return std::string(k_owner_open) + base64_encode(public_key.bytes()) + "]";
}

std::string OwnershipValidator::signature_marker(std::string_view signature) {
  return std::string(k_signature_open) + base64_encode(signature) + "]";
}

std::string OwnershipValidator::signed_message(const DhtRecord& record) {
  return pack_tuple({pack_bin(record.key), pack_bin(record.subkey), pack_bin(record.value),
                     pack_float(record.expiration)});
}

bool OwnershipValidator::validate(const DhtRecord& record) const {
  // Owners named in key and subkey: none means the record is not protected.
  auto owners = find_markers(record.key, k_owner_open);
  for (const auto& marker : find_markers(record.subkey, k_owner_open)) owners.push_back(marker);
  if (owners.empty()) return true;
  // Key and subkey may not name different owners.
  for (const auto& owner : owners) {
    if (owner.content != owners.front().content) return false;
  }
  // Exactly one signature, over the record with the signature removed.
  const auto signatures = find_markers(record.value, k_signature_open);
  if (signatures.size() != 1) return false;
  auto signature = base64_decode(signatures.front().content);
  if (!signature) return false;
  DhtRecord stripped = record;
  stripped.value = strip_value(record);
  const std::string_view owner = owners.front().content;
  if (owner.substr(0, 8) == "ssh-rsa ") {
    // An owner named by an OpenSSH RSA key, as hivemind's RSASignatureValidator writes it.
    auto rsa = messages::RsaPublicKey::from_openssh(owner);
    return rsa && rsa->verify_pss(signed_message(stripped), *signature);
  }
  auto raw_key = base64_decode(owner);
  if (!raw_key) return false;
  auto public_key = messages::Ed25519PublicKey::from_bytes(*raw_key);
  return public_key && public_key->verify(signed_message(stripped), *signature);
}

Result<std::string> OwnershipValidator::sign_value(const DhtRecord& record) const {
  const Signer* own = nullptr;
  for (const Signer& s : signers_) {
    if (record.key.find(s.marker) != std::string::npos || record.subkey.find(s.marker) != std::string::npos) {
      own = &s;
      break;
    }
  }
  if (own == nullptr) return record.value;
  DhtRecord stripped = record;
  stripped.value = strip_value(record);
  const std::string message = signed_message(stripped);
  auto signature = std::visit(
      [&](const auto& key) -> Result<std::string> {
        if constexpr (std::is_same_v<std::decay_t<decltype(key)>, messages::RsaPrivateKey>) {
          return key.sign_pss(message);
        } else {
          return key.sign(message);
        }
      },
      own->key);
  if (!signature) return signature.error();
  return stripped.value + signature_marker(*signature);
}

std::string OwnershipValidator::strip_value(const DhtRecord& record) const {
  return without_signatures(record.value);
}

bool OwnershipValidator::merge_with(const RecordValidator& other) {
  const auto* ownership = dynamic_cast<const OwnershipValidator*>(&other);
  if (ownership == nullptr) return false;
  for (const Signer& s : ownership->signers_) {
    bool known = false;
    for (const Signer& mine : signers_) known = known || mine.marker == s.marker;
    if (!known) signers_.push_back(s);
  }
  return true;
}

}  // namespace apiary::core::dht
