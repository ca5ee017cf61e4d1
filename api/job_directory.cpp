#include "api/job_directory.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "actors/rpc.hpp"
#include "core/dht/msgpack_value.hpp"
#include "core/ps/wire.hpp"
#include "messages/identity/multiaddr.hpp"

namespace apiary {

Status wait_until_serving(actors::Gateway& gateway, const std::string& device, const std::string& at,
                          std::chrono::milliseconds patience, const std::string& who, const std::string& hint,
                          const char* handle, const char* what, const std::atomic<bool>* stop) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  const std::string malformed("\x0a\xff\xff\xff\xff\x0f", 6);  // a length past the end: never parses
  for (;;) {
    auto pending = actors::unary_call(gateway, at, handle, Buffer::copy_of(malformed),
                                      std::chrono::milliseconds(2000));
    auto answer = pending.answer.get();
    const auto code = answer ? errc::ok : answer.error().code;
    const bool absent = code == errc::not_found || code == errc::unavailable || code == errc::peer_down ||
                        code == errc::deadline_exceeded;
    if (!absent) return ok_status();
    if (std::chrono::steady_clock::now() >= deadline) {
      return make_error(errc::unavailable, "{}: {} {} at {} did not answer within {} ms: {}", who, what, device, at,
                        patience.count(), hint);
    }
    if (stop != nullptr && *stop) {
      return make_error(errc::cancelled, "{}: stopped while waiting for {} {} at {}", who, what, device, at);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::string ps_key(const std::string& job, const std::string& device) { return job + ".ps." + device; }

std::string proxy_key(const std::string& job, const std::string& node) { return job + ".proxy." + node; }

AddressPublisher::AddressPublisher(Dht& dht) : dht_(dht), thread_([this] { loop(); }) {}

AddressPublisher::~AddressPublisher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void AddressPublisher::add(const std::string& key, const std::string& address) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    records_[key] = address;
    dirty_ = true;
  }
  wake_.notify_all();
}

void AddressPublisher::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    // Sleep until the next refresh, or until a record is added.
    wake_.wait_for(lock, std::chrono::duration<double>(k_refresh_s), [this] { return stop_ || dirty_; });
    if (stop_) break;
    dirty_ = false;
    std::vector<DhtStoreItem> items;
    const double expiration = Dht::now() + k_lifetime_s;
    for (const auto& [key, address] : records_) {
      items.push_back(DhtStoreItem{DhtKey::str(key), core::dht::pack_str(address), expiration, std::nullopt});
    }
    if (items.empty()) continue;
    lock.unlock();
    // A failed store is retried at the next refresh; readers keep polling meanwhile.
    // Waits in short slices, so that stopping never waits for a store to a dead peer.
    auto stored = dht_.store_many(std::move(items));
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(k_refresh_s);
    while (!stop_ && std::chrono::steady_clock::now() < give_up &&
           stored.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    }
    lock.lock();
  }
}

namespace {

/// The "host:port" a record holds. Errors: malformed.
Result<std::string> address_of(const std::string& key, const core::dht::FoundValue& found) {
  const auto* packed = std::get_if<std::string>(&found.value);
  if (packed == nullptr) {
    return make_error(errc::malformed, "DHT key {}: expected a \"host:port\" string, got a dictionary value; "
                      "another job may use this --job name, pick another", key);
  }
  auto object = core::dht::unpack_one(*packed);
  if (!object || object->get().type != msgpack::type::STR) {
    return make_error(errc::malformed, "DHT key {}: expected a \"host:port\" string, got another msgpack value; "
                      "another job may use this --job name, pick another", key);
  }
  std::string text = object->get().as<std::string>();
  if (auto hp = messages::Multiaddr::from_host_port(text, "DHT record"); !hp) {
    return make_error(errc::malformed, "DHT key {}: {}; another job may use this --job name, pick another", key,
                      hp.error().message);
  }
  return text;
}

}  // namespace

Result<std::map<std::string, std::string>> find_addresses(Dht& dht, const std::map<std::string, std::string>& wanted,
                                                          std::chrono::milliseconds timeout, const char* what,
                                                          const std::string& hint, std::chrono::milliseconds poll) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::map<std::string, std::string> found;
  while (true) {
    std::vector<std::string> names;
    std::vector<DhtKey> keys;
    for (const auto& [name, key] : wanted) {
      if (found.count(name) != 0) continue;
      names.push_back(name);
      keys.push_back(DhtKey::str(key));
    }
    if (names.empty()) return found;
    auto got = dht.get_many(keys, /*latest=*/true);  // the newest record: a restarted PS moved
    if (got.wait_until(deadline) == std::future_status::ready) {
      auto values = got.get();
      if (!values) return values.error();
      for (std::size_t i = 0; i < names.size() && i < values->size(); ++i) {
        if (!(*values)[i]) continue;
        auto address = address_of(wanted.at(names[i]), *(*values)[i]);
        if (!address) return address.error();
        found[names[i]] = *address;
      }
      if (found.size() == wanted.size()) return found;
    }
    if (std::chrono::steady_clock::now() + poll >= deadline) {
      std::vector<std::string> missing;
      for (const auto& [name, key] : wanted) {
        if (found.count(name) == 0) missing.push_back(name + " (key " + key + ")");
      }
      return make_error(errc::deadline_exceeded,
                        "expected every {} in the DHT within {} ms (--timeout-ms), {} not found: {}; {}", what,
                        timeout.count(), missing.size(), fmt::join(missing, ", "), hint);
    }
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace apiary
