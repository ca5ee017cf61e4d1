#pragma once
/// The progress tracker as a role (core/role.hpp), for any host: it publishes this peer's
/// progress under "<run_id>_progress" every metadata_expiration / 2 and whenever the
/// trainer reports, reads every peer's back when the tracker says (next_fetch_time), and
/// answers the trainer's local calls. The DHT work goes to the process's DHT node role
/// as Asks (NodeOp); the node's validators sign the record (its subkey names this
/// peer's owner marker) and check the others'.
#include <cstdint>
#include <optional>
#include <string>

#include "core/optim/progress.hpp"
#include "core/role.hpp"

namespace apiary::core::optim {

/// Local methods. k_report_method: args ProgressReport; k_update_epoch_method: args
/// std::optional<std::int64_t> (the new epoch; empty: local + 1), completes with the new
/// epoch (std::int64_t); k_look_method: completes with a ProgressSnapshot at once;
/// k_fetch_method: reads the records now, completes with the snapshot after;
/// k_leave_method: publishes None (this peer left), completes with whether it was stored.
inline constexpr const char* k_report_method = "report";
inline constexpr const char* k_update_epoch_method = "update_epoch";
inline constexpr const char* k_look_method = "look";
inline constexpr const char* k_fetch_method = "fetch";
inline constexpr const char* k_leave_method = "leave";
/// k_pause_method (args bool: pause or resume; completes at once): while paused, reports
/// and fetches wait (hivemind's pause_updates: several calls take effect as one); on
/// resume what waited goes out.
inline constexpr const char* k_pause_method = "pause";

/// report_local_progress's arguments.
struct ProgressReport {
  std::int64_t epoch = 0;
  std::int64_t samples_accumulated = 0;
  bool update_global_samples = true;
};

/// What the trainer sees of the tracker.
struct ProgressSnapshot {
  LocalProgress local;
  GlobalProgress global;
  bool ready_to_update_epoch = false;
  double estimated_next_update_time = 0;  ///< DHT time
  bool fetched_this_epoch = false;
  std::size_t reports_stored = 0;         ///< reports the DHT accepted so far
  std::size_t fetches = 0;                ///< reads of the records so far
};

/// What a ProgressRole is made of.
struct ProgressRoleConfig {
  std::string run_id;
  ProgressConfig tracker;
  std::string peer_id;        ///< PeerID bytes, published in the record
  std::string owner_marker;   ///< "[owner:...]" of the node's ownership validator (the subkey)
  std::string dht_role = "dht";
  double dht_epoch = 0;       ///< DHT time = to_seconds(now) + dht_epoch
};

class ProgressRole final : public Role {
 public:
  explicit ProgressRole(ProgressRoleConfig config);

  [[nodiscard]] std::vector<std::string> handles() const override { return {}; }
  /// Start: the first report and fetch; TimerFired: the periodic report and the fetch
  /// the tracker scheduled; LocalCall: the methods above; LocalReply: a store or get done.
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

  [[nodiscard]] const ProgressTracker& tracker() const { return tracker_; }

 private:
  [[nodiscard]] double dht_time(TimePoint now) const { return to_seconds(now) + config_.dht_epoch; }
  [[nodiscard]] TimePoint at_dht_time(double t) const;
  [[nodiscard]] ProgressSnapshot snapshot(TimePoint now) const;
  /// Publishes the local progress (or None when leaving) unless a store is in flight, in
  /// which case it goes out when that one ends.
  [[nodiscard]] Effects publish(TimePoint now);
  [[nodiscard]] Effects fetch(TimePoint now);
  [[nodiscard]] Effects on_reply(TimePoint now, LocalReply& reply);
  [[nodiscard]] Effects on_call(TimePoint now, LocalCall& call);

  ProgressRoleConfig config_;
  ProgressTracker tracker_;
  OpId next_ask_ = 1;
  std::optional<OpId> store_in_flight_;
  std::optional<OpId> fetch_in_flight_;
  bool publish_again_ = false;    ///< a report came while a store was in flight (or paused)
  bool paused_ = false;           ///< reports and fetches wait (k_pause_method)
  bool fetch_waiting_ = false;    ///< a fetch came due while paused
  bool left_ = false;             ///< None was (or is being) published; nothing more goes out
  std::optional<OpId> leave_op_;  ///< the k_leave_method call waiting for its store
  std::vector<OpId> fetch_ops_;   ///< k_fetch_method calls waiting for the fetch
  double last_expiration_ = 0;    ///< of the last record sent
  std::size_t reports_stored_ = 0;
  std::size_t fetches_ = 0;
};

}  // namespace apiary::core::optim
