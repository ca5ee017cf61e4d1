#include "core/strategy/json_reader.hpp"

#include <cctype>
#include <cstdint>
#include <string>

namespace apiary::core::strategy {
namespace {

/// Deepest nesting accepted; the reader recurses once per level.
constexpr int max_depth = 64;

class JsonParser {
 public:
  JsonParser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  Result<Document> parse_document() {
    auto value = parse_value(0);
    if (!value) return value;
    skip_space();
    if (pos_ < text_.size()) return fail("the end of the file after the top-level value");
    return value;
  }

 private:
  Error fail(std::string_view expected) const {
    std::string got = pos_ < text_.size() ? fmt::format("'{}'", text_[pos_]) : std::string("the end of the file");
    return make_error(errc::malformed, "{}:{}:{}: invalid JSON: expected {}, got {}; fix the file at that position",
                      source_, line_, column_, expected, got);
  }

  void advance() {
    if (text_[pos_] == '\n') {
      ++line_;
      column_ = 1;
    } else {
      ++column_;
    }
    ++pos_;
  }

  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      advance();
    }
  }

  bool consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      advance();
      return true;
    }
    return false;
  }

  Document start_node(Document::Kind kind) const {
    Document d;
    d.kind = kind;
    d.line = line_;
    d.column = column_;
    return d;
  }

  Result<Document> parse_value(int depth) {
    skip_space();
    if (depth > max_depth) return fail("at most 64 nested lists and objects");
    if (pos_ >= text_.size()) return fail("a value");
    const char c = text_[pos_];
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"') {
      Document d = start_node(Document::Kind::scalar);
      auto s = parse_string();
      if (!s) return s.error();
      d.text = std::move(*s);
      d.quoted = true;
      return d;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
    for (std::string_view word : {"true", "false", "null"}) {
      if (text_.substr(pos_, word.size()) == word) {
        Document d = start_node(word == "null" ? Document::Kind::null : Document::Kind::scalar);
        if (word != "null") d.text = std::string(word);
        for (std::size_t i = 0; i < word.size(); ++i) advance();
        return d;
      }
    }
    return fail("a value (object, array, string, number, true, false or null)");
  }

  Result<Document> parse_object(int depth) {
    Document d = start_node(Document::Kind::map);
    advance();  // '{'
    skip_space();
    if (consume('}')) return d;
    while (true) {
      skip_space();
      const std::size_t key_line = line_, key_column = column_;
      if (pos_ >= text_.size() || text_[pos_] != '"') return fail("a quoted key");
      auto key = parse_string();
      if (!key) return key.error();
      if (d.find(*key) != nullptr) {
        return make_error(errc::malformed, "{}:{}:{}: invalid JSON: the key \"{}\" appears twice in one object; keep one",
                          source_, key_line, key_column, *key);
      }
      skip_space();
      if (!consume(':')) return fail("':' after the key");
      auto value = parse_value(depth + 1);
      if (!value) return value;
      d.fields.emplace_back(std::move(*key), std::move(*value));
      skip_space();
      if (consume('}')) return d;
      if (!consume(',')) return fail("',' or '}' in the object");
    }
  }

  Result<Document> parse_array(int depth) {
    Document d = start_node(Document::Kind::list);
    advance();  // '['
    skip_space();
    if (consume(']')) return d;
    while (true) {
      auto value = parse_value(depth + 1);
      if (!value) return value;
      d.items.push_back(std::move(*value));
      skip_space();
      if (consume(']')) return d;
      if (!consume(',')) return fail("',' or ']' in the array");
    }
  }

  Result<Document> parse_number() {
    Document d = start_node(Document::Kind::scalar);
    const std::size_t begin = pos_;
    auto digits = [&] {
      std::size_t n = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        advance();
        ++n;
      }
      return n;
    };
    consume('-');
    if (consume('0')) {
      // a leading zero stands alone
    } else if (digits() == 0) {
      return fail("a digit");
    }
    if (consume('.') && digits() == 0) return fail("a digit after the decimal point");
    if (consume('e') || consume('E')) {
      if (!consume('+')) consume('-');
      if (digits() == 0) return fail("a digit in the exponent");
    }
    d.text = std::string(text_.substr(begin, pos_ - begin));
    return d;
  }

  static void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  Result<std::uint32_t> parse_hex4() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      if (pos_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[pos_]))) {
        return fail("four hex digits after \\u");
      }
      const char c = text_[pos_];
      v = v * 16 + static_cast<std::uint32_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
      advance();
    }
    return v;
  }

  Result<std::string> parse_string() {
    advance();  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) return fail("a closing '\"'");
      const char c = text_[pos_];
      if (c == '"') {
        advance();
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) return fail("an escaped control character (\\n, \\t, ...)");
      if (c != '\\') {
        out += c;
        advance();
        continue;
      }
      advance();
      if (pos_ >= text_.size()) return fail("an escape character");
      const char e = text_[pos_];
      const std::string_view simple = "\"\\/bfnrt";
      const std::string_view decoded = "\"\\/\b\f\n\r\t";
      if (auto k = simple.find(e); k != std::string_view::npos) {
        out += decoded[k];
        advance();
        continue;
      }
      if (e != 'u') return fail("one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u");
      advance();
      auto cp = parse_hex4();
      if (!cp) return cp.error();
      std::uint32_t code = *cp;
      if (code >= 0xD800 && code < 0xDC00) {  // a high surrogate needs its low half
        if (!consume('\\') || !consume('u')) return fail("the low surrogate \\uDC00-\\uDFFF");
        auto low = parse_hex4();
        if (!low) return low.error();
        if (*low < 0xDC00 || *low >= 0xE000) return fail("a low surrogate \\uDC00-\\uDFFF");
        code = 0x10000 + ((code - 0xD800) << 10) + (*low - 0xDC00);
      } else if (code >= 0xDC00 && code < 0xE000) {
        return fail("a high surrogate before a low one");
      }
      append_utf8(out, code);
    }
  }

  std::string_view text_;
  std::string_view source_;
  std::size_t pos_ = 0;
  std::size_t line_ = 1;
  std::size_t column_ = 1;
};

}  // namespace

Result<Document> parse_json(std::string_view text, std::string_view source) {
  return JsonParser(text, source).parse_document();
}

}  // namespace apiary::core::strategy
