#include "messages/identity/peer_address.hpp"

#include <ostream>

namespace apiary::messages {

namespace {

const std::string& no_text() {
  static const std::string empty;
  return empty;
}

}  // namespace

PeerAddress::PeerAddress(Multiaddr addr) {
  auto rep = std::make_shared<Rep>();
  rep->multiaddr = addr.to_string();
  rep->key = addr.host_port();
  if (addr.peer) rep->suffix = "@" + addr.peer->to_string();
  rep->parts = std::move(addr);
  rep_ = std::move(rep);
}

Result<PeerAddress> PeerAddress::parse(std::string_view multiaddr) {
  auto m = Multiaddr::parse(multiaddr);
  if (!m) return m.error();
  return PeerAddress(std::move(*m));
}

Result<PeerAddress> PeerAddress::from_host_port(std::string_view text, const char* what, std::optional<PeerId> peer) {
  auto m = Multiaddr::from_host_port(text, what, std::move(peer));
  if (!m) return m.error();
  return PeerAddress(std::move(*m));
}

const std::string& PeerAddress::key() const { return rep_ ? rep_->key : no_text(); }

const std::string& PeerAddress::multiaddr() const { return rep_ ? rep_->multiaddr : no_text(); }

std::string PeerAddress::addressed(std::string_view handle) const {
  std::string out(handle);
  if (rep_) out += rep_->suffix;
  return out;
}

const Multiaddr& PeerAddress::parts() const {
  static const Multiaddr none{};
  return rep_ ? rep_->parts : none;
}

PeerAddress PeerAddress::with_peer(PeerId id) const { return PeerAddress(parts().with_peer(std::move(id))); }

PeerAddress PeerAddress::without_peer() const {
  if (!rep_ || !rep_->parts.peer) return *this;
  return PeerAddress(parts().without_peer());
}

std::vector<std::string> multiaddrs_of(const std::vector<PeerAddress>& addrs) {
  std::vector<std::string> out;
  out.reserve(addrs.size());
  for (const auto& a : addrs) out.push_back(a.multiaddr());
  return out;
}

const PeerAddress& AddressBook::parse(const std::string& text) {
  auto known = known_.find(text);
  if (known != known_.end()) return known->second;
  if (known_.size() >= capacity_) known_.clear();
  auto parsed = PeerAddress::parse(text);
  return known_.emplace(text, parsed ? std::move(*parsed) : PeerAddress{}).first->second;
}

std::ostream& operator<<(std::ostream& os, const PeerAddress& addr) { return os << addr.multiaddr(); }

}  // namespace apiary::messages
