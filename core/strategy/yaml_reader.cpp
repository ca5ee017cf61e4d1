#include "core/strategy/yaml_reader.hpp"

#include <optional>
#include <string>
#include <vector>

namespace apiary::core::strategy {
namespace {

/// One meaningful line: indentation, then content without comment or trailing blanks.
struct Line {
  std::size_t number = 0;  ///< 1-based line number
  std::size_t indent = 0;  ///< leading spaces (the content starts at column indent + 1)
  std::string content;
};

/// A "key: rest" split of a mapping entry; rest_offset is where rest starts in content.
struct KeySplit {
  std::string key;
  std::string rest;
  std::size_t rest_offset = 0;
};

bool is_sequence_item(std::string_view content) {
  return content == "-" || (content.size() >= 2 && content[0] == '-' && content[1] == ' ');
}

bool is_null_text(std::string_view t) { return t.empty() || t == "~" || t == "null" || t == "Null" || t == "NULL"; }

class YamlParser {
 public:
  explicit YamlParser(std::string_view source) : source_(source) {}

  Result<Document> parse(std::string_view text) {
    if (auto s = split_lines(text); !s) return s.error();
    if (lines_.empty()) return Document{};
    auto root = parse_block(lines_[0].indent);
    if (!root) return root;
    if (i_ < lines_.size()) {
      return fail(lines_[i_].number, lines_[i_].indent + 1,
                  fmt::format("an indentation matching an enclosing block, got {} spaces; align the line "
                              "with its siblings",
                              lines_[i_].indent));
    }
    return root;
  }

 private:
  Error fail(std::size_t line, std::size_t column, std::string_view expected) const {
    return make_error(errc::malformed, "{}:{}:{}: invalid YAML: expected {}", source_, line, column, expected);
  }

  Status split_lines(std::string_view text) {
    std::size_t number = 0;
    while (!text.empty()) {
      const std::size_t eol = text.find('\n');
      std::string raw(text.substr(0, eol));
      text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
      ++number;
      if (!raw.empty() && raw.back() == '\r') raw.pop_back();
      std::size_t indent = 0;
      while (indent < raw.size() && raw[indent] == ' ') ++indent;
      if (indent < raw.size() && raw[indent] == '\t') {
        return fail(number, indent + 1, "spaces for indentation, got a tab; YAML forbids tabs there");
      }
      // Cut a comment: '#' at the start or after a blank, outside quotes.
      char quote = 0;
      std::size_t end = raw.size();
      for (std::size_t k = indent; k < raw.size(); ++k) {
        const char c = raw[k];
        if (quote != 0) {
          if (c == quote) quote = 0;
        } else if (c == '"' || c == '\'') {
          if (k == indent || raw[k - 1] == ' ' || raw[k - 1] == '[' || raw[k - 1] == '{' || raw[k - 1] == ',') quote = c;
        } else if (c == '#' && (k == indent || raw[k - 1] == ' ' || raw[k - 1] == '\t')) {
          end = k;
          break;
        }
      }
      while (end > indent && (raw[end - 1] == ' ' || raw[end - 1] == '\t')) --end;
      if (end <= indent) continue;
      std::string content = raw.substr(indent, end - indent);
      if (content == "---" && lines_.empty()) continue;
      if (content == "...") break;
      if (content == "---" || content[0] == '%') {
        return fail(number, indent + 1, "a single YAML document without directives");
      }
      lines_.push_back(Line{number, indent, std::move(content)});
    }
    return ok_status();
  }

  Result<Document> parse_block(std::size_t indent) {
    if (is_sequence_item(lines_[i_].content)) return parse_sequence(indent);
    return parse_mapping(indent);
  }

  // "key: rest", "'key': rest" or "key:" (rest empty); nullopt when not a mapping entry.
  static std::optional<KeySplit> split_key(const std::string& content) {
    if (content.empty() || content[0] == '[' || content[0] == '{' || is_sequence_item(content)) return std::nullopt;
    std::size_t colon = std::string::npos;
    std::string key;
    if (content[0] == '"' || content[0] == '\'') {
      const std::size_t close = content.find(content[0], 1);
      if (close == std::string::npos) return std::nullopt;
      std::size_t k = close + 1;
      while (k < content.size() && content[k] == ' ') ++k;
      if (k >= content.size() || content[k] != ':') return std::nullopt;
      colon = k;
      key = content.substr(1, close - 1);
    } else {
      for (std::size_t k = 0; k < content.size(); ++k) {
        if (content[k] == ':' && (k + 1 == content.size() || content[k + 1] == ' ')) {
          colon = k;
          break;
        }
      }
      if (colon == std::string::npos) return std::nullopt;
      key = content.substr(0, colon);
      while (!key.empty() && key.back() == ' ') key.pop_back();
    }
    if (colon + 1 < content.size() && content[colon + 1] != ' ') return std::nullopt;
    std::size_t r = colon + 1;
    while (r < content.size() && content[r] == ' ') ++r;
    return KeySplit{key, content.substr(r), r};
  }

  Result<Document> parse_sequence(std::size_t indent) {
    Document list;
    list.kind = Document::Kind::list;
    list.line = lines_[i_].number;
    list.column = indent + 1;
    while (i_ < lines_.size() && lines_[i_].indent == indent && is_sequence_item(lines_[i_].content)) {
      Line& line = lines_[i_];
      if (line.content == "-") {
        const std::size_t number = line.number;
        ++i_;
        if (i_ < lines_.size() && lines_[i_].indent > indent) {
          auto item = parse_block(lines_[i_].indent);
          if (!item) return item;
          list.items.push_back(std::move(*item));
        } else {
          Document null;
          null.line = number;
          null.column = indent + 1;
          list.items.push_back(null);
        }
        continue;
      }
      std::size_t offset = 1;
      while (offset < line.content.size() && line.content[offset] == ' ') ++offset;
      std::string rest = line.content.substr(offset);
      if (split_key(rest) || is_sequence_item(rest)) {
        // "- key: value": the item is a block whose first line starts after the dash.
        line.indent += offset;
        line.content = std::move(rest);
        auto item = parse_block(line.indent);
        if (!item) return item;
        list.items.push_back(std::move(*item));
      } else {
        auto item = parse_inline(rest, line.number, line.indent + offset + 1);
        if (!item) return item;
        list.items.push_back(std::move(*item));
        ++i_;
      }
      if (auto s = no_deeper_line(indent); !s) return s.error();
    }
    return list;
  }

  Result<Document> parse_mapping(std::size_t indent) {
    Document map;
    map.kind = Document::Kind::map;
    map.line = lines_[i_].number;
    map.column = indent + 1;
    while (i_ < lines_.size() && lines_[i_].indent == indent) {
      const Line& line = lines_[i_];
      if (is_sequence_item(line.content)) {
        return fail(line.number, indent + 1, "a \"key: value\" entry, got a \"- \" list item; indent list items under their key");
      }
      auto split = split_key(line.content);
      if (!split) {
        return fail(line.number, indent + 1,
                    fmt::format("a \"key: value\" entry, got \"{}\"; put \": \" after the key", line.content));
      }
      if (map.find(split->key) != nullptr) {
        return fail(line.number, indent + 1, fmt::format("each key once per map, got \"{}\" twice; keep one", split->key));
      }
      const std::size_t number = line.number;
      const std::size_t value_column = indent + split->rest_offset + 1;
      Document value;
      value.line = number;
      value.column = value_column;
      if (split->rest.empty()) {
        ++i_;
        if (i_ < lines_.size() && lines_[i_].indent > indent) {
          auto block = parse_block(lines_[i_].indent);
          if (!block) return block;
          value = std::move(*block);
        } else if (i_ < lines_.size() && lines_[i_].indent == indent && is_sequence_item(lines_[i_].content)) {
          auto block = parse_sequence(indent);
          if (!block) return block;
          value = std::move(*block);
        }
      } else {
        auto inline_value = parse_inline(split->rest, number, value_column);
        if (!inline_value) return inline_value;
        value = std::move(*inline_value);
        ++i_;
      }
      map.fields.emplace_back(std::move(split->key), std::move(value));
      if (auto s = no_deeper_line(indent); !s) return s.error();
    }
    return map;
  }

  Status no_deeper_line(std::size_t indent) const {
    if (i_ < lines_.size() && lines_[i_].indent > indent) {
      return fail(lines_[i_].number, lines_[i_].indent + 1,
                  fmt::format("{} spaces of indentation like the entry above, got {}; a value given on the key's "
                              "line cannot continue on the next",
                              indent, lines_[i_].indent));
    }
    return ok_status();
  }

  // A value written on one line: a flow collection, a quoted or a plain scalar.
  Result<Document> parse_inline(const std::string& text, std::size_t line, std::size_t column) {
    std::size_t pos = 0;
    auto value = parse_flow(text, pos, line, column, false, 0);
    if (!value) return value;
    while (pos < text.size() && text[pos] == ' ') ++pos;
    if (pos < text.size()) {
      return fail(line, column + pos, fmt::format("the end of the line after the value, got \"{}\"", text.substr(pos)));
    }
    return value;
  }

  Result<Document> parse_flow(const std::string& s, std::size_t& pos, std::size_t line, std::size_t column,
                              bool in_flow, int depth) {
    while (pos < s.size() && s[pos] == ' ') ++pos;
    Document d;
    d.line = line;
    d.column = column + pos;
    if (depth > 32) return fail(line, column + pos, "at most 32 nested flow collections");
    const char c = pos < s.size() ? s[pos] : '\0';
    if (c == '&' || c == '*' || c == '!' || (!in_flow && (c == '|' || c == '>'))) {
      return fail(line, column + pos,
                  fmt::format("a plain value, got '{}': anchors, aliases, tags and block scalars are not "
                              "supported; write the value out",
                              c));
    }
    if (c == '[' || c == '{') {
      const bool is_list = c == '[';
      const char close = is_list ? ']' : '}';
      d.kind = is_list ? Document::Kind::list : Document::Kind::map;
      ++pos;
      while (pos < s.size() && s[pos] == ' ') ++pos;
      if (pos < s.size() && s[pos] == close) {
        ++pos;
        return d;
      }
      while (true) {
        if (is_list) {
          auto item = parse_flow(s, pos, line, column, true, depth + 1);
          if (!item) return item;
          d.items.push_back(std::move(*item));
        } else {
          auto key = parse_flow(s, pos, line, column, true, depth + 1);
          if (!key) return key;
          if (key->kind != Document::Kind::scalar) return fail(key->line, key->column, "a scalar key in the flow map");
          while (pos < s.size() && s[pos] == ' ') ++pos;
          if (pos >= s.size() || s[pos] != ':') return fail(line, column + pos, "':' after the key in the flow map");
          ++pos;
          auto value = parse_flow(s, pos, line, column, true, depth + 1);
          if (!value) return value;
          if (d.find(key->text) != nullptr) {
            return fail(key->line, key->column, fmt::format("each key once per map, got \"{}\" twice", key->text));
          }
          d.fields.emplace_back(key->text, std::move(*value));
        }
        while (pos < s.size() && s[pos] == ' ') ++pos;
        if (pos < s.size() && s[pos] == close) {
          ++pos;
          return d;
        }
        if (pos >= s.size() || s[pos] != ',') {
          return fail(line, column + pos,
                      fmt::format("',' or '{}' (flow collections must close on the same line)", close));
        }
        ++pos;
      }
    }
    d.kind = Document::Kind::scalar;
    if (c == '"' || c == '\'') return parse_quoted(s, pos, d);
    const std::size_t begin = pos;
    while (pos < s.size()) {
      const char k = s[pos];
      if (in_flow && (k == ',' || k == ']' || k == '}' || k == '[' || k == '{')) break;
      if (in_flow && k == ':' && (pos + 1 == s.size() || s[pos + 1] == ' ' || s[pos + 1] == ',')) break;
      ++pos;
    }
    std::string text = s.substr(begin, pos - begin);
    while (!text.empty() && text.back() == ' ') text.pop_back();
    if (is_null_text(text)) d.kind = Document::Kind::null;
    d.text = std::move(text);
    return d;
  }

  Result<Document> parse_quoted(const std::string& s, std::size_t& pos, Document d) {
    const char quote = s[pos++];
    d.quoted = true;
    while (pos < s.size()) {
      const char c = s[pos++];
      if (c == quote) {
        if (quote == '\'' && pos < s.size() && s[pos] == '\'') {  // '' is a quote inside '...'
          d.text += '\'';
          ++pos;
          continue;
        }
        return d;
      }
      if (c == '\\' && quote == '"' && pos < s.size()) {
        const char e = s[pos++];
        const std::string_view from = "\"\\/nt0";
        const std::string_view to("\"\\/\n\t\0", 6);
        const std::size_t k = from.find(e);
        if (k == std::string_view::npos) {
          return fail(d.line, d.column, fmt::format("one of the escapes \\\" \\\\ \\/ \\n \\t \\0, got \\{}", e));
        }
        d.text += to[k];
        continue;
      }
      d.text += c;
    }
    return fail(d.line, d.column, fmt::format("a closing {} on the same line", quote));
  }

  std::string_view source_;
  std::vector<Line> lines_;
  std::size_t i_ = 0;
};

}  // namespace

Result<Document> parse_yaml(std::string_view text, std::string_view source) {
  return YamlParser(source).parse(text);
}

}  // namespace apiary::core::strategy
