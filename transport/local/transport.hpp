#pragma once
/// The in-process backend: transports in one process exchange frames through a
/// shared Fabric, with the same threading contract as the UCX backend (one thread
/// per transport runs the handler). For unit tests and the actor-mode simulator;
/// never a stand-in for real UCX in integration tests.
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "transport/transport.hpp"

namespace apiary::transport::local {

class Transport;

/// The shared medium: a registry of running local transports by "host:port".
class Fabric {
 public:
  /// Registers `t` at host:port (port 0 picks the next free one); returns the key.
  Result<std::string> attach(Transport* t, const std::string& host, std::uint16_t port);
  /// Removes `key`; its contacts then see on_peer_down for it.
  void detach(const std::string& key);
  /// Posts `fn(target)` to the transport at `key`, if attached.
  bool deliver(const std::string& key, std::function<void(Transport&)> fn);

 private:
  std::mutex mu_;
  std::map<std::string, Transport*> nodes_;
  std::uint16_t next_port_ = 10000;
};

/// One in-process transport.
class Transport final : public transport::Transport {
 public:
  Transport(std::shared_ptr<Fabric> fabric, Config config);
  ~Transport() override;

  Result<std::string> start(Handler* handler, const std::string& host, std::uint16_t port) override;
  void post(std::function<void()> fn) override;
  void send(const PeerKey& to, Frame frame) override;
  void disconnect(const PeerKey& peer) override;
  void stop() override;
  Stats stats() const override;
  std::string describe(const PeerKey& peer) override;

  /// Called by the Fabric (on this transport's thread) when `peer` detached.
  void peer_gone(const PeerKey& peer);
  /// Called by the Fabric (on this transport's thread) with a frame from `from`.
  void receive(const PeerKey& from, Frame frame);

 private:
  void loop();

  std::shared_ptr<Fabric> fabric_;
  Config config_;
  Handler* handler_ = nullptr;
  std::string key_;
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::function<void()>> posted_;
  bool stopping_ = false;
  Stats stats_;

  std::set<PeerKey> contacts_;  ///< peers we exchanged frames with (transport thread)
};

}  // namespace apiary::transport::local
