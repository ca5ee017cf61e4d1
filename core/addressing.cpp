#include "core/addressing.hpp"

#include "messages/identity/multiaddr.hpp"

namespace apiary::core {

std::vector<std::string> Addressing::served(const std::vector<std::string>& bases) const {
  if (!self_) return bases;
  std::vector<std::string> out;
  for (const auto& base : bases) {
    out.push_back(base + "@" + self_->to_string());
    if (!shared_) out.push_back(base);
  }
  return out;
}

std::string Addressing::base_of(const std::string& handle) {
  const auto at = handle.find('@');
  return at == std::string::npos ? handle : handle.substr(0, at);
}

void Addressing::address(Effects& fx) {
  if (!self_) return;
  for (auto& effect : fx) {
    auto* call = std::get_if<Call>(&effect);
    if (call == nullptr) continue;
    auto known = suffixes_.find(call->peer);
    if (known == suffixes_.end()) {
      auto addr = messages::Multiaddr::parse(call->peer);
      std::string suffix = addr && addr->peer ? "@" + addr->peer->to_string() : std::string{};
      known = suffixes_.emplace(call->peer, std::move(suffix)).first;
    }
    call->handle += known->second;
  }
}

}  // namespace apiary::core
