#include "core/strategy/document.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace apiary::core::strategy {
namespace {

/// Whether `text` is an optional '-' followed by one or more decimal digits.
bool is_integer_text(std::string_view text) {
  std::size_t i = (!text.empty() && (text[0] == '-' || text[0] == '+')) ? 1 : 0;
  if (i >= text.size()) return false;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
  }
  return true;
}

}  // namespace

const Document* Document::find(std::string_view key) const {
  if (kind != Kind::map) return nullptr;
  for (const auto& [k, v] : fields) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string describe(const Document& node) {
  switch (node.kind) {
    case Document::Kind::null: return "nothing (null)";
    case Document::Kind::list: return "a list";
    case Document::Kind::map: return "a map";
    case Document::Kind::scalar: break;
  }
  std::string shown = node.text.size() > 40 ? node.text.substr(0, 40) + "..." : node.text;
  return node.quoted ? fmt::format("the quoted string \"{}\"", shown) : fmt::format("\"{}\"", shown);
}

Error DocumentReader::error(const Document& node, std::string_view path, std::string_view what) const {
  return make_error(errc::malformed, "{}:{}:{}: {}: {}", source_, node.line, node.column, path, what);
}

Status DocumentReader::expect_map(const Document& node, std::string_view path) const {
  if (node.kind == Document::Kind::map) return ok_status();
  return error(node, path, fmt::format("expected a map of fields, got {}", describe(node)));
}

Status DocumentReader::expect_list(const Document& node, std::string_view path) const {
  if (node.kind == Document::Kind::list) return ok_status();
  return error(node, path, fmt::format("expected a list, got {}", describe(node)));
}

Status DocumentReader::check_keys(const Document& node, std::string_view path,
                                  const std::vector<std::string_view>& allowed) const {
  for (const auto& [key, value] : node.fields) {
    bool known = false;
    for (auto a : allowed) known = known || a == key;
    if (known) continue;
    std::string names;
    for (auto a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
    return error(value, path,
                 fmt::format("unknown field \"{}\"; expected one of: {} (check the spelling)", key, names));
  }
  return ok_status();
}

Status DocumentReader::expect_fields(const Document& node, std::string_view path,
                                     const std::vector<std::string_view>& allowed) const {
  if (auto s = expect_map(node, path); !s) return s;
  return check_keys(node, path, allowed);
}

Result<const Document*> DocumentReader::required_list(const Document& node, std::string_view path,
                                                      std::string_view key, std::string_view missing) const {
  const Document* list = node.find(key);
  if (list == nullptr) return error(node, path, missing);
  if (auto s = expect_list(*list, key); !s) return s.error();
  return list;
}

Result<std::string> DocumentReader::string(const Document& node, std::string_view path) const {
  if (node.kind == Document::Kind::scalar) return node.text;
  return error(node, path, fmt::format("expected a string, got {}", describe(node)));
}

Result<std::int64_t> DocumentReader::integer(const Document& node, std::string_view path, std::int64_t min,
                                             std::int64_t max) const {
  if (node.kind != Document::Kind::scalar || node.quoted || !is_integer_text(node.text)) {
    return error(node, path, fmt::format("expected an integer in [{}, {}], got {}", min, max, describe(node)));
  }
  errno = 0;
  const long long v = std::strtoll(node.text.c_str(), nullptr, 10);
  if (errno == ERANGE || v < min || v > max) {
    return error(node, path, fmt::format("expected an integer in [{}, {}], got {}", min, max, node.text));
  }
  return static_cast<std::int64_t>(v);
}

Result<double> DocumentReader::number(const Document& node, std::string_view path) const {
  if (node.kind == Document::Kind::scalar && !node.quoted && !node.text.empty()) {
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(node.text.c_str(), &end);
    const bool digits_only = node.text.find_first_of("xXnNiI") == std::string::npos;  // no hex, nan, inf
    if (end == node.text.c_str() + node.text.size() && errno != ERANGE && std::isfinite(v) && digits_only) {
      return v;
    }
  }
  return error(node, path, fmt::format("expected a finite number, got {}", describe(node)));
}

Result<bool> DocumentReader::boolean(const Document& node, std::string_view path) const {
  if (node.kind == Document::Kind::scalar && !node.quoted) {
    const std::string& t = node.text;
    if (t == "true" || t == "True" || t == "TRUE" || t == "yes" || t == "Yes") return true;
    if (t == "false" || t == "False" || t == "FALSE" || t == "no" || t == "No") return false;
  }
  return error(node, path, fmt::format("expected true or false, got {}", describe(node)));
}

Result<std::vector<std::int64_t>> DocumentReader::integer_list(const Document& node, std::string_view path,
                                                               std::int64_t min, std::int64_t max) const {
  if (auto s = expect_list(node, path); !s) return s.error();
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < node.items.size(); ++i) {
    auto v = integer(node.items[i], fmt::format("{}[{}]", path, i), min, max);
    if (!v) return v.error();
    out.push_back(*v);
  }
  return out;
}

}  // namespace apiary::core::strategy
