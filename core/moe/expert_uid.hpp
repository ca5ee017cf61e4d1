#pragma once
/// Expert uids as hivemind names them (reference §6.2): a prefix without dots followed by
/// one or more numeric coordinates, "ffn.3.14"; a prefix of the grid is a uid's leading
/// part ending in the delimiter, "ffn." or "ffn.3.". And uid patterns
/// ("expert.[0:4].[0:4]") from which a server samples the uids of its experts.
/// Pure: randomness comes from the caller's generator.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.hpp"
#include "messages/result.hpp"

namespace apiary::core::moe {

/// What separates a uid's prefix and its coordinates.
inline constexpr char k_uid_delimiter = '.';
/// The coordinate under which a one-dimensional uid stores itself ("expert.5." -> -1).
inline constexpr std::int64_t k_flat_expert = -1;

/// An expert's uid and the base58 PeerID of the server that holds it (hivemind's
/// ExpertInfo).
struct ExpertInfo {
  std::string uid;
  std::string peer_id;

  friend bool operator==(const ExpertInfo& a, const ExpertInfo& b) {
    return a.uid == b.uid && a.peer_id == b.peer_id;
  }
  friend bool operator!=(const ExpertInfo& a, const ExpertInfo& b) { return !(a == b); }
};

/// Whether `text` is a uid: `^([^.])+([.](0|[1-9][0-9]*))+$` (one segment without dots,
/// then at least one coordinate without leading zeros).
[[nodiscard]] bool is_valid_uid(std::string_view text);
/// Whether `text` is a prefix: `^([^.])+([.](0|[1-9][0-9]*))*[.]$` ("ffn.", "ffn.3.").
[[nodiscard]] bool is_valid_prefix(std::string_view text);

/// A uid split at its last delimiter, or a prefix at the one before its trailing
/// delimiter: "e.1.2.3" and "e.1.2.3." both give ("e.1.2.", 3) (hivemind's split_uid).
struct SplitUid {
  std::string prefix;      ///< ends with the delimiter
  std::int64_t coordinate = 0;
};
/// Splits a uid or a non-root prefix; errc::invalid_argument for anything else (a root
/// prefix "ffn." has no coordinate) or a coordinate past 64 bits.
[[nodiscard]] Result<SplitUid> split_uid(std::string_view uid_or_prefix);

/// A uid's parts: the segment before the first delimiter and every coordinate.
struct UidParts {
  std::string root;                       ///< "ffn" of "ffn.3.14"
  std::vector<std::int64_t> coordinates;  ///< {3, 14}
};
/// The parts of a valid uid; errc::invalid_argument naming the uid and the grammar
/// otherwise, or when a coordinate does not fit 64 bits.
[[nodiscard]] Result<UidParts> parse_uid(std::string_view uid);

/// One block of a uid pattern: fixed text, or a range [begin, end) of coordinates.
struct PatternBlock {
  std::string text;        ///< the fixed text ("ffn", "3"); empty for a range
  std::int64_t begin = 0;  ///< a range's first coordinate
  std::int64_t end = 0;    ///< one past a range's last coordinate (0 for fixed text)
  [[nodiscard]] bool is_range() const { return text.empty(); }
};

/// A parsed uid pattern: delimiter-separated blocks, each fixed ("ffn", "3") or a range
/// "[from:to]" of coordinates from <= c < to, as hivemind's Server.create takes them.
class UidPattern {
 public:
  /// Parses `pattern`; errc::invalid_argument naming the bad block when a block is
  /// neither fixed text nor "[from:to]" with 0 <= from < to, or when the uids it makes
  /// would not be valid uids ("ffn.x.[0:3]", "ffn.03", "ffn").
  [[nodiscard]] static Result<UidPattern> parse(std::string_view pattern);

  [[nodiscard]] const std::vector<PatternBlock>& blocks() const { return blocks_; }
  /// How many distinct uids the pattern makes (saturates at UINT64_MAX).
  [[nodiscard]] std::uint64_t size() const;
  /// One uid drawn uniformly: each range block an independent uniform coordinate.
  [[nodiscard]] std::string sample(Rng& rng) const;
  /// Every uid of the pattern in lexicographic order of the coordinates ("e.0.0",
  /// "e.0.1", ...); errc::too_large when there are more than `limit`.
  [[nodiscard]] Result<std::vector<std::string>> expand(std::uint64_t limit = 1u << 20) const;

 private:
  std::vector<PatternBlock> blocks_;
};

/// Samples distinct uids from a pattern as hivemind's generate_uids_from_pattern does: up
/// to `attempts_per_expert` draws per wanted uid in all, repeats skipped, and (for a
/// server that joins a swarm) uids another server already declared dropped between
/// rounds: the host looks up each round's candidates and says which are taken.
class UidSampler {
 public:
  /// Wants `num_experts` uids from `pattern`; with no pattern, the uids are
  /// "expert.0", "expert.1", ... by attempt number. `attempts_per_expert` (hivemind's
  /// default 10) bounds the draws: num_experts * attempts_per_expert in all.
  UidSampler(std::optional<UidPattern> pattern, std::size_t num_experts, std::size_t attempts_per_expert = 10);

  /// The next round of candidates (new, never tried), as many as uids are still
  /// missing, drawing until the attempts run out; empty when done().
  [[nodiscard]] std::vector<std::string> next_candidates(Rng& rng);
  /// Keeps the candidates of the last round that are not in `taken` (uids found in the
  /// DHT); without a DHT pass an empty set.
  void accept(const std::vector<std::string>& candidates, const std::set<std::string>& taken);
  /// Enough uids found, or the attempts are spent.
  [[nodiscard]] bool done() const;
  /// The uids accepted so far, in the order they were drawn; fewer than wanted when the
  /// attempts ran out (the pattern may be too small or taken).
  [[nodiscard]] const std::vector<std::string>& found() const { return found_; }

 private:
  std::optional<UidPattern> pattern_;
  std::size_t wanted_;
  std::size_t total_attempts_;
  std::size_t remaining_attempts_;
  std::set<std::string> attempted_;
  std::vector<std::string> found_;
};

/// `num_experts` distinct uids sampled from `pattern` (no DHT to consult), or
/// "expert.0".. when `pattern` is empty; fewer when the attempts ran out.
/// Errors: those of UidPattern::parse.
[[nodiscard]] Result<std::vector<std::string>> generate_uids_from_pattern(std::size_t num_experts,
                                                                         std::string_view pattern, Rng& rng,
                                                                         std::size_t attempts_per_expert = 10);

}  // namespace apiary::core::moe
