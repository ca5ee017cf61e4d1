#pragma once
/// How the processes of one job find each other through a DHT instead of (or besides)
/// addresses given up front: each process publishes its "host:port" under keys of the job
/// and refreshes them while it serves; the others read the keys they have no address for
/// until they appear or their patience runs out. A process that died stops being found
/// about a record's lifetime after its last refresh.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "actors/gateway.hpp"
#include "api/dht.hpp"
#include "core/ps/wire.hpp"
#include "messages/result.hpp"

namespace apiary {

/// Waits until the PS device `device` at `at` ("host:port") serves: its `handle` (the
/// join handle; a node proxy's: the pull handle) refuses a malformed request rather than
/// being unknown or unreachable, asked every 100 ms, so processes of a job may start in
/// any order. Errors: unavailable when `patience` passes first, naming `who` (the
/// waiting replica), `what` and the device, the address and `hint` (what to start);
/// cancelled as soon as `stop` (when given) is set.
[[nodiscard]] Status wait_until_serving(actors::Gateway& gateway, const std::string& device, const std::string& at,
                                        std::chrono::milliseconds patience, const std::string& who,
                                        const std::string& hint, const char* handle = core::ps::k_ps_join_handle,
                                        const char* what = "PS device", const std::atomic<bool>* stop = nullptr);

/// The DHT key a PS process of job `job` publishes its "host:port" under (`<job>.ps.<device>`).
[[nodiscard]] std::string ps_key(const std::string& job, const std::string& device);
/// The DHT key the replica hosting node `node`'s proxy publishes its "host:port" under
/// (`<job>.proxy.<node>`).
[[nodiscard]] std::string proxy_key(const std::string& job, const std::string& node);

/// Publishes records (key -> "host:port") and refreshes them every `refresh` seconds,
/// each living `lifetime` seconds, on its own thread until destroyed.
class AddressPublisher {
 public:
  /// Seconds a published address stays in the DHT without a refresh.
  static constexpr double k_lifetime_s = 30.0;
  /// Seconds between refreshes: a third of the lifetime, so two lost refreshes in a row
  /// still leave the record alive.
  static constexpr double k_refresh_s = 10.0;

  /// Publishes on `dht`, which must outlive this.
  explicit AddressPublisher(Dht& dht);
  /// Stops refreshing (the records then expire on their own).
  ~AddressPublisher();
  AddressPublisher(const AddressPublisher&) = delete;
  AddressPublisher& operator=(const AddressPublisher&) = delete;

  /// Publishes `address` under `key` now and at every refresh.
  void add(const std::string& key, const std::string& address);

 private:
  void loop();

  Dht& dht_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::string, std::string> records_;
  std::atomic<bool> stop_{false};
  bool dirty_ = false;
  std::thread thread_;
};

/// Reads every key of `wanted` (name -> key) until each holds a "host:port" or `timeout`
/// passes, every `poll`; returns name -> "host:port". `what` names the kind of thing
/// looked up ("PS device"), `hint` says what to do when some are missing. Errors:
/// deadline_exceeded naming the names not found; malformed for a record that is not a
/// "host:port" string.
[[nodiscard]] Result<std::map<std::string, std::string>> find_addresses(
    Dht& dht, const std::map<std::string, std::string>& wanted, std::chrono::milliseconds timeout, const char* what,
    const std::string& hint, std::chrono::milliseconds poll = std::chrono::milliseconds(200));

}  // namespace apiary
