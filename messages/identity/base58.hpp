#pragma once
/// base58btc: the text form of libp2p PeerIDs ("12D3KooW...", "Qm...").
#include <string>
#include <string_view>

#include "messages/result.hpp"

namespace apiary::messages {

/// The bitcoin base58 alphabet (no 0, O, I or l), in digit order.
inline constexpr std::string_view base58_alphabet =
    "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/// Encodes `bytes` as base58btc text; each leading zero byte becomes one '1'.
/// Cost grows with the square of the length: meant for ids and keys (tens of bytes).
std::string base58_encode(std::string_view bytes);

/// Decodes base58btc `text` into bytes; each leading '1' becomes one zero byte.
/// Errors: errc::malformed naming the first character outside the alphabet and its
/// position (0-based). The empty text decodes to no bytes.
Result<std::string> base58_decode(std::string_view text);

}  // namespace apiary::messages
