#pragma once
/// One replica's AllReduceSynchronizer for every all-reduced variable of an ArPlan: per
/// step it turns the replica's whole-variable gradients into one collective input per
/// fusion group (each tensor compressed as its synchronizer says) and the collectives'
/// averages back into whole-variable gradients, which the replica then applies with its
/// own optimizer (reference autodist.md §3.4: each replica keeps its own copy).
///
/// Compressors (§3.6, with §3.8 quirk 3 fixed):
///  - NoneCompressor: the gradient as it is, float32 on the wire (codec NONE).
///  - HorovodCompressor: c = fp16(g), float16 on the wire (codec FLOAT16); the average
///    comes back as float32.
///  - HorovodCompressorEF: x = g + e, c = fp16(x), e = x - c, with the residual e kept
///    per tensor from one step to the next (e_0 = 0), so that over T steps the sum of
///    what was sent stays within one fp16 rounding of the sum of the gradients.
/// The tensor handed to the collective is the decompressed c (values exactly
/// representable in fp16), so encoding it as FLOAT16 loses nothing more.
///
/// Sparse variables (ArPlan::sparse) take another path: one gather per step carries this
/// replica's weight and, per sparse variable, its gradient rows and values (float32);
/// every replica then sums the gathered rows in rank order, weighted, and divides by the
/// sum of the weights: the mean of the replicas' sparse gradients (with equal batches,
/// the sum over replicas divided by their number), on the touched rows only.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/collective/ar_plan.hpp"
#include "core/ps/optimizer.hpp"
#include "core/ps/partition.hpp"
#include "messages/result.hpp"
#include "messages/tensor/compressors.hpp"
#include "runtime.pb.h"

namespace apiary::core::collective {

/// What one fused collective all-reduces this step.
struct CollectiveInput {
  std::int32_t group = 0;                   ///< the fusion group
  Transport transport = Transport::ring;    ///< how it runs
  std::vector<std::vector<float>> tensors;  ///< the group's tensors, in plan order
  std::vector<pb::CompressionType> codecs;  ///< wire codec of each tensor
};

/// The rows of a dense gradient (rows of `row_width` values, row-major) that hold any
/// non-zero value, as a sparse gradient: what an embedding lookup's gradient touches.
[[nodiscard]] ps::SparseGradient touched_rows(const std::vector<float>& dense, std::size_t row_width);

/// The per-replica, per-step compress / all-reduce / decompress bookkeeping.
class Synchronizer {
 public:
  /// A synchronizer for `plan` (as plan_allreduce made it). Errors: invalid_argument
  /// when a variable's partitioner does not fit its shape.
  [[nodiscard]] static Result<Synchronizer> create(ArPlan plan);

  /// This step's collective inputs, one per group in plan.groups order, from the
  /// whole-variable gradients (by name; every planned variable needs one, of its size).
  /// Updates the error-feedback residuals. Errors: invalid_argument on a missing or
  /// mis-sized gradient (no residual changes then). The gradient of a variable that is
  /// one uncompressed piece moves into its input as it is (no copy); so does that of a
  /// variable sent whole (whole()), as one tensor in place of its pieces.
  [[nodiscard]] Result<std::vector<CollectiveInput>> prepare(std::map<std::string, std::vector<float>> gradients);

  /// The averaged whole-variable gradients from the collectives' outputs (per group in
  /// plan.groups order, per tensor of the group's input); a variable of one piece, or
  /// sent whole, takes its output's buffer. Errors: invalid_argument on a wrong count or size.
  [[nodiscard]] Result<std::map<std::string, std::vector<float>>> assemble(
      std::vector<std::vector<std::vector<float>>> outputs) const;

  /// This step's gather payload for the sparse variables (by name; every planned sparse
  /// variable needs one, rows inside its first axis, row_width values per row), with this
  /// replica's `weight`. Errors: invalid_argument naming the variable.
  [[nodiscard]] Result<std::string> prepare_sparse(const std::map<std::string, ps::SparseGradient>& gradients,
                                                   double weight) const;

  /// The averaged sparse gradients from every replica's payload (rank order): per
  /// variable, the touched rows ascending and sum(w_i g_i[row]) / sum(w_i) (a replica that
  /// did not touch a row adds 0 there). Errors: malformed on a payload that does not fit
  /// the plan.
  [[nodiscard]] Result<std::map<std::string, ps::SparseGradient>> assemble_sparse(
      const std::vector<std::string>& gathered) const;

  /// The error-feedback residual of tensor `name` (float32; empty when it keeps none).
  [[nodiscard]] const std::vector<float>& residual(const std::string& name) const { return ef_.residual(name); }
  /// The plan.
  [[nodiscard]] const ArPlan& plan() const { return plan_; }
  /// Whether variable `v` (index into plan().variables) of several pieces travels whole:
  /// its pieces are blocks of the variable one after the other (split along its first
  /// axis of more than one entry), all uncompressed and one after the other in one fusion
  /// group, whose collective would carry them back to back anyway. Its gradient then goes
  /// as one tensor, neither cut into pieces nor put back together (same values, same
  /// bits: a mean is taken value by value).
  [[nodiscard]] bool whole(std::size_t v) const { return v < whole_.size() && whole_[v]; }

 private:
  /// One tensor of a group's input: the plan tensor `tensor`, or variable `variable` whole.
  struct Slot {
    std::size_t tensor = 0;
    std::optional<std::size_t> variable;
  };
  Synchronizer(ArPlan plan, std::vector<std::vector<ps::ShardLayout>> layouts);
  /// `values` through the tensor's compressor, back as float32.
  [[nodiscard]] Result<std::vector<float>> compress(const ArTensor& t, std::vector<float> values);

  ArPlan plan_;
  std::vector<std::vector<ps::ShardLayout>> layouts_;  ///< per variable
  std::vector<bool> whole_;                            ///< per variable: sent whole
  std::vector<std::vector<Slot>> slots_;               ///< per group: its input's tensors
  messages::HorovodCompressorEF ef_;
};

}  // namespace apiary::core::collective
