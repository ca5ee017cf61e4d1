#include "core/averaging/dht_declarations.hpp"

#include <string>

#include "core/dht/msgpack_value.hpp"

namespace apiary::core::averaging {

namespace {
const std::string k_true("\xc3", 1);
const std::string k_false("\xc2", 1);
}  // namespace

dht::StoreItem declaration_item(const DhtDeclare& declare) {
  return dht::StoreItem{dht::NodeId::of_str_key(declare.group_key), dht::pack_bin(declare.peer),
                        declare.looking ? k_true : k_false, declare.expiration};
}

dht::NodeId averagers_key(const DhtGetAveragers& get) { return dht::NodeId::of_str_key(get.group_key); }

std::vector<Averager> declared_averagers(const std::optional<dht::FoundValue>& found, double dht_now) {
  std::vector<Averager> active;
  if (!found) return active;
  const auto* dict = std::get_if<dht::FoundValue::Dictionary>(&found->value);
  if (dict == nullptr) return active;
  for (const auto& [subkey, entry] : *dict) {
    if (entry.value != k_true || entry.expiration_time <= dht_now) continue;
    auto object = dht::unpack_one(subkey);
    if (!object) continue;
    const msgpack::object& o = object.value().get();
    if (o.type == msgpack::type::BIN) {
      active.push_back(Averager{std::string(o.via.bin.ptr, o.via.bin.size), entry.expiration_time});
    } else if (o.type == msgpack::type::STR) {
      active.push_back(Averager{std::string(o.via.str.ptr, o.via.str.size), entry.expiration_time});
    }
  }
  return active;
}

}  // namespace apiary::core::averaging
