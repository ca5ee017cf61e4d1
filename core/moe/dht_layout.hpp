#pragma once
/// How experts live in the DHT (hivemind's declare_experts and get_experts, reference
/// §6.2): each uid maps to its server's PeerID, and every prefix level of the uid maps,
/// under the next coordinate as subkey, to (uid, PeerID), so a beam search finds the
/// populated successors of a prefix with one get. A one-dimensional uid "expert.5"
/// stores itself under "expert.5." with subkey -1 (the flat trick). The top prefix
/// ("e.") is not stored: a search reads its first dimension one prefix at a time.
///
/// Pure: these functions make the records and read found values; the host stores and
/// gets them through its DHT node.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dht/node.hpp"
#include "core/moe/expert_uid.hpp"
#include "messages/result.hpp"

namespace apiary::core::moe {

/// One record of a declaration: `key` -> PeerID (no subkey), or `key`[`subkey`] ->
/// (uid, PeerID) for a prefix level.
struct ExpertEntry {
  std::string key;                     ///< a uid, or a prefix ending in the delimiter
  std::optional<std::int64_t> subkey;  ///< the next coordinate under `key` (-1: flat)
  ExpertInfo expert;                   ///< the uid and server the record names

  friend bool operator==(const ExpertEntry& a, const ExpertEntry& b) {
    return a.key == b.key && a.subkey == b.subkey && a.expert == b.expert;
  }
};

/// The records hivemind's declare_experts stores for `uids` served by `peer_id`: per uid,
/// uid -> peer, then for j = n-1 .. 1 of its n coordinates the prefix of its first j
/// coordinates with subkey c_{j+1}, and a 1-D uid under itself with subkey -1. Records of
/// one (key, subkey) appear once, at their first place, naming the last uid that wrote it
/// (so "e.1.2.3", "e.1.2.5", "e.2.0" make 7 records). errc::invalid_argument naming
/// the first uid that is not valid (nothing is declared then), or for an empty peer id.
[[nodiscard]] Result<std::vector<ExpertEntry>> declaration_entries(const std::vector<std::string>& uids,
                                                                   const std::string& peer_id);

/// The DHT record of `entry` expiring at `expiration` (DHT seconds): the key's id from
/// its msgpack str, the subkey as a msgpack int (or the regular-value tag), and the value
/// as hivemind serializes it: the PeerID as a str, or the tuple (uid, PeerID) as ext 0x40.
[[nodiscard]] dht::StoreItem store_item(const ExpertEntry& entry, double expiration);
/// store_item of every entry.
[[nodiscard]] std::vector<dht::StoreItem> store_items(const std::vector<ExpertEntry>& entries, double expiration);

/// The record by which hivemind's beam search remembers a prefix that had no experts:
/// `prefix`[-1] -> None until `expiration` (a host stores it in its own cache, as hivemind
/// does, so that other searches of this node skip the prefix too).
[[nodiscard]] dht::StoreItem negative_cache_item(const std::string& prefix, double expiration);

/// The expert a get of `uid` found (hivemind's get_experts): the server when the value
/// is a str; nullopt when nothing was found or the value is anything else.
[[nodiscard]] std::optional<ExpertInfo> expert_of(const std::string& uid, const std::optional<dht::FoundValue>& found);

/// The populated next coordinates of a prefix: coordinate -> an expert under it.
using Successors = std::map<std::int64_t, ExpertInfo>;

/// The successors a get of a prefix found: the entries of a dictionary value whose
/// subkey is an int and whose value is a pair (valid uid, str); anything else is skipped
/// (a negative-cache entry, a foreign record). Found nothing (nullopt) and found nothing
/// usable (empty) stay apart: only the first is a reason to cache the prefix as empty.
[[nodiscard]] std::optional<Successors> successors_of(const std::optional<dht::FoundValue>& found);

}  // namespace apiary::core::moe
