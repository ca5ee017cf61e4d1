#include "core/role.hpp"

#include <algorithm>

namespace apiary::core {

namespace {
bool is_local(const Effect& e) { return std::holds_alternative<Complete>(e) || std::holds_alternative<Ask>(e); }
}  // namespace

LocalEffects take_local(Effects& fx) {
  LocalEffects out;
  auto first = std::find_if(fx.begin(), fx.end(), is_local);
  if (first == fx.end()) return out;
  auto keep = first;
  for (auto it = first; it != fx.end(); ++it) {
    if (auto* done = std::get_if<Complete>(&*it)) {
      out.completed.push_back(std::move(*done));
    } else if (auto* ask = std::get_if<Ask>(&*it)) {
      out.asks.push_back(std::move(*ask));
    } else {
      *keep++ = std::move(*it);
    }
  }
  fx.erase(keep, fx.end());
  return out;
}

void name_caller(Effects& fx, const std::string& caller) {
  if (caller.empty()) return;
  for (auto& effect : fx) {
    if (auto* call = std::get_if<Call>(&effect)) call->caller = caller;
  }
}

LocalReply no_such_role(const Ask& ask) {
  return LocalReply{ask.op, make_error(errc::not_found, "no role named '{}' here", ask.role)};
}

}  // namespace apiary::core
