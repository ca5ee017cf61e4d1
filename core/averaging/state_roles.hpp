#pragma once
/// State sharing as roles (core/role.hpp), for any host: StateSharingRole serves this
/// peer's state stream and declares it in the DHT; StateLoadingRole downloads a state
/// from donors (state_sharing.hpp: StateLoader). An averager's process hosts both beside
/// its AveragerRole; the declarations go to the process's DHT node as Asks.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/addressing.hpp"
#include "core/averaging/state_sharing.hpp"
#include "core/role.hpp"

namespace apiary::core::averaging {

/// StateLoadingRole's local method: args StateLoaderConfig; completes with the
/// DownloadedState, or why every donor failed.
inline constexpr const char* k_load_method = "load";
/// StateSharingRole's local method: args std::optional<double> (the new priority;
/// nullopt stops declaring); declares at once with it; completes with nothing.
/// A NaN priority completes with errc::invalid_argument and changes nothing.
inline constexpr const char* k_set_priority_method = "set_priority";

/// What a StateSharingRole is made of.
struct StateSharingConfig {
  /// This peer's PeerID bytes (the subkey of its declaration).
  PeerIdBytes peer_id;
  /// The experiment's prefix (the declaration key is state_sharing_key(prefix)).
  std::string prefix;
  /// The state stream's handle (with the averager's prefix, if the host uses one).
  std::string handle = k_download_state_handle;
  /// Declares this peer a donor with this priority every declare_period seconds, from
  /// Start on (nullopt: no declaration).
  std::optional<double> priority;
  double declare_period = 30.0;  ///< seconds (> 0)
  /// The name of the process's DHT node role (the target of the declarations' Asks).
  std::string dht_role = "dht";
  /// Builds this peer's state stream (make_state_stream) when a peer asks; null: the
  /// peer does not share (it answers with an empty stream). Runs on the host's thread.
  std::function<Result<std::vector<std::string>>()> state_stream;
  /// Whether the handle carries this peer's PeerID (several averagers on one transport).
  Addressing addressing;
};

/// Serves rpc_download_state and keeps this peer's declaration fresh.
class StateSharingRole final : public Role {
 public:
  explicit StateSharingRole(StateSharingConfig config);

  [[nodiscard]] std::vector<std::string> handles() const override { return config_.addressing.served({config_.handle}); }
  /// Start: the first declaration (when a priority is set); Request: the state stream;
  /// TimerFired: the next declaration (every period / 2, so one never expires);
  /// LocalCall k_set_priority_method: the priority from now on (hivemind's
  /// state_sharing_priority setter), declared at once.
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

  /// Declarations asked of the DHT so far, and those the DHT stored.
  [[nodiscard]] std::size_t declared() const { return declared_; }
  [[nodiscard]] std::size_t stored() const { return stored_; }

 private:
  [[nodiscard]] Effects declare(TimePoint now);

  StateSharingConfig config_;
  std::string value_;  ///< the encoded priority ("" when not declaring)
  OpId next_ask_ = 1;
  std::size_t declared_ = 0;
  std::size_t stored_ = 0;
};

/// Downloads a state, one download at a time.
class StateLoadingRole final : public Role {
 public:
  /// `caller`: PeerID bytes named on the downloads' calls ("": the transport's own);
  /// `addressing`: whether calls to donors carry their PeerIDs.
  explicit StateLoadingRole(std::string caller = {}, Addressing addressing = {})
      : caller_(std::move(caller)), addressing_(std::move(addressing)) {}

  [[nodiscard]] std::vector<std::string> handles() const override { return {}; }
  /// LocalCall k_load_method starts a download (another while one runs completes at once
  /// with errc::unavailable); the download's messages, ends and timer go to the loader.
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

 private:
  /// Names the caller on calls and completes the download when it finished.
  [[nodiscard]] Effects settle(Effects fx);

  std::string caller_;
  Addressing addressing_;
  std::optional<StateLoader> loader_;
  OpId op_ = 0;  ///< the running download's op
};

}  // namespace apiary::core::averaging
