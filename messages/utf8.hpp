#pragma once
/// Text that goes into a protobuf `string` field: protobuf refuses to parse one holding
/// invalid UTF-8, so an error message cut in the middle of a character, or quoting bytes
/// from the network, would make its whole frame unreadable at the other end.
#include <cstddef>
#include <string>
#include <string_view>

namespace apiary::messages {

/// `text` as valid UTF-8 of at most `max_bytes` bytes: each byte that does not begin a
/// well-formed sequence (RFC 3629: no overlong forms, surrogates or code points past
/// U+10FFFF) becomes '?', and the text ends before a character that would pass the limit.
[[nodiscard]] std::string valid_utf8(std::string_view text, std::size_t max_bytes = std::string::npos);

}  // namespace apiary::messages
