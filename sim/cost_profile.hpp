#pragma once
/// What things cost on a machine, for the simulator to charge (`apiary sim calibrate`
/// measures it, `apiary sim ps --profile` uses it): the loopback link of our transport,
/// its processor time per message and per byte (and per byte of encryption), and the work of the training step (the
/// PS shard's sum and update per element, the logistic-regression gradient per value of
/// a batch). Written and read as a flat JSON object of these fields.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "core/effects.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::sim {

struct CostProfile {
  std::string machine;             ///< where it was measured (host name), for reports
  std::size_t cores = 1;           ///< processors the machine's processes share
  double latency_us = 0.0;         ///< one-way time of a small message over the link, beyond its processor time
  double message_us = 0.0;         ///< processor time of one message at each end (framing, hand-offs)
  double byte_ns = 0.0;            ///< processor time of one byte at each end (copies)
  double memcpy_gbps = 0.0;        ///< memcpy, GB/s (one core), for reports
  double sum_ns = 0.0;             ///< a synchronous step's sum: per value per replica gradient
  double sgd_ns = 0.0;             ///< SGD update, per value
  double adam_ns = 0.0;            ///< Adam update, per value
  double gradient_ns = 0.0;        ///< logistic-regression loss and gradient, per sample and feature
  double gradient_call_ns = 0.0;   ///< ... and per feature once a call (its accumulators)
  double loss_ns = 0.0;            ///< the loss alone (the chief's over the data set), per sample and feature
  /// The same on sparse data (a density below 1): the gradient per value other than zero
  /// of a batch and per feature once a call (w's gradient cleared), the loss per value
  /// other than zero of the data set.
  double sparse_gradient_ns = 0.0;
  double sparse_gradient_call_ns = 0.0;
  double sparse_loss_ns = 0.0;
  /// A replica's own work in an all-reduced step, per value of its all-reduced variables
  /// (the synchronizer's compression, the collective's encoding, sums and copies, the
  /// optimizer's update), by compressor: NoneCompressor, HorovodCompressor (float16),
  /// HorovodCompressorEF (float16 and the error feedback's residual).
  double allreduce_ns = 0.0;
  double allreduce_fp16_ns = 0.0;
  double allreduce_fp16_ef_ns = 0.0;
  /// The same for an all-reduced variable with sparse gradients, per value of the variable,
  /// on dense data (a batch touches every row: its rows found, gathered, summed, applied).
  double allreduce_sparse_ns = 0.0;
  /// ... and on sparse data (a density below 1): per value of the variable (its touched rows
  /// found), and per value of the rows a replica gathers from all of them (sent, received,
  /// summed and applied).
  double allreduce_sparse_base_ns = 0.0;
  double allreduce_sparse_row_ns = 0.0;
  /// The PS job's wire work per value of the dense PS variables, per replica and step
  /// (the push's and the pull's encoding and decoding at both ends, beyond the
  /// transport's per-byte cost and the shard's sum and update), charged to the replica.
  double ps_ns = 0.0;
  /// The same for a PS variable with sparse gradients, per value of the variable, on dense
  /// data (a batch touches every row, all of them sent).
  double ps_sparse_ns = 0.0;
  /// ... and on sparse data: per value of the variable (its touched rows found, its pull),
  /// and per row value a replica sends (the rows its batch touched).
  double ps_sparse_base_ns = 0.0;
  double ps_sparse_row_ns = 0.0;
  /// An all-reduced partitioned variable's gradient cut into its pieces and their
  /// averages put back together (into fresh buffers, as the synchronizer does), per value,
  /// replica and step; not charged for one that travels whole
  /// (core/collective/synchronizer.hpp). The PS client reads and writes pieces in place.
  double partition_ns = 0.0;
  /// Processor time of a message of `large_message_bytes` or more at each end beyond its
  /// bytes (the transport's rendezvous: its handshake, a receive posted for it), from
  /// bandwidth runs of 1 MiB and 16 MiB messages.
  double large_message_us = 0.0;
  double large_message_bytes = 65536;
  /// Processor time per byte at each end that encryption adds (Noise with AES-256-GCM,
  /// the default of apiary's connections; byte_ns is plaintext's), from bandwidth runs
  /// of both kinds.
  double secure_byte_ns = 0.0;
  /// Processor time a message costs beyond message_us when it reaches a process with
  /// nothing to do (its threads asleep, woken one after another: the transport's, the
  /// actor's), at that end; from lone round trips beside calls 64 in flight.
  double idle_message_us = 0.0;
  /// Processor time a second of a process with nothing to do (its threads' timed polls).
  double idle_cpu_us_per_s = 0.0;

  /// This profile for encrypted connections: byte_ns + secure_byte_ns per byte.
  [[nodiscard]] CostProfile encrypted() const;

  /// Processor time of a message of `bytes` at one end.
  [[nodiscard]] core::Duration message(std::size_t bytes) const;
  /// Processor time of what `sent` sends, at the sending end.
  [[nodiscard]] core::Duration sending(const struct Sent& sent) const;
  /// Processor time of one gradient of `batch` samples of `features`.
  [[nodiscard]] core::Duration gradient(std::size_t batch, std::size_t features) const;
  /// The same on sparse data, `nonzeros` values other than zero in the batch.
  [[nodiscard]] core::Duration sparse_gradient(std::size_t nonzeros, std::size_t features) const;
  /// Processor time of `count` values at `ns_each`.
  [[nodiscard]] static core::Duration work(double count, double ns_each);
};

/// The bytes a node sends in `effects` (calls, stream messages, replies) and how many
/// messages; those for which `stays` is true (a peer in the same process) are not counted.
struct Sent {
  std::size_t messages = 0;
  std::size_t bytes = 0;
  std::size_t large = 0;  ///< messages of `large_bytes` or more
};
[[nodiscard]] Sent sent_by(const core::Effects& effects, std::size_t large_bytes = 65536,
                           const std::function<bool(const core::Effect&)>& stays = nullptr);

/// The profile as a JSON object (one field per line).
[[nodiscard]] std::string to_json(const CostProfile& profile);
/// A profile from its JSON (`source` names it in errors). Errors: malformed, naming the
/// field (missing, not a number, negative; cores < 1).
[[nodiscard]] Result<CostProfile> parse_cost_profile(std::string_view json, std::string_view source);

}  // namespace apiary::sim
