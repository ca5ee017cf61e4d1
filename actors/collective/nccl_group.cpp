#include "actors/collective/nccl_group.hpp"

#include <cmath>

#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include "actors/collective/nccl_id_agreement.hpp"
#include "cuda/device.hpp"
#include "cuda/nccl.hpp"
#include "cuda/runtime.hpp"
#include "messages/tensor/float16.hpp"

namespace apiary::actors {
namespace {

/// Whether this process can run `config`'s rank: NCCL linked and the GPU there.
Status check_gpu(const NcclGroupConfig& config) {
  if (!cuda::nccl_compiled()) {
    return make_error(errc::unsupported,
                      "NCCL needs a GPU on every replica and a build with NCCL; replica {} got a build without NCCL: "
                      "rebuild with -DAPIARY_ENABLE_CUDA=ON (NCCL found in the CUDA toolkit or NCCL_ROOT), or "
                      "rebuild the strategy with --spec RING",
                      config.rank);
  }
  int count = 0;
  const auto st = cuda::gpu::device_count(&count);
  if (config.device >= count) {
    return make_error(errc::unsupported,
                      "NCCL needs a GPU on every replica; replica {} expected CUDA device {}, this process sees {} "
                      "device(s){}{}: run it where that GPU is, fix the resource spec's gpus, or rebuild the "
                      "strategy with --spec RING",
                      config.rank, config.device, count, st.ok() ? "" : ": ", st.message());
  }
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<NcclGroup>> NcclGroup::create(caf::actor_system& sys, std::shared_ptr<Gateway> gw,
                                                     const NcclGroupConfig& config) {
  if (config.ranks == 0 || config.rank >= config.ranks || config.device < 0 || config.group.empty() ||
      (config.rank != 0 && config.root.empty()) || config.timeout.count() <= 0 || gw == nullptr) {
    return make_error(errc::invalid_argument,
                      "NCCL group: expected a name, 0 <= rank < ranks, a device >= 0, rank 0's address and a positive "
                      "timeout, got group '{}', rank {} of {}, device {}, root '{}', timeout {} ms",
                      config.group, config.rank, config.ranks, config.device, config.root, config.timeout.count());
  }
  if (auto st = check_gpu(config); !st) return st.error();
  // The watch first: by the time rank 0 sees a member fetch the id, it holds its stream.
  auto watch = NcclWatch::start(sys, gw, config.group, config.rank, config.ranks, config.root);
  if (!watch) return watch.error();
  caf::actor server;
  auto fetchers = std::make_shared<NcclFetchers>();
  auto id = agree_on_nccl_id(sys, gw, config, &server, fetchers);
  if (!id) return id.error();
  if (server) {
    if (auto all = wait_for_nccl_fetchers(config, *fetchers); !all) {
      caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
      return all.error();
    }
  }
  // Joining returns once every rank has joined, so every rank has fetched the id by then.
  std::unique_ptr<cuda::nccl_communicator> comm;
  const auto joined = cuda::nccl_communicator::create(*id, static_cast<int>(config.ranks),
                                                      static_cast<int>(config.rank), config.device, &comm);
  if (server) caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
  if (!joined.ok()) {
    return make_error(errc::unavailable,
                      "NCCL group '{}': replica {} expected to join {} ranks on CUDA device {}, got: {}; check that "
                      "every replica runs on its own GPU",
                      config.group, config.rank, config.ranks, config.device, joined.message());
  }
  return std::unique_ptr<NcclGroup>(new NcclGroup(config, std::move(*watch), std::move(comm)));
}

NcclGroup::~NcclGroup() = default;

Result<std::vector<std::vector<float>>> NcclGroup::mean(std::vector<std::vector<float>> tensors, double weight,
                                                        const std::vector<pb::CompressionType>& codecs) {
  if (!std::isfinite(weight) || weight <= 0) {
    return make_error(errc::invalid_argument, "NCCL mean: expected a finite weight > 0, got {}", weight);
  }
  if (codecs.size() > 1 && codecs.size() != tensors.size()) {
    return make_error(errc::invalid_argument,
                      "NCCL mean: expected 0, 1 or {} codecs (one per tensor), got {}", tensors.size(), codecs.size());
  }
  for (auto c : codecs) {
    if (c != pb::NONE && c != pb::FLOAT16) {
      return make_error(errc::unsupported, "NCCL mean: expected codec NONE or FLOAT16, got {}; use a RING spec for it",
                        pb::CompressionType_Name(c));
    }
  }
  // Fuse: every tensor scaled by this member's weight, then the weight itself.
  std::size_t total = 1;
  for (const auto& t : tensors) total += t.size();
  host_.resize(total);
  const auto w = static_cast<float>(weight);
  std::size_t at = 0;
  for (const auto& t : tensors) {
    for (float v : t) host_[at++] = w * v;
  }
  host_[at] = w;
  const std::size_t bytes = total * sizeof(float);
  auto failed = [&](const char* what, const cuda::status& st) {
    return make_error(errc::unavailable, "NCCL mean on replica {} (CUDA device {}): expected {} to succeed, got: {}",
                      config_.rank, config_.device, what, st.message());
  };
  if (auto st = cuda::gpu::set_device(config_.device); !st) return failed("selecting the device", st);
  if (buffer_.size_bytes() < bytes) {
    if (auto st = cuda::device_buffer::allocate(cuda::backend::cuda, bytes, &buffer_); !st) {
      return failed("allocating the fused buffer", st);
    }
  }
  // Upload, sum over the group in place, download.
  if (auto st = buffer_.upload(host_.data(), bytes); !st) return failed("the upload", st);
  const cuda::abort_probe member_down = [this] { return watch_->broken(); };
  if (auto st = comm_->all_reduce(buffer_.as<float>(), buffer_.as<float>(), total, cuda::nccl_op::sum, member_down);
      !st) {
    return failed("the all-reduce", st);
  }
  if (auto st = buffer_.download(host_.data(), bytes); !st) return failed("the download", st);
  const float den = host_[total - 1];
  // Divide by the summed weight (float16 tensors come back as float16 values).
  at = 0;
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const bool half = !codecs.empty() && codecs[codecs.size() == 1 ? 0 : k] == pb::FLOAT16;
    for (float& v : tensors[k]) {
      v = host_[at++] / den;
      if (half) v = messages::half_to_float(messages::float_to_half(v));
    }
  }
  ++ops_;
  return tensors;
}

}  // namespace apiary::actors
