#pragma once
/// Peer addresses written as literals in tests: "/ip4/127.0.0.1/tcp/1"_addr, and
/// test_addr(n) for the n-th of a set of distinct made-up peers. A literal that does not
/// parse fails the test run at once (it is a mistake in the test).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "messages/identity/peer_address.hpp"

namespace apiary::test {

/// The address `text` names (a test's own text: one that does not parse aborts).
inline messages::PeerAddress addr_of(const std::string& text) {
  auto addr = messages::PeerAddress::parse(text);
  if (!addr) {
    std::fprintf(stderr, "bad peer address in a test '%s': %s\n", text.c_str(), addr.error().message.c_str());
    std::abort();
  }
  return std::move(*addr);
}

inline messages::PeerAddress operator""_addr(const char* text, std::size_t size) {
  return addr_of(std::string(text, size));
}

/// Made-up peer `n`: /ip4/10.0.0.1/tcp/(1000 + n), distinct for every n < 64536.
inline messages::PeerAddress test_addr(std::size_t n) {
  return messages::PeerAddress(messages::Multiaddr{"10.0.0.1", false, static_cast<std::uint16_t>(1000 + n), {}, {}});
}

/// Made-up peer `name`: /ip4/10.0.0.2/tcp/4000/p2p/<a PeerID derived from the name>,
/// the same for the same name and distinct for distinct names.
inline messages::PeerAddress test_peer(std::string_view name) {
  std::string digest("\x12\x20", 2);  // sha2-256 multihash of 32 bytes
  for (std::uint64_t lane = 0; lane < 4; ++lane) {
    std::uint64_t h = 14695981039346656037ULL ^ (lane * 0x9e3779b97f4a7c15ULL);
    for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    h ^= h >> 29;
    for (int b = 0; b < 8; ++b) digest.push_back(static_cast<char>((h >> (8 * b)) & 0xff));
  }
  auto id = messages::PeerId::from_bytes(digest);
  if (!id) std::abort();
  return messages::PeerAddress(messages::Multiaddr{"10.0.0.2", false, 4000, std::move(*id), {}});
}

}  // namespace apiary::test
