#pragma once
/// PartReducer: the reducing side of butterfly all-reduce for the parts one peer owns.
///
/// Every sender of the group streams this peer its copy of each owned part, in part
/// order, with a weight. The reducer keeps each copy (where it lies, when the caller
/// hands it over as PartBytes) and its weight; part i is complete once every sender still
/// active for it has contributed, and then its average sum(w * x) / sum(w) and each
/// contributor's delta (average - its own copy) are ready to send back. A sender that
/// fails is excluded from every part it had not yet submitted, so the remaining parts
/// complete without it; what it did submit still counts.
///
/// Pure: no clocks, no waiting. The caller (the reducer's actor) feeds submissions and
/// failures as they happen and reads back which parts just completed. Inline, a part is
/// averaged in one pass when it completes, with reduce_part()'s arithmetic in sender
/// order: the same bits as a deferred job, whatever order the copies arrived in.
///
/// Deferred (constructed with `deferred = true`): the arithmetic leaves the core. The
/// reducer only collects copies and weights; a settled part becomes a ReduceJob
/// (take_jobs()) for the shell to run where it likes (a device actor, CPU or GPU), and
/// its result comes back through finish_job(). reduce_part() is the arithmetic's CPU
/// reference, the one the CPU device actor runs.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "messages/buffer.hpp"
#include "messages/result.hpp"

namespace apiary::core::averaging {

/// A settled part whose reduction runs outside the core (PartReducer, deferred mode).
struct ReduceJob {
  std::uint64_t id = 0;                    ///< the issuer's id; hand it back with the result
  std::vector<std::vector<float>> inputs;  ///< each contributor's copy, all of one length
  std::vector<float> weights;              ///< aligned with inputs: finite, >= 0, sum > 0
};

/// What a ReduceJob yields.
struct ReducedPart {
  std::vector<float> average;              ///< sum(w_i * x_i) / sum(w_i)
  std::vector<std::vector<float>> deltas;  ///< average - inputs[i], aligned with inputs
};

/// The CPU reference of a ReduceJob, in the order of the device kernels (cuda/kernels.hpp)
/// so that every device gives the same bits: acc = 0, then acc = acc + w_i * x_i for each
/// input in order (a float multiply then a float add), average = acc / float(sum of the
/// weights in double) (one float division), delta_i = average - x_i. The inputs' storage
/// is reused for the deltas. Errors: invalid_argument for no inputs, a length mismatch,
/// weights not aligned, a negative or non-finite weight, or a zero total weight.
[[nodiscard]] Result<ReducedPart> reduce_part(ReduceJob job);

/// reduce_part()'s average over copies held anywhere: out[k] = (0 + w_0 * x_0[k] + ...) /
/// float(sum of the weights in double), each x_j `size` floats at inputs[j] (any
/// alignment). `out` may be one of the inputs (each element is read before it is written).
void weighted_average(const std::vector<const std::byte*>& inputs, const std::vector<float>& weights,
                      std::size_t size, float* out);

/// Receives one contributor's result when its part is averaged (its delta, average - its
/// copy, or the average itself; see SinkGets): the values in order, a piece of `n` at a
/// time, each valid during the call only.
using PartSink = std::function<void(const float* values, std::size_t n)>;

/// What a PartSink receives.
enum class SinkGets {
  delta,    ///< average - the contributor's copy (hivemind's answer)
  average,  ///< the average (an answer that every member copies as it is)
};

/// weighted_average() that also hands input j's delta to `*delta_sinks[j]` (where given),
/// and the average to every sink of `average_sinks`, in the same pass, piece by piece,
/// before that piece of `out` is written: the same bits as computing average - x_j
/// afterwards, without reading the average and the copies again. A sink may write over
/// the piece of an input it was handed for (each piece is read before the sinks run).
void weighted_average(const std::vector<const std::byte*>& inputs, const std::vector<float>& weights,
                      std::size_t size, float* out, const std::vector<const PartSink*>& delta_sinks,
                      const std::vector<const PartSink*>& average_sinks = {});

/// Checks a ReduceJob as reduce_part() does, without computing: the number of elements
/// per input, or the error. For device actors that run the arithmetic themselves.
[[nodiscard]] Result<std::size_t> check_reduce_job(const ReduceJob& job);

/// A sender's copy of a part held where it already lies: `count` float32 values at
/// `bytes` (any alignment, little-endian, as on the wire), kept alive by `owner`. An empty
/// owner borrows: the caller keeps the bytes alive and unchanged until the part is
/// released or the reducer is gone.
struct PartBytes {
  const std::byte* bytes = nullptr;
  std::size_t count = 0;
  Buffer owner;
};

/// Where a part stands.
enum class PartState {
  pending,   ///< waiting for contributions from some active sender
  reducing,  ///< settled; its ReduceJob runs outside the core (deferred mode)
  averaged,  ///< complete; average and deltas available
  failed,    ///< complete but without an average: no weight to divide by (see error)
  released,  ///< complete and its buffers freed by release()
};

/// Averages the parts this peer reduces, contributed by `num_senders` senders.
class PartReducer {
 public:
  /// `part_sizes[i]`: elements in part i (the parts this peer owns, in order).
  /// `num_senders`: peers that send parts (the group minus auxiliary peers), indexed
  /// 0..num_senders-1 by the caller. With no senders every part fails at once.
  /// `deferred`: settled parts wait for take_jobs() / finish_job() instead of being
  /// averaged here.
  /// `average_dests[i]` (if given and not null): where part i's average is written
  /// (part_sizes[i] floats) instead of a buffer of the reducer's own. It may be the memory
  /// of a borrowed copy of that part, whose values (and so its delta) are then gone.
  PartReducer(const std::vector<std::size_t>& part_sizes, std::size_t num_senders,
              bool deferred = false, const std::vector<float*>& average_dests = {});

  /// Adds sender `sender`'s copy of part `part_index` (`count` floats at `values`) with
  /// weight `weight` (finite, >= 0). Each sender must submit parts 0, 1, 2, ... in order,
  /// each once. Returns the parts this submission completed (in order; empty or one).
  ///
  /// Errors: invalid_argument for an unknown sender, a bad weight or a size that is not
  /// the part's; protocol for a part out of range or out of order (a repeat or a skip);
  /// cancelled when the sender was already marked failed.
  [[nodiscard]] Result<std::vector<std::size_t>> accumulate(std::size_t sender,
                                                            std::size_t part_index,
                                                            const float* values, std::size_t count,
                                                            double weight);
  /// As above, keeping `values` as the sender's copy (no copy of the part is made).
  [[nodiscard]] Result<std::vector<std::size_t>> accumulate(std::size_t sender,
                                                            std::size_t part_index,
                                                            std::vector<float>&& values, double weight);
  /// As above, reading and keeping the copy where it lies (e.g. in the received message).
  /// With a `sink`, the sender's delta (or the average, as `gets` says) goes there when
  /// the part is averaged (inline: in the averaging pass; deferred: from the job's
  /// result), and the copy is freed then: delta() and delta_into() no longer serve it.
  [[nodiscard]] Result<std::vector<std::size_t>> accumulate(std::size_t sender,
                                                            std::size_t part_index,
                                                            PartBytes values, double weight,
                                                            PartSink sink = {},
                                                            SinkGets gets = SinkGets::delta);

  /// Marks `sender` failed: it is excluded from every part it has not submitted yet.
  /// Returns the parts that this completed (in order). Marking a sender twice is a no-op.
  /// Error (invalid_argument) for an unknown sender.
  [[nodiscard]] Result<std::vector<std::size_t>> on_sender_failed(std::size_t sender);

  /// The state of part `part_index` (< num_parts()); PartState::released if out of range.
  [[nodiscard]] PartState state(std::size_t part_index) const;

  /// The average of a complete part. Errors: not_found (index out of range),
  /// unavailable (pending), the part's own error (failed), or not_found (released).
  [[nodiscard]] Result<std::vector<float>> average(std::size_t part_index) const;

  /// average - sender's copy, elementwise, for a sender that contributed a complete part.
  /// Errors: as average(), plus not_found if the sender did not contribute the part, and
  /// unavailable if its delta went to its sink.
  [[nodiscard]] Result<std::vector<float>> delta(std::size_t sender, std::size_t part_index) const;

  /// Deferred mode: the settled parts not handed out yet, as jobs (id = part index), in
  /// part order. The contributors' copies move into the jobs. Empty inline.
  [[nodiscard]] std::vector<ReduceJob> take_jobs();

  /// Deferred mode: the result of part `part_index`'s job. A result makes the part
  /// averaged (its deltas are the contributors' in take_jobs() order); an error makes it
  /// failed (its contributors keep their values). Errors: not_found for a part that is
  /// not waiting for its job, invalid_argument for a result of the wrong shape (the part
  /// then fails too).
  [[nodiscard]] Status finish_job(std::size_t part_index, Result<ReducedPart> result);

  /// Elements [begin, begin + count) of delta(sender, part_index), written to `out`
  /// without an intermediate vector. Errors: as delta(), plus invalid_argument for a range
  /// beyond the part.
  [[nodiscard]] Status delta_into(std::size_t sender, std::size_t part_index, std::size_t begin,
                                  std::size_t count, float* out) const;

  /// Frees a complete part's buffers (average, contributions). Error (unavailable) for
  /// a pending part, not_found for an index out of range.
  [[nodiscard]] Status release(std::size_t part_index);

  /// Parts this peer reduces.
  [[nodiscard]] std::size_t num_parts() const { return parts_.size(); }
  /// Senders of the group.
  [[nodiscard]] std::size_t num_senders() const { return received_.size(); }
  /// Parts 0..num_complete()-1 are complete (averaged, failed or released).
  [[nodiscard]] std::size_t num_complete() const { return next_ready_; }
  /// True when every part is complete.
  [[nodiscard]] bool finished() const { return next_ready_ == parts_.size(); }
  /// Parts received from `sender` so far (0 for an unknown sender).
  [[nodiscard]] std::size_t parts_received(std::size_t sender) const;
  /// True if `sender` was marked failed.
  [[nodiscard]] bool sender_failed(std::size_t sender) const;

 private:
  /// One sender's copy of a part: its own floats (`values`; after a deferred job, its
  /// delta) or bytes held elsewhere (`held.bytes` set).
  struct Copy {
    bool present = false;
    std::vector<float> values;
    PartBytes held;
    PartSink sink;            ///< where its delta (or the average) goes when the part is averaged
    SinkGets gets = SinkGets::delta;
    bool sunk = false;  ///< the sink has its result; values and held are freed
    [[nodiscard]] const std::byte* data() const {
      return held.bytes != nullptr ? held.bytes : reinterpret_cast<const std::byte*>(values.data());
    }
  };

  /// The accumulation and results of one part.
  struct PartSlot {
    std::size_t size = 0;
    PartState state = PartState::pending;
    double denominator = 0.0;                             ///< sum of w (as float32 weights)
    std::size_t contributions = 0;                        ///< senders that submitted it
    std::vector<Copy> copies;                             ///< each sender's copy
    std::vector<float> weights;                           ///< each sender's weight
    std::vector<std::size_t> contributors;                ///< senders of its job (deferred)
    bool taken = false;                                   ///< its job was handed out
    std::vector<float> average;                           ///< the average, unless average_at
                                                          ///< is the caller's
    float* average_at = nullptr;                          ///< where the average lies
    Error error;                                          ///< why it failed
  };

  /// The checks and arithmetic of every accumulate(): `values` holds `count` floats.
  Result<std::vector<std::size_t>> add_copy(std::size_t sender, std::size_t part_index, Copy values,
                                            std::size_t count, double weight);
  /// Writes part i's average (to average_at, else to a new buffer of its own) and what
  /// the copies' sinks get.
  void average_part(std::size_t i);
  /// Frees the copies whose results went to their sinks.
  static void drop_sunk_copies(PartSlot& part);
  /// Settles the parts from next_pending_ on that no active sender still owes.
  std::vector<std::size_t> complete_ready_parts();
  /// Moves next_ready_ past the complete parts.
  void advance_ready();
  /// True if sender s has submitted part i or was excluded from it.
  [[nodiscard]] bool settled(std::size_t sender, std::size_t part_index) const;
  /// The slot of a complete, not released part, or the reason it has no results.
  [[nodiscard]] Result<const PartSlot*> results_of(std::size_t part_index) const;

  std::vector<PartSlot> parts_;
  std::vector<std::size_t> received_;                   ///< parts received per sender
  std::vector<std::optional<std::size_t>> failed_after_;  ///< parts submitted before failing
  std::size_t next_pending_ = 0;                        ///< first part not settled
  std::size_t next_ready_ = 0;                          ///< first part not complete
  std::size_t next_job_ = 0;                            ///< first part not handed out
  bool deferred_ = false;
};

}  // namespace apiary::core::averaging
