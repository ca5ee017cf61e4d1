// reduce_part(): the CPU reference of a deferred part reduction (part_reducer.hpp).
#include <cmath>
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

Result<ReducedPart> reduce_part(ReduceJob job) {
  auto checked = check_reduce_job(job);
  if (!checked) return checked.error();
  const std::size_t n = *checked;
  double total = 0.0;
  for (float w : job.weights) total += w;
  ReducedPart out;
  out.average.assign(n, 0.0f);
  float* __restrict acc = out.average.data();
  for (std::size_t i = 0; i < job.inputs.size(); ++i) {
    const float* __restrict x = job.inputs[i].data();
    const float w = job.weights[i];
    for (std::size_t k = 0; k < n; ++k) acc[k] = acc[k] + w * x[k];
  }
  const auto divisor = static_cast<float>(total);
  for (std::size_t k = 0; k < n; ++k) acc[k] = acc[k] / divisor;
  // Each delta overwrites its input: average - x, exactly.
  for (auto& input : job.inputs) {
    float* __restrict d = input.data();
    for (std::size_t k = 0; k < n; ++k) d[k] = acc[k] - d[k];
  }
  out.deltas = std::move(job.inputs);
  return out;
}

}  // namespace apiary::core::averaging
