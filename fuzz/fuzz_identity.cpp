// libFuzzer target: the identity parsers fed from the network and from files, by the
// input's first byte: multiaddrs, peer addresses, PeerIDs (text and bytes), base58, and
// the libp2p key protobufs (public and private). None may crash or leak; a parse that
// succeeds must print back to text the parser takes again.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "messages/identity/base58.hpp"
#include "messages/identity/key_proto.hpp"
#include "messages/identity/multiaddr.hpp"
#include "messages/identity/peer_address.hpp"
#include "messages/identity/peer_id.hpp"

namespace m = apiary::messages;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0:
      if (auto a = m::Multiaddr::parse(input); a.ok()) {
        auto again = m::Multiaddr::parse(a->to_string());
        if (!again.ok() || !(*again == *a)) __builtin_trap();
        // The transport key (a relayed one names the relay and the peer) parses back too.
        auto key = m::Multiaddr::from_host_port(a->host_port(), "key", a->peer);
        if (!key.ok() || !(*key == *a)) __builtin_trap();
      }
      break;
    case 1:
      if (auto a = m::PeerAddress::parse(input); a.ok()) {
        if (!m::PeerAddress::parse(a->multiaddr()).ok()) __builtin_trap();
      }
      break;
    case 2:
      if (auto id = m::PeerId::from_string(input); id.ok()) {
        if (!m::PeerId::from_string(id->to_string()).ok()) __builtin_trap();
      }
      break;
    case 3:
      if (auto id = m::PeerId::from_bytes(input); id.ok()) {
        if (!m::PeerId::from_bytes(id->bytes()).ok()) __builtin_trap();
      }
      break;
    case 4:
      (void)m::base58_decode(input);
      break;
    default:
      (void)m::decode_public_key_proto(input);
      (void)m::decode_private_key_proto(input);
      break;
  }
  return 0;
}
