#pragma once
/// The tree both small file readers (JSON for graph items, a YAML subset for resource
/// specs) produce, and typed accessors whose errors name the file, line, column and
/// field path ("resource_spec.yml:4:12: nodes[0].gpus[1]: expected ...").
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "messages/result.hpp"

namespace apiary::core::strategy {

/// One node of a parsed document, with where it started in the text.
struct Document {
  /// What the node holds.
  enum class Kind { null, scalar, list, map };
  Kind kind = Kind::null;
  /// A scalar's text, unescaped; for an unquoted scalar exactly as written
  /// ("true", "25", "10.0.0.1").
  std::string text;
  /// Whether the scalar was quoted (a quoted "5" is a string, never a number).
  bool quoted = false;
  /// A list's items, in order.
  std::vector<Document> items;
  /// A map's entries, in file order (keys are unique).
  std::vector<std::pair<std::string, Document>> fields;
  /// 1-based line and column of the node's first character.
  std::size_t line = 0;
  std::size_t column = 0;

  /// The value of `key` in a map, or nullptr when absent or when this is not a map.
  [[nodiscard]] const Document* find(std::string_view key) const;
};

/// Reads typed values out of a Document, turning every mismatch into an errc::malformed
/// error that names the source (file name), the position and the field path.
class DocumentReader {
 public:
  /// `source` names the text in error messages (a file name).
  explicit DocumentReader(std::string source) : source_(std::move(source)) {}

  /// An error at `node` about field `path`: "<source>:<line>:<col>: <path>: <what>".
  [[nodiscard]] Error error(const Document& node, std::string_view path, std::string_view what) const;

  /// A map, or an error saying what the field should have been.
  [[nodiscard]] Status expect_map(const Document& node, std::string_view path) const;
  /// A list, or an error.
  [[nodiscard]] Status expect_list(const Document& node, std::string_view path) const;
  /// Fails on the first key of a map that is not in `allowed`, listing the allowed ones.
  [[nodiscard]] Status check_keys(const Document& node, std::string_view path,
                                  const std::vector<std::string_view>& allowed) const;
  /// A map whose keys are all in `allowed`: expect_map, then check_keys.
  [[nodiscard]] Status expect_fields(const Document& node, std::string_view path,
                                     const std::vector<std::string_view>& allowed) const;
  /// Map `node`'s field `key`, which must be a list (its errors name `key`); when it is
  /// absent, error(node, path, missing).
  [[nodiscard]] Result<const Document*> required_list(const Document& node, std::string_view path,
                                                      std::string_view key, std::string_view missing) const;

  /// A scalar's text (quoted or not); errors on a list, map or null.
  [[nodiscard]] Result<std::string> string(const Document& node, std::string_view path) const;
  /// An unquoted integer in [min, max].
  [[nodiscard]] Result<std::int64_t> integer(const Document& node, std::string_view path,
                                             std::int64_t min, std::int64_t max) const;
  /// An unquoted finite number (integer or decimal).
  [[nodiscard]] Result<double> number(const Document& node, std::string_view path) const;
  /// An unquoted boolean: true/false (also True/False, yes/no in YAML files).
  [[nodiscard]] Result<bool> boolean(const Document& node, std::string_view path) const;
  /// A list of integers in [min, max].
  [[nodiscard]] Result<std::vector<std::int64_t>> integer_list(const Document& node, std::string_view path,
                                                               std::int64_t min, std::int64_t max) const;

  /// The name the reader was given.
  [[nodiscard]] const std::string& source() const { return source_; }

 private:
  std::string source_;
};

/// A short printable description of a node for error messages ("a list", "\"abc\"").
[[nodiscard]] std::string describe(const Document& node);

}  // namespace apiary::core::strategy
