#pragma once
/// apiary::ExpertServer: hivemind's MoE Server (reference §6.1) for C++ experts: the
/// built-in expert class of the options (`ffn` or `nop`) for each of its uids, served as
/// `ConnectionHandler.rpc_info` / `rpc_forward` / `rpc_backward` (and the streamed
/// `rpc_forward_stream` / `rpc_backward_stream`) by one
/// core::moe::ExpertServerRole on a runtime's gateway, and (given a Dht) declared in
/// the DHT as hivemind's DHTHandlerThread does: at start and every `update_period`, each
/// record living `expiration` seconds. RemoteExpert (api/remote_expert.hpp) calls it.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/fwd.hpp"
#include "core/moe/expert_server_role.hpp"
#include "core/role.hpp"
#include "messages/result.hpp"

namespace apiary {

class Dht;

/// How to start an expert server (hivemind-server's flags).
struct ExpertServerOptions {
  /// The built-in expert class of every expert: "ffn", "transformer", "nop",
  /// "det_dropout" or "nop_delay" (make_builtin_expert, api/expert_files.hpp).
  std::string expert_cls = "ffn";
  /// h: every expert takes and gives [batch, h] float32 (transformer: [batch, 128, h]
  /// and a [batch, 128] bool padding mask).
  std::uint32_t hidden_dim = 1024;
  /// The experts' uids; empty: `num_experts` uids drawn from `expert_pattern`.
  std::vector<std::string> expert_uids;
  /// A uid pattern ("expert.[0:4].[0:4]", core::moe::UidPattern); empty with no uids:
  /// "expert.0", "expert.1", ...
  std::string expert_pattern;
  /// How many uids to draw when `expert_uids` is empty (>= 1); with uids, 0 or their count.
  std::size_t num_experts = 0;
  /// Rows a batch holds at most, and the rows that make a pool ready (task pools).
  std::size_t max_batch_size = 4096;
  std::size_t min_batch_size = 1;
  /// A pool whose oldest task waited this long runs with fewer rows; none: never.
  std::optional<std::chrono::milliseconds> timeout;
  /// The SGD step of an ffn expert's backward.
  float learning_rate = 0.01f;
  /// Expert i (in the order of the uids) starts from parameters of seed + i; the seed
  /// also draws uids from the pattern.
  std::uint64_t seed = 0;
  /// Which host runs the server role: its own actor, or the transport thread (batches
  /// then run on the gateway's thread: only for small experts).
  core::HostKind host = core::HostKind::actor;
  /// Seconds between declarations in the DHT (hivemind: 30).
  double update_period = 30;
  /// Seconds a declaration lives; none: max(2 * update_period, 3), as hivemind.
  std::optional<double> expiration;
  /// A folder of checkpoints ("" for none): each expert that has a state (ffn,
  /// transformer, det_dropout) loads `<dir>/<uid>/checkpoint_last.bin` at start when it is there, and
  /// saves it there every checkpoint_period seconds and when the server stops.
  std::string checkpoint_dir;
  /// Seconds between checkpoints; none: update_period.
  std::optional<double> checkpoint_period;
  /// How long each batch of a nop_delay expert takes.
  std::chrono::milliseconds nop_delay{500};
};

/// What a server has done, for stats lines and tests.
struct ExpertServerCounters {
  core::moe::ExpertServerStats server;  ///< batches, rows, failures, refusals
  std::size_t declarations = 0;         ///< DHT declarations that at least one replica took
  std::size_t failed_declarations = 0;  ///< declarations that failed or no replica took
  std::size_t checkpoints = 0;          ///< checkpoints of every expert written
  std::string checkpoint_error;         ///< why the last checkpoint failed ("" when it did not)
};

/// One expert of a server: its uid and its compute.
struct ExpertSlot {
  std::string uid;
  std::unique_ptr<core::moe::ExpertBackend> backend;
};

class ExpertServer {
 public:
  /// Starts serving the experts of `options` on `runtime` (which must outlive the
  /// server) and, when `dht` is given (on the same runtime; it must outlive the server),
  /// declares them there at once and every update_period; with a pattern, uids that
  /// another server declared already are not drawn. Errors (errc::invalid_argument
  /// naming the option): an unknown expert class, hidden_dim 0, an invalid or repeated
  /// uid, uids and a pattern both given, num_experts 0 or not matching the uids, a bad
  /// pattern or one that cannot give num_experts uids, a pool config the task pools
  /// refuse, update_period or expiration not positive.
  static Result<std::unique_ptr<ExpertServer>> start(Runtime& runtime, const ExpertServerOptions& options,
                                                     Dht* dht = nullptr);
  /// Serves `experts` (backends of any kind: torch modules from Python, say) as start
  /// does, batching and declaring them as `options` say; its expert class, hidden_dim,
  /// uids, pattern, num_experts, learning_rate and seed are not used. Errors
  /// (errc::invalid_argument): no experts, an invalid or repeated uid, no backend, and
  /// those of the options used.
  static Result<std::unique_ptr<ExpertServer>> start(Runtime& runtime, std::vector<ExpertSlot> experts,
                                                     const ExpertServerOptions& options, Dht* dht = nullptr);
  ~ExpertServer();
  ExpertServer(const ExpertServer&) = delete;
  ExpertServer& operator=(const ExpertServer&) = delete;

  /// The uids served, in order (expert i has seed + i).
  [[nodiscard]] const std::vector<std::string>& uids() const;
  /// The multiaddr clients reach the server at (the runtime's, with /p2p/<PeerID>).
  [[nodiscard]] std::string address() const;
  /// Counters so far (the role's, published after every input it takes).
  [[nodiscard]] ExpertServerCounters counters() const;
  /// Writes a checkpoint of every expert now (with checkpoint_dir; otherwise nothing).
  /// Errors: errc::io naming the file, or the role's when it has stopped.
  [[nodiscard]] Status checkpoint();
  /// Stops declaring (the records then expire on their own) and serving, after a last
  /// checkpoint: calls after this fail at the caller. Idempotent.
  void stop();

 private:
  ExpertServer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The uids `options` name: the given ones, or num_experts drawn from the pattern (uids
/// that `dht` finds declared already are skipped when given). Errors as start's.
[[nodiscard]] Result<std::vector<std::string>> expert_uids_of(const ExpertServerOptions& options,
                                                              Dht* dht = nullptr);

}  // namespace apiary
