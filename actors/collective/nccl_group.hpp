#pragma once
/// The NCCL transport of an all-reduce plan (core/collective/ar_plan.hpp,
/// Transport::nccl): one replica's member of a fixed NCCL group over the replicas' GPUs,
/// one GPU per replica process. Typical use:
///
///     auto g = NcclGroup::create(sys, gw, config);  // forms the group (blocks until all joined)
///     for each step: auto avg = g->mean(tensors, weight, codecs);
///
/// Forming: every rank first checks that it can use its GPU; rank 0 makes the NCCL
/// unique id and serves it on its gateway under nccl_id_handle(group)
/// (actors/device/nccl_bootstrap.hpp); every other rank fetches it from rank 0's
/// address, retrying until rank 0 serves it; rank 0 waits until every other rank has
/// fetched it (so a rank that never will, e.g. one without its GPU, ends the group with
/// an error rather than a wait inside NCCL); then each joins on its own GPU. A mean
/// uploads the group's fused float32 tensors, scaled by this member's weight, plus the
/// weight itself into one device buffer, sums them over the group with one NCCL
/// all-reduce, downloads, and divides by the summed weight: sum(w_i x_i) / sum(w_i).
/// NCCL hands every rank the same reduced bits and the division is the same everywhere,
/// so every member ends with the same bits.
///
/// A member that dies is noticed over apiary's RPC (NcclWatch: each member holds a
/// stream to rank 0, which passes on who went down): a mean waiting inside NCCL then
/// aborts the communicator and fails naming that member, instead of waiting for ever.
/// The group cannot be used after that. Use from one thread.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "actors/collective/nccl_watch.hpp"
#include "actors/gateway.hpp"
#include "cuda/buffer.hpp"
#include "cuda/nccl_comm.hpp"
#include "messages/result.hpp"
#include "runtime.pb.h"

namespace apiary::actors {

/// Who this member is in which group.
struct NcclGroupConfig {
  std::string group;  ///< the group's name, the same on every rank (names the id's RPC handle)
  std::size_t rank = 0;   ///< this member, 0 <= rank < ranks; rank 0 serves the id
  std::size_t ranks = 1;  ///< members of the group
  PeerKey root;           ///< rank 0's transport key (HOST:PORT), where the others fetch the id
  int device = 0;         ///< the CUDA ordinal of this member's GPU (GPU:1 -> 1)
  /// How long a rank keeps trying to fetch the id from rank 0, and rank 0 waits for the
  /// others to fetch it, ms.
  std::chrono::milliseconds timeout{30000};
};

/// One member's blocking handle on its NCCL group.
class NcclGroup {
 public:
  /// Checks `config`, that this build has NCCL and that `config.device` is a usable GPU,
  /// then forms the group (returns once every rank joined). Errors: invalid_argument for
  /// a bad config; unsupported without NCCL or without that GPU ("NCCL needs a GPU on
  /// every replica; ..."); deadline_exceeded when rank 0 never served the id, or, on rank
  /// 0, when another rank never fetched it; unavailable when CUDA or NCCL fails to form
  /// the group.
  [[nodiscard]] static Result<std::unique_ptr<NcclGroup>> create(caf::actor_system& sys,
                                                                 std::shared_ptr<Gateway> gw,
                                                                 const NcclGroupConfig& config);

  /// The weighted mean over the group of `tensors` (float32, the same sizes on every
  /// member): sum(w_i x_i) / sum(w_i) with this member's `weight` (> 0, e.g. its
  /// samples). A tensor whose codec is FLOAT16 comes back rounded to float16 values, as
  /// Collective::mean's decode(encode(average)) (one codec applies to all; empty:
  /// NONE). Errors: invalid_argument for a bad weight or codec count; unsupported for a
  /// codec other than NONE or FLOAT16; unavailable when CUDA or NCCL fails, or when a
  /// member went down (the message names it).
  [[nodiscard]] Result<std::vector<std::vector<float>>> mean(std::vector<std::vector<float>> tensors, double weight,
                                                             const std::vector<pb::CompressionType>& codecs = {});

  /// Means run so far.
  [[nodiscard]] std::uint64_t ops() const { return ops_; }
  /// This member's rank.
  [[nodiscard]] std::size_t rank() const { return config_.rank; }
  /// The CUDA ordinal this member runs on.
  [[nodiscard]] int device() const { return config_.device; }

  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

 private:
  NcclGroup(NcclGroupConfig config, std::unique_ptr<NcclWatch> watch, std::unique_ptr<cuda::nccl_communicator> comm)
      : config_(std::move(config)), watch_(std::move(watch)), comm_(std::move(comm)) {}

  NcclGroupConfig config_;
  std::unique_ptr<NcclWatch> watch_;
  std::unique_ptr<cuda::nccl_communicator> comm_;
  cuda::device_buffer buffer_;  ///< the fused tensors on the GPU, grown as needed
  std::vector<float> host_;     ///< the fused tensors on the host
  std::uint64_t ops_ = 0;
};

}  // namespace apiary::actors
