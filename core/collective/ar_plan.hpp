#pragma once
/// The all-reduce side of a strategy laid out for a runtime (reference autodist.md §1.1,
/// §3.4-§3.6): which tensors (whole variables, or the pieces of a partitioned one) are
/// all-reduced, with which compressor and collective implementation, and how they fuse:
/// every tensor of one AllReduceSynchronizer.group travels in ONE collective per step
/// (AutoDist's scoped-allocator fusion, done explicitly). Every replica builds the same
/// plan from the same inputs, so groups agree everywhere without being sent.
///
/// Spec: with a GPU on every replica (ArOptions::have_gpus), AUTO and NCCL run over NCCL
/// (Transport::nccl: the replicas' GPUs, actors/collective/nccl_group.hpp); otherwise
/// AUTO runs as RING, and NCCL, a hint as in TensorFlow's communication_hint, runs as
/// RING too and the plan says so in `notes`, unless `strict_nccl` makes it an error.
/// One fusion group runs over one transport: tensors of one group with different
/// transports are refused.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/ps/replica.hpp"
#include "core/strategy/graph_item.hpp"
#include "messages/result.hpp"
#include "strategy.pb.h"

namespace apiary::core::collective {

/// How a collective runs.
enum class Transport { ring, nccl };
/// What a tensor goes through before and after the collective.
enum class CompressorKind {
  none,        ///< NoneCompressor: float32 on the wire
  horovod,     ///< HorovodCompressor: float16 on the wire (a real fp16 cast, §3.8 quirk 3)
  horovod_ef,  ///< HorovodCompressorEF: float16 with a persistent error-feedback residual
};

/// "RING", "NCCL".
const char* to_string(Transport t);
/// "NoneCompressor", "HorovodCompressor", "HorovodCompressorEF".
const char* to_string(CompressorKind c);

/// One all-reduced tensor.
struct ArTensor {
  std::string name;          ///< the variable's name, or its part's ("w/part_0:0")
  std::size_t variable = 0;  ///< index into ArPlan::variables
  std::size_t piece = 0;     ///< index among the variable's pieces
  std::size_t size = 0;      ///< float32 values
  std::int32_t group = 0;    ///< fusion group
  CompressorKind compressor = CompressorKind::none;
  Transport transport = Transport::ring;
};

/// One fused collective: the tensors of one group, in node_config order.
struct ArGroup {
  std::int32_t group = 0;            ///< AllReduceSynchronizer.group
  std::vector<std::size_t> tensors;  ///< indices into ArPlan::tensors
  Transport transport = Transport::ring;
};

/// One sparse variable under all-reduce: every step, each replica's gradient rows
/// (indices and values) are gathered by every replica and averaged there (rows no
/// replica touched stay untouched). Its pieces, if partitioned, are gathered whole.
struct ArSparse {
  std::string name;                 ///< the variable's name
  std::vector<std::int64_t> shape;  ///< its whole shape (rows along axis 0)
  std::int64_t rows = 0;            ///< shape[0] (1 for a scalar)
  std::size_t row_width = 1;        ///< values per row: the product of shape[1:]
};

/// The all-reduce layout of a whole strategy.
struct ArPlan {
  std::vector<ps::VariablePlan> variables;  ///< per dense variable, node_config order (shards: tensor ids)
  std::vector<ArSparse> sparse;             ///< sparse variables, node_config order: one gather per step for all
  /// Mixed strategies (ArOptions::allow_ps): the variables a PSSynchronizer serves,
  /// node_config order; the replicas pull and push them through the PS (ps_part()).
  std::vector<std::string> ps_variables;
  std::vector<ArTensor> tensors;            ///< every all-reduced tensor
  std::vector<ArGroup> groups;              ///< ascending group index: one collective each per step
  std::vector<std::string> replicas;        ///< graph_config.replicas (the group's members, in rank order)
  std::vector<std::string> notes;           ///< decisions worth printing (NCCL run as RING, ...)
};

/// What the cluster offers.
struct ArOptions {
  /// Every replica device is a GPU (NCCL needs one per rank): AUTO and NCCL run over NCCL.
  bool have_gpus = false;
  bool strict_nccl = false;  ///< refuse NCCL instead of running it as RING without GPUs
  /// Mixed strategies (Parallax: sparse -> PS, dense -> AR): set PS-synchronized
  /// variables aside in ArPlan::ps_variables instead of refusing them.
  bool allow_ps = false;
};

/// Lays out `strategy` for `item`. Every node (and every part of a partitioned node) must
/// use an AllReduceSynchronizer, or, with options.allow_ps, every part of a node the same
/// kind of synchronizer. Errors: invalid_argument naming the node (a PS synchronizer
/// without allow_ps; parts with mixed synchronizers; an unknown
/// variable; a partitioner that does not fit; one fusion group with tensors of two transports),
/// unsupported (NCCL under strict_nccl without GPUs).
[[nodiscard]] Result<ArPlan> plan_allreduce(const pb::autodist::Strategy& strategy, const strategy::GraphItem& item,
                                            const ArOptions& options = {});

/// The PS side of a mixed strategy: `strategy` with only its nodes whose synchronizers
/// (all parts) are PSSynchronizers, for core/ps's plan_training; graph_config kept.
[[nodiscard]] pb::autodist::Strategy ps_part(const pb::autodist::Strategy& strategy);

/// Whether any node or part of `strategy` uses an AllReduceSynchronizer.
[[nodiscard]] bool uses_allreduce(const pb::autodist::Strategy& strategy);

}  // namespace apiary::core::collective
