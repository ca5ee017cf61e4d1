#pragma once
/// What every embedding facade does at start-up: load (or make) the node's identity,
/// fill its runtime's options and configure its actor system.
#include <cstddef>
#include <memory>
#include <string>

#include "api/runtime.hpp"
#include "messages/identity/ed25519.hpp"
#include "messages/result.hpp"

namespace caf {
class actor_system_config;
}

namespace apiary::api {

/// The key in `identity_file` (libp2p format), or a fresh key for this run when the name
/// is empty. Errors: not_found saying how to create the file, malformed, io.
Result<messages::Ed25519PrivateKey> load_identity(const std::string& identity_file);

/// An actor system configuration for a node: idle workers do not poll (CAF's 50 µs
/// sleeps would add 50-100 µs per hop); `threads` > 0 caps the scheduler's threads.
std::unique_ptr<caf::actor_system_config> node_actor_system_config(std::size_t threads);

/// The RuntimeOptions a facade's `options` name (DhtOptions, NodeOptions): their listen
/// address, identity file, transport mode and scheduler threads; the rest as defaulted.
template <class FacadeOptions>
RuntimeOptions runtime_options_of(const FacadeOptions& options) {
  RuntimeOptions ro;
  ro.listen = options.listen;
  ro.identity_file = options.identity_file;
  ro.mode = options.mode;
  ro.insecure = options.insecure;
  ro.authorization = options.authorization;
  ro.threads = options.threads;
  return ro;
}

/// Put at the top of a facade's start: when it returns, the calling thread lets go of
/// the actor system's logger. CAF 0.17 keeps a reference to it in a thread-local of
/// every thread that spawns an actor, and the system's destructor waits until the last
/// reference goes: a runtime started on one thread and stopped on another (a Python DHT
/// shut down from a worker thread) waited forever. Nothing here logs through CAF.
struct CafThreadRelease {
  CafThreadRelease() = default;
  ~CafThreadRelease();
  CafThreadRelease(const CafThreadRelease&) = delete;
  CafThreadRelease& operator=(const CafThreadRelease&) = delete;
};

}  // namespace apiary::api
