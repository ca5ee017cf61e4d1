// AveragerRole's PowerSGD phases (core/averaging/powersgd.hpp): what each of a round's two
// all-reduces averages, and the step's deltas from their results.
#include <cstddef>
#include <utility>

#include "core/averaging/averager_role.hpp"

namespace apiary::core::averaging {

namespace {

pb::CompressionType codec_of(const std::vector<pb::CompressionType>& codecs, std::size_t t) {
  return codecs.size() == 1 ? codecs.front() : codecs[t];
}

}  // namespace

void AveragerRole::powersgd_phase_p(std::vector<std::vector<float>>& tensors, std::vector<std::int64_t>& sizes,
                                    std::vector<pb::CompressionType>& codecs) {
  const PowerSgdConfig& config = powersgd_->config;
  const std::vector<std::vector<float>>& grads = step_->tensors;
  psgd_m_.assign(grads.size(), {});
  psgd_p_.clear();
  for (std::size_t t = 0; t < grads.size(); ++t) {
    const PowerSgdMatrix& shape = config.matrices[t];
    if (!shape.compressed()) continue;
    std::vector<float> m = powersgd_->errors[t];  // the error feedback, plus this round's gradient
    if (grads[t].size() == m.size()) {
      for (std::size_t i = 0; i < m.size(); ++i) m[i] += grads[t][i];
    }
    std::vector<float> p(static_cast<std::size_t>(shape.rows) * config.rank);
    powersgd_project(m.data(), powersgd_->qs[t].data(), shape.rows, shape.cols, config.rank, p.data());
    psgd_m_[t] = std::move(m);
    psgd_p_.push_back(p);
    sizes.push_back(static_cast<std::int64_t>(p.size()));
    codecs.push_back(codec_of(step_->codecs, t));
    tensors.push_back(std::move(p));
  }
}

void AveragerRole::powersgd_phase_q(std::vector<std::vector<float>> p_deltas, std::vector<std::vector<float>>& tensors,
                                    std::vector<std::int64_t>& sizes, std::vector<pb::CompressionType>& codecs) {
  const PowerSgdConfig& config = powersgd_->config;
  const std::vector<std::vector<float>>& grads = step_->tensors;
  std::size_t c = 0;
  for (std::size_t t = 0; t < grads.size(); ++t) {
    const PowerSgdMatrix& shape = config.matrices[t];
    if (!shape.compressed()) continue;
    std::vector<float>& p = psgd_p_[c];  // this peer's P becomes the group's, orthogonalized
    if (c < p_deltas.size() && p_deltas[c].size() == p.size()) {
      for (std::size_t i = 0; i < p.size(); ++i) p[i] += p_deltas[c][i];
    }
    powersgd_orthogonalize(p.data(), shape.rows, config.rank);
    std::vector<float> q(static_cast<std::size_t>(shape.cols) * config.rank);
    powersgd_back_project(psgd_m_[t].data(), p.data(), shape.rows, shape.cols, config.rank, q.data());
    sizes.push_back(static_cast<std::int64_t>(q.size()));
    codecs.push_back(codec_of(step_->codecs, t));
    tensors.push_back(std::move(q));
    ++c;
  }
  for (std::size_t t = 0; t < grads.size(); ++t) {  // the tensors averaged as they are
    if (config.matrices[t].compressed()) continue;
    sizes.push_back(step_->tensor_sizes[t]);
    codecs.push_back(codec_of(step_->codecs, t));
    tensors.push_back(grads[t]);
  }
  // Phase Q's runner takes its tensors: keep this peer's Qs for the result.
  psgd_q_.assign(tensors.begin(), tensors.begin() + static_cast<std::ptrdiff_t>(c));
}

std::vector<std::vector<float>> AveragerRole::powersgd_deltas(std::vector<std::vector<float>> phase_q) {
  const PowerSgdConfig& config = powersgd_->config;
  const std::vector<std::vector<float>>& grads = step_->tensors;
  const bool aux = step_->mode == AveragingMode::aux;
  std::vector<std::vector<float>> deltas(grads.size());
  std::size_t c = 0;
  std::size_t plain = 0;
  std::size_t compressed = 0;
  for (const auto& m : config.matrices) compressed += m.compressed() ? 1 : 0;
  for (std::size_t t = 0; t < grads.size(); ++t) {
    const PowerSgdMatrix& shape = config.matrices[t];
    const std::size_t elements = static_cast<std::size_t>(step_->tensor_sizes[t]);
    if (!shape.compressed()) {
      const std::size_t index = compressed + plain++;
      deltas[t] = index < phase_q.size() ? std::move(phase_q[index]) : std::vector<float>(elements, 0.0F);
      continue;
    }
    std::vector<float> q = std::move(psgd_q_[c]);
    if (c < phase_q.size() && phase_q[c].size() == q.size()) {
      for (std::size_t i = 0; i < q.size(); ++i) q[i] += phase_q[c][i];
    }
    std::vector<float> approx(elements);
    powersgd_reconstruct(psgd_p_[c].data(), q.data(), shape.rows, shape.cols, config.rank, approx.data());
    if (!aux) {  // an aux peer has no gradient of its own to feed back
      std::vector<float>& error = powersgd_->errors[t];
      for (std::size_t i = 0; i < elements; ++i) error[i] = psgd_m_[t][i] - approx[i];
      powersgd_->qs[t] = std::move(q);
    }
    std::vector<float>& delta = deltas[t];
    delta = std::move(approx);
    if (grads[t].size() == elements) {
      for (std::size_t i = 0; i < elements; ++i) delta[i] -= grads[t][i];
    }
    ++c;
  }
  return deltas;
}

}  // namespace apiary::core::averaging
