#pragma once
/// The mixture-of-experts scenario (`apiary sim moe`): expert servers and trainer-side
/// clients on the simulated network. It is a workload, a checker and fault injectors:
///   - workload: S MoeServerHosts (core::moe::ExpertServerRole), server s serving the
///     FfnExperts `ffn.s.0` .. `ffn.s.(E-1)` of the uid grid, each of small hidden dim and
///     its own seed (moe_expert_config); C MoeClientHosts (core::moe::MoeClientRole), each
///     running T steps with k experts drawn per step from the whole grid by its own seed;
///     each link with its own seeded latency and an optional loss per message;
///   - faults (sim/faults.hpp): server `kill_server` killed at a virtual time
///     (`kill_at`, and back `restart_after` it with restart_at) or when client 0 begins
///     step `kill_at_step` (run_with_cued_kills); the clients hear the server go down
///     after `failure_detection`;
///   - checker: per step of every client whether it completed, the experts asked and
///     answered, the mixed output's checksum and the virtual step time; failed steps
///     with their errors; the seed and the trace hash (same config, same hash).
/// A run never hangs: it ends when every client has run its steps, or reports `hung` at
/// `max_time`.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/moe/expert_backend.hpp"
#include "core/moe/expert_server_role.hpp"
#include "core/moe/moe_client_role.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/role_host.hpp"
#include "sim/world.hpp"

namespace apiary::sim::scenarios {

/// One expert server as a simulated node.
using MoeServerHost = RoleHost<core::moe::ExpertServerRole>;
/// One trainer-side MoE client as a simulated node.
using MoeClientHost = RoleHost<core::moe::MoeClientRole>;

/// What to run.
struct MoeScenarioConfig {
  std::uint64_t seed = 1;               ///< seeds the World, the experts and the clients
  std::size_t servers = 4;              ///< S expert servers (>= 1)
  std::size_t experts_per_server = 4;   ///< E experts on each server (>= 1)
  std::uint32_t hidden_dim = 16;        ///< h of every expert and batch
  float learning_rate = 0.01f;          ///< every expert's SGD step in backward
  std::size_t clients = 2;              ///< C clients (>= 1)
  std::int64_t steps = 10;              ///< T steps per client (>= 0)
  std::size_t rows = 4;                 ///< rows per batch
  std::size_t k = 4;                    ///< experts asked per step (<= S * E)
  std::size_t k_min = 2;                ///< answers a step needs (1 <= k_min <= k)
  /// Every expert pool's batching (core::moe::PoolConfig): a batch runs at
  /// min_batch_size rows, or with fewer once its oldest task waited batch_timeout
  /// (required when min_batch_size > 1, else a lone task would wait for ever).
  std::size_t min_batch_size = 1;
  std::optional<core::Duration> batch_timeout;
  core::Duration timeout_after_k_min = std::chrono::milliseconds(20);  ///< see MoeClientConfig
  core::Duration call_timeout = std::chrono::milliseconds(500);        ///< deadline of each forward and backward call
  core::Duration min_latency = std::chrono::milliseconds(1);           ///< one-way, per link
  core::Duration max_latency = std::chrono::milliseconds(10);          ///< one-way, per link
  double loss = 0.0;                    ///< probability that a message is lost, in [0, 1]
  std::int64_t kill_server = -1;        ///< >= 0: the server to kill (< servers)
  std::optional<core::Duration> kill_at;  ///< kill it at this virtual time
  std::int64_t kill_at_step = -1;       ///< or (>= 0) when client 0 begins this step
  /// With kill_at: the server comes back this long after the kill (restart_at), its
  /// experts fresh from their seeds (a crash loses what they learned).
  std::optional<core::Duration> restart_after;
  /// After a kill, the time until the clients see the server's connections break.
  core::Duration failure_detection = std::chrono::milliseconds(100);
  core::Duration max_time = std::chrono::hours(1);  ///< virtual time after which the run is hung
};

/// Checks a MoeScenarioConfig; the error names the field, its value and the range.
[[nodiscard]] Status validate(const MoeScenarioConfig& config);

/// Expert `e` of server `s`: its uid ("ffn.s.e") and its config (seeded by the run's
/// seed, s and e), so a checker can build the same expert.
[[nodiscard]] std::string moe_expert_uid(std::size_t s, std::size_t e);
[[nodiscard]] core::moe::FfnConfig moe_expert_config(const MoeScenarioConfig& config, std::size_t s, std::size_t e);
/// The seed of client `c`'s Rng.
[[nodiscard]] std::uint64_t moe_client_seed(const MoeScenarioConfig& config, std::size_t c);

/// One client's run.
struct MoeClientReport {
  std::size_t client = 0;
  std::vector<core::moe::MoeStep> steps;  ///< every step it recorded, in order
  std::size_t completed = 0;              ///< steps with k_min answers
  std::size_t failed = 0;                 ///< steps below k_min
};

/// What a run measured.
struct MoeScenarioReport {
  std::uint64_t seed = 0;
  std::uint64_t trace_hash = 0;
  std::vector<MoeClientReport> clients;
  std::size_t completed = 0;       ///< steps completed, all clients
  std::size_t failed = 0;          ///< steps failed, all clients
  std::size_t asked = 0;           ///< expert calls of forward, all steps
  std::size_t answered = 0;        ///< of them answered in time
  std::size_t server_batches = 0;  ///< backend calls the servers ran (a restarted one: since its restart)
  std::string killed;              ///< what the fault injector killed and when ("" if nothing)
  bool hung = false;               ///< max_time passed, or nothing was left to happen, with steps to run
  core::TimePoint virtual_time{};  ///< virtual time at the end of the run
  WorldStats world;                ///< the World's counters at the end
  std::size_t anomalies = 0;       ///< World::anomalies() (0 in a correct run)
};

/// Runs the scenario to the end. Errors: a config that fails validate().
[[nodiscard]] Result<MoeScenarioReport> run_moe_scenario(const MoeScenarioConfig& config);

/// The report as readable lines: one per step, failed steps' errors, totals, seed and
/// trace hash.
[[nodiscard]] std::string format_report(const MoeScenarioReport& report);

/// Where the scenario's roles listen: server s at /ip4/10.0.0.s/tcp/5100, client c at
/// port 5200 of swarm_address(c).
inline constexpr std::uint16_t k_moe_server_port = 5100;
inline constexpr std::uint16_t k_moe_client_port = 5200;

}  // namespace apiary::sim::scenarios
