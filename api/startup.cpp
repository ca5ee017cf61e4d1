#include "api/startup.hpp"

#include <caf/logger.hpp>

#include <caf/actor_system_config.hpp>

#include "messages/identity/key_file.hpp"

namespace apiary::api {

Result<messages::Ed25519PrivateKey> load_identity(const std::string& identity_file) {
  if (identity_file.empty()) return messages::Ed25519PrivateKey::generate();
  auto key = messages::load_key_file(identity_file);
  if (!key && key.error().code == errc::not_found) {
    return make_error(errc::not_found, "identity file {}: no such file; create one with `apiary identity create {}`",
                      identity_file, identity_file);
  }
  return key;
}

std::unique_ptr<caf::actor_system_config> node_actor_system_config(std::size_t threads) {
  auto config = std::make_unique<caf::actor_system_config>();
  config->set("work-stealing.moderate-poll-attempts", 0);
  if (threads > 0) config->set("scheduler.max-threads", threads);
  return config;
}

CafThreadRelease::~CafThreadRelease() { caf::logger::set_current_actor_system(nullptr); }

}  // namespace apiary::api
