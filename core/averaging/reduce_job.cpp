// reduce_part(): the CPU reference of a deferred part reduction (part_reducer.hpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/averaging/part_reducer.hpp"

namespace apiary::core::averaging {

Result<std::size_t> check_reduce_job(const ReduceJob& job) {
  if (job.inputs.empty()) {
    return make_error(errc::invalid_argument, "reduce job {}: no inputs; a job needs at least one contribution",
                      job.id);
  }
  if (job.weights.size() != job.inputs.size()) {
    return make_error(errc::invalid_argument, "reduce job {}: {} inputs but {} weights; expected one weight each",
                      job.id, job.inputs.size(), job.weights.size());
  }
  const std::size_t n = job.inputs[0].size();
  double total = 0.0;
  for (std::size_t i = 0; i < job.inputs.size(); ++i) {
    if (job.inputs[i].size() != n) {
      return make_error(errc::invalid_argument,
                        "reduce job {}: input {} has {} values, input 0 has {}; expected one length",
                        job.id, i, job.inputs[i].size(), n);
    }
    if (!std::isfinite(job.weights[i]) || job.weights[i] < 0.0f) {
      return make_error(errc::invalid_argument, "reduce job {}: weight {} is {}; expected a finite weight >= 0",
                        job.id, i, job.weights[i]);
    }
    total += job.weights[i];
  }
  if (!(total > 0.0)) {
    return make_error(errc::invalid_argument,
                      "reduce job {}: the weights sum to 0, so the average is undefined; expected at "
                      "least one weight > 0",
                      job.id);
  }
  return n;
}

void weighted_average(const std::vector<const std::byte*>& inputs, const std::vector<float>& weights,
                      std::size_t size, float* out) {
  weighted_average(inputs, weights, size, out, {});
}

void weighted_average(const std::vector<const std::byte*>& inputs, const std::vector<float>& weights,
                      std::size_t size, float* out, const std::vector<const PartSink*>& delta_sinks,
                      const std::vector<const PartSink*>& average_sinks) {
  double total = 0.0;
  for (float w : weights) total += w;
  const auto divisor = static_cast<float>(total);
  // A chunk of the sum stays in the L1 cache: each input is read once from memory, `out`
  // written once, and the deltas come from the cached chunk.
  constexpr std::size_t k_chunk = 1024;
  float acc[k_chunk];
  float delta[k_chunk];
  for (std::size_t begin = 0; begin < size; begin += k_chunk) {
    const std::size_t n = std::min(k_chunk, size - begin);
    for (std::size_t k = 0; k < n; ++k) acc[k] = 0.0f;
    for (std::size_t j = 0; j < inputs.size(); ++j) {
      const std::byte* __restrict x = inputs[j] + begin * sizeof(float);
      const float w = weights[j];
      for (std::size_t k = 0; k < n; ++k) {
        float v;
        std::memcpy(&v, x + k * sizeof(float), sizeof v);
        acc[k] = acc[k] + w * v;
      }
    }
    for (std::size_t k = 0; k < n; ++k) acc[k] = acc[k] / divisor;
    // The sinks before `out`: out may be one of the inputs.
    for (std::size_t j = 0; j < delta_sinks.size() && j < inputs.size(); ++j) {
      if (delta_sinks[j] == nullptr || !*delta_sinks[j]) continue;
      const std::byte* __restrict x = inputs[j] + begin * sizeof(float);
      for (std::size_t k = 0; k < n; ++k) {
        float v;
        std::memcpy(&v, x + k * sizeof(float), sizeof v);
        delta[k] = acc[k] - v;
      }
      (*delta_sinks[j])(delta, n);
    }
    for (const PartSink* sink : average_sinks) {
      if (sink != nullptr && *sink) (*sink)(acc, n);
    }
    std::memcpy(out + begin, acc, n * sizeof(float));
  }
}

Result<ReducedPart> reduce_part(ReduceJob job) {
  auto checked = check_reduce_job(job);
  if (!checked) return checked.error();
  const std::size_t n = *checked;
  ReducedPart out;
  out.average.resize(n);
  std::vector<const std::byte*> inputs;
  for (const auto& input : job.inputs) inputs.push_back(reinterpret_cast<const std::byte*>(input.data()));
  weighted_average(inputs, job.weights, n, out.average.data());
  const float* __restrict acc = out.average.data();
  // Each delta overwrites its input: average - x, exactly.
  for (auto& input : job.inputs) {
    float* __restrict d = input.data();
    for (std::size_t k = 0; k < n; ++k) d[k] = acc[k] - d[k];
  }
  out.deltas = std::move(job.inputs);
  return out;
}

}  // namespace apiary::core::averaging
