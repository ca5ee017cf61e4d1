#include "messages/identity/peer_address.hpp"

#include <ostream>

namespace apiary::messages {

namespace {

/// An AddressBook's bound: everything is forgotten once `capacity` addresses are known.
template <class Known>
void forget_when_full(Known& known, std::deque<std::string>& aliases, std::size_t capacity) {
  if (known.size() < capacity) return;
  known.clear();
  aliases.clear();
}

const std::string& no_text() {
  static const std::string empty;
  return empty;
}

}  // namespace

PeerAddress::PeerAddress(Multiaddr addr) : PeerAddress(std::move(addr), std::string_view{}) {}

PeerAddress::PeerAddress(Multiaddr addr, std::string_view id_text) {
  auto rep = std::make_shared<Rep>();
  rep->key = addr.host_port();
  if (addr.peer) {
    rep->multiaddr = addr.without_peer().to_string() + "/p2p/";
    rep->id_at = rep->multiaddr.size();
    if (id_text.empty()) {
      rep->multiaddr += addr.peer->to_string();
    } else {
      rep->multiaddr += id_text;
    }
  } else {
    rep->multiaddr = addr.to_string();
  }
  rep->parts = std::move(addr);
  rep->hash = std::hash<std::string>{}(rep->multiaddr);
  rep_ = std::move(rep);
}

Result<PeerAddress> PeerAddress::parse(std::string_view multiaddr) {
  auto m = Multiaddr::parse(multiaddr);
  if (!m) return m.error();
  std::string_view id_text;
  if (m->peer) {
    // The PeerID parsed from its base58 text, which is then canonical: the last
    // component (one trailing '/' allowed).
    std::string_view rest = multiaddr;
    if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
    id_text = rest.substr(rest.rfind('/') + 1);
  }
  return PeerAddress(std::move(*m), id_text);
}

Result<PeerAddress> PeerAddress::from_host_port(std::string_view text, const char* what, std::optional<PeerId> peer) {
  auto m = Multiaddr::from_host_port(text, what, std::move(peer));
  if (!m) return m.error();
  return PeerAddress(std::move(*m));
}

const std::string& PeerAddress::key() const { return rep_ ? rep_->key : no_text(); }

const std::string& PeerAddress::multiaddr() const { return rep_ ? rep_->multiaddr : no_text(); }

std::string PeerAddress::addressed(std::string_view handle) const {
  if (!rep_ || rep_->id_at == std::string::npos) return std::string(handle);
  const std::string_view id = std::string_view(rep_->multiaddr).substr(rep_->id_at);
  std::string out;
  out.reserve(handle.size() + 1 + id.size());
  out.append(handle).append(1, '@').append(id);
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

const PeerAddress& AddressBook::parse(std::string_view text) {
  static const PeerAddress none;
  auto known = known_.find(text);
  if (known != known_.end()) return known->second;
  auto parsed = PeerAddress::parse(text);
  if (!parsed) return none;
  forget_when_full(known_, aliases_, capacity_);
  std::string_view key = parsed->multiaddr();
  if (key != text) key = aliases_.emplace_back(text);
  return known_.emplace(key, std::move(*parsed)).first->second;
}

void AddressBook::add(const PeerAddress& address) {
  if (address.empty()) return;
  forget_when_full(known_, aliases_, capacity_);
  known_.emplace(address.multiaddr(), address);
}

std::ostream& operator<<(std::ostream& os, const PeerAddress& addr) { return os << addr.multiaddr(); }

}  // namespace apiary::messages
