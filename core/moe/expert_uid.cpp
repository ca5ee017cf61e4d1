#include "core/moe/expert_uid.hpp"

#include <limits>
#include <utility>

#include <fmt/format.h>

namespace apiary::core::moe {
namespace {

constexpr const char* k_uid_grammar = "a uid is <root>.<coordinate>[.<coordinate>...]: a root without dots, then "
                                      "decimal coordinates without leading zeros (\"ffn.3.14\")";

/// Whether `text` is a coordinate as the grammar writes it: "0" or digits not led by 0.
bool is_coordinate(std::string_view text) {
  if (text.empty()) return false;
  if (text[0] == '0') return text.size() == 1;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

/// The value of a coordinate already checked by is_coordinate; nullopt past 64 bits.
std::optional<std::int64_t> coordinate_value(std::string_view text) {
  std::int64_t value = 0;
  for (char c : text) {
    const int digit = c - '0';
    if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

/// Whether `text` is a root, at least `min_coordinates` coordinates, and (when
/// `trailing`) a final delimiter: the uid and prefix grammars in one.
bool matches(std::string_view text, std::size_t min_coordinates, bool trailing) {
  if (trailing) {
    if (text.empty() || text.back() != k_uid_delimiter) return false;
    text.remove_suffix(1);
  }
  std::size_t at = text.find(k_uid_delimiter);
  if (at == 0) return false;  // an empty root
  if (at == std::string_view::npos) return min_coordinates == 0 && !text.empty();
  std::size_t coordinates = 0;
  while (at != std::string_view::npos) {
    const std::size_t next = text.find(k_uid_delimiter, at + 1);
    const std::size_t end = next == std::string_view::npos ? text.size() : next;
    if (!is_coordinate(text.substr(at + 1, end - at - 1))) return false;
    ++coordinates;
    at = next;
  }
  return coordinates >= min_coordinates;
}

std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return std::numeric_limits<std::uint64_t>::max();
  return a * b;
}

Result<PatternBlock> parse_block(std::string_view pattern, std::string_view block, bool root) {
  const bool has_bracket = block.find('[') != std::string_view::npos || block.find(']') != std::string_view::npos;
  if (!has_bracket) {
    if (root ? block.empty() : !is_coordinate(block)) {
      return make_error(errc::invalid_argument,
                        "uid pattern '{}': block '{}' is not {}; the uids it makes must be valid ({}); write fixed "
                        "text or a range [from:to]",
                        pattern, block, root ? "a root" : "a coordinate", k_uid_grammar);
    }
    return PatternBlock{std::string(block), 0, 0};
  }
  const std::size_t colon = block.find(':');
  const bool bracketed = block.size() >= 2 && block.front() == '[' && block.back() == ']';
  if (bracketed && colon != std::string_view::npos) {
    const std::string_view from = block.substr(1, colon - 1);
    const std::string_view to = block.substr(colon + 1, block.size() - colon - 2);
    auto digits = [](std::string_view t) {
      if (t.empty() || t.size() > 18) return false;
      for (char c : t) {
        if (c < '0' || c > '9') return false;
      }
      return true;
    };
    if (digits(from) && digits(to)) {
      const std::int64_t begin = *coordinate_value(from);
      const std::int64_t end = *coordinate_value(to);
      if (begin < end) return PatternBlock{"", begin, end};
    }
  }
  return make_error(errc::invalid_argument,
                    "uid pattern '{}': block '{}' must be fixed text or a range [from:to] of decimal coordinates "
                    "with 0 <= from < to (e.g. \"ffn.[0:32].[0:256]\")",
                    pattern, block);
}

}  // namespace

bool is_valid_uid(std::string_view text) { return matches(text, 1, false); }

bool is_valid_prefix(std::string_view text) { return matches(text, 0, true); }

Result<SplitUid> split_uid(std::string_view uid_or_prefix) {
  std::string_view text = uid_or_prefix;
  if (!text.empty() && text.back() == k_uid_delimiter) text.remove_suffix(1);
  if (!is_valid_uid(text)) {
    return make_error(errc::invalid_argument,
                      "cannot split '{}': expected a uid or a prefix with at least one coordinate; {}", uid_or_prefix,
                      k_uid_grammar);
  }
  const std::size_t pivot = text.rfind(k_uid_delimiter) + 1;
  const auto coordinate = coordinate_value(text.substr(pivot));
  if (!coordinate) {
    return make_error(errc::invalid_argument, "cannot split '{}': coordinate '{}' does not fit 64 bits",
                      uid_or_prefix, text.substr(pivot));
  }
  return SplitUid{std::string(text.substr(0, pivot)), *coordinate};
}

Result<UidParts> parse_uid(std::string_view uid) {
  if (!is_valid_uid(uid)) {
    return make_error(errc::invalid_argument, "'{}' is not a valid expert uid; {}", uid, k_uid_grammar);
  }
  UidParts parts;
  std::size_t at = uid.find(k_uid_delimiter);
  parts.root = std::string(uid.substr(0, at));
  while (at != std::string_view::npos) {
    const std::size_t next = uid.find(k_uid_delimiter, at + 1);
    const std::size_t end = next == std::string_view::npos ? uid.size() : next;
    const auto coordinate = coordinate_value(uid.substr(at + 1, end - at - 1));
    if (!coordinate) {
      return make_error(errc::invalid_argument, "expert uid '{}': coordinate '{}' does not fit 64 bits", uid,
                        uid.substr(at + 1, end - at - 1));
    }
    parts.coordinates.push_back(*coordinate);
    at = next;
  }
  return parts;
}

Result<UidPattern> UidPattern::parse(std::string_view pattern) {
  UidPattern out;
  std::size_t start = 0;
  while (true) {
    const std::size_t at = pattern.find(k_uid_delimiter, start);
    const std::string_view block = pattern.substr(start, at == std::string_view::npos ? at : at - start);
    auto parsed = parse_block(pattern, block, out.blocks_.empty());
    if (!parsed) return parsed.error();
    out.blocks_.push_back(std::move(*parsed));
    if (at == std::string_view::npos) break;
    start = at + 1;
  }
  if (out.blocks_.size() < 2) {
    return make_error(errc::invalid_argument,
                      "uid pattern '{}' has no coordinate block; {} (e.g. \"expert.[0:4].[0:4]\")", pattern,
                      k_uid_grammar);
  }
  return out;
}

std::uint64_t UidPattern::size() const {
  std::uint64_t n = 1;
  for (const PatternBlock& b : blocks_) {
    if (b.is_range()) n = saturating_mul(n, static_cast<std::uint64_t>(b.end - b.begin));
  }
  return n;
}

std::string UidPattern::sample(Rng& rng) const {
  std::string uid;
  for (const PatternBlock& b : blocks_) {
    if (!uid.empty()) uid += k_uid_delimiter;
    if (b.is_range()) {
      uid += std::to_string(b.begin + static_cast<std::int64_t>(rng.uniform(static_cast<std::uint64_t>(b.end - b.begin))));
    } else {
      uid += b.text;
    }
  }
  return uid;
}

Result<std::vector<std::string>> UidPattern::expand(std::uint64_t limit) const {
  if (size() > limit) {
    return make_error(errc::too_large, "uid pattern makes {} uids, more than the limit of {}; sample some instead",
                      size(), limit);
  }
  std::vector<std::string> uids{""};
  for (const PatternBlock& b : blocks_) {
    std::vector<std::string> longer;
    for (const std::string& head : uids) {
      const std::string lead = head.empty() ? head : head + k_uid_delimiter;
      if (!b.is_range()) {
        longer.push_back(lead + b.text);
        continue;
      }
      for (std::int64_t c = b.begin; c < b.end; ++c) longer.push_back(lead + std::to_string(c));
    }
    uids = std::move(longer);
  }
  return uids;
}

UidSampler::UidSampler(std::optional<UidPattern> pattern, std::size_t num_experts, std::size_t attempts_per_expert)
    : pattern_(std::move(pattern)),
      wanted_(num_experts),
      total_attempts_(saturating_mul(num_experts, attempts_per_expert)),
      remaining_attempts_(total_attempts_) {}

std::vector<std::string> UidSampler::next_candidates(Rng& rng) {
  std::vector<std::string> candidates;
  while (found_.size() + candidates.size() < wanted_ && remaining_attempts_ > 0) {
    // Without a pattern, the n-th attempt names "expert.n".
    std::string uid = pattern_ ? pattern_->sample(rng)
                               : fmt::format("expert{}{}", k_uid_delimiter, total_attempts_ - remaining_attempts_);
    --remaining_attempts_;
    if (attempted_.insert(uid).second) candidates.push_back(std::move(uid));
  }
  return candidates;
}

void UidSampler::accept(const std::vector<std::string>& candidates, const std::set<std::string>& taken) {
  for (const std::string& uid : candidates) {
    if (found_.size() < wanted_ && taken.count(uid) == 0) found_.push_back(uid);
  }
}

bool UidSampler::done() const { return found_.size() >= wanted_ || remaining_attempts_ == 0; }

Result<std::vector<std::string>> generate_uids_from_pattern(std::size_t num_experts, std::string_view pattern, Rng& rng,
                                                            std::size_t attempts_per_expert) {
  std::optional<UidPattern> parsed;
  if (!pattern.empty()) {
    auto p = UidPattern::parse(pattern);
    if (!p) return p.error();
    parsed = std::move(*p);
  }
  UidSampler sampler(std::move(parsed), num_experts, attempts_per_expert);
  while (!sampler.done()) sampler.accept(sampler.next_candidates(rng), {});
  return sampler.found();
}

}  // namespace apiary::core::moe
