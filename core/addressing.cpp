#include "core/addressing.hpp"


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
    if (call != nullptr) call->handle = call->peer.addressed(call->handle);
  }
}

}  // namespace apiary::core
