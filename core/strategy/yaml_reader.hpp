#pragma once
/// A reader for the YAML subset that configuration files like AutoDist's
/// `resource_spec.yml` use: block maps and lists by indentation (spaces only),
/// one-line flow lists and maps (`[0, 1]`, `{KEY: value}`), plain, 'single' and
/// "double" quoted scalars, and `#` comments. Anything else (anchors, aliases, tags,
/// block scalars `|` `>`, multi-line flow collections, several documents) is rejected
/// with a clear error instead of being half-understood.
#include <string_view>

#include "core/strategy/document.hpp"
#include "messages/result.hpp"

namespace apiary::core::strategy {

/// Parses `text` as one YAML document of the subset above. Plain scalars keep their
/// text (typing is the reader's job: DocumentReader); `null`, `~` and empty values
/// become Kind::null; an empty file is a null document.
///
/// Errors (malformed) name `source`, the line and column, what was expected and what
/// came: tabs in indentation, inconsistent indentation, a duplicate key, an
/// unterminated quote or flow collection, or an unsupported YAML feature.
[[nodiscard]] Result<Document> parse_yaml(std::string_view text, std::string_view source);

}  // namespace apiary::core::strategy
