#pragma once
/// require_all: the DHT configs' validators (validate(ProtocolConfig), validate(RoutingConfig),
/// validate(TraverseConfig)) as tables of rules, each with the message of its breach.
#include <initializer_list>
#include <string>
#include <string_view>

#include "messages/result.hpp"

namespace apiary::core::dht {

/// One rule of a config: whether it `holds`, and the error message when it does not
/// (what was expected, what came, what to set).
struct Rule {
  bool holds;
  std::string_view broken;
};

/// Ok when every rule holds; else errc::invalid_argument with the first broken rule's
/// message.
inline Status require_all(std::initializer_list<Rule> rules) {
  for (const Rule& rule : rules) {
    if (!rule.holds) return Error{errc::invalid_argument, std::string(rule.broken)};
  }
  return ok_status();
}

}  // namespace apiary::core::dht
