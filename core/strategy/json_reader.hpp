#pragma once
/// A strict JSON (RFC 8259) reader for the small description files of core/strategy/
/// (graph items). It keeps where every value started so that later checks can point at
/// the offending line and column.
#include <string_view>

#include "core/strategy/document.hpp"
#include "messages/result.hpp"

namespace apiary::core::strategy {

/// Parses `text` as one JSON value. Numbers keep their text (Document::quoted false),
/// strings are unescaped (quoted true), null becomes Kind::null.
///
/// Errors (malformed) name `source`, the line and column, what was expected and what
/// came: a syntax error, a duplicate key in an object, nesting deeper than 64 levels,
/// or anything but whitespace after the value.
[[nodiscard]] Result<Document> parse_json(std::string_view text, std::string_view source);

}  // namespace apiary::core::strategy
