#include "core/moe/transformer_expert.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "core/moe/batch_rows.hpp"
#include "core/moe/expert_state.hpp"
#include "core/rng.hpp"

namespace apiary::core::moe {

/// One sample's intermediate values (seq positions S, hidden h, heads H, f = 4h).
struct TransformerExpert::Cache {
  std::vector<float> qkv;  ///< [S, 3h]: q, k, v side by side
  std::vector<float> p;    ///< [H, S, S]: attention weights (0 at padding keys)
  std::vector<float> o;    ///< [S, h]: the heads' outputs, before the out projection
  std::vector<float> n1;   ///< [S, h]: LayerNorm1's normalized input
  std::vector<float> r1;   ///< [S]: its 1 / sqrt(var + eps)
  std::vector<float> x1;   ///< [S, h]: LayerNorm1's output
  std::vector<float> z1;   ///< [S, f]: the first linear's output
  std::vector<float> g1;   ///< [S, f]: gelu(z1)
  std::vector<float> n2;   ///< [S, h]: LayerNorm2's normalized input
  std::vector<float> r2;   ///< [S]
  const float* x = nullptr;  ///< the sample's input
};

std::vector<std::vector<float>*> TransformerParams::all() {
  return {&in_w, &in_b, &out_w, &out_b, &ln1_g, &ln1_b, &w1, &b1, &w2, &b2, &ln2_g, &ln2_b};
}

std::vector<const std::vector<float>*> TransformerParams::all() const {
  return {&in_w, &in_b, &out_w, &out_b, &ln1_g, &ln1_b, &w1, &b1, &w2, &b2, &ln2_g, &ln2_b};
}

namespace {

constexpr float k_ln_eps = 1e-5f;

/// `n` floats uniform in [-bound, bound).
std::vector<float> uniform(Rng& rng, std::size_t n, double bound) {
  std::vector<float> out(n);
  for (float& v : out) v = static_cast<float>(bound * (2.0 * rng.uniform01() - 1.0));
  return out;
}

/// Zero-filled arrays the sizes of `like`'s.
TransformerParams zeros_like(const TransformerParams& like) {
  TransformerParams out;
  auto to = out.all();
  auto from = like.all();
  for (std::size_t i = 0; i < to.size(); ++i) to[i]->assign(from[i]->size(), 0.0f);
  return out;
}

/// y[r, o] = b[o] + sum_k w[o, k] x[r, k] for `rows` rows of `in` values. Four rows share
/// each pass over w; every sum runs in k order, so the bits do not depend on the rows.
void linear(const float* x, std::size_t rows, const std::vector<float>& w, const std::vector<float>& b,
            std::size_t in, std::size_t out, float* y) {
  constexpr std::size_t k_rows = 4;
  for (std::size_t r0 = 0; r0 < rows; r0 += k_rows) {
    const std::size_t n = std::min(k_rows, rows - r0);
    const float* xr[k_rows];
    for (std::size_t q = 0; q < k_rows; ++q) xr[q] = x + (r0 + (q < n ? q : 0)) * in;
    for (std::size_t o = 0; o < out; ++o) {
      const float* wo = w.data() + o * in;
      float acc[k_rows];
      for (float& a : acc) a = b[o];
      for (std::size_t k = 0; k < in; ++k)
        for (std::size_t q = 0; q < k_rows; ++q) acc[q] += wo[k] * xr[q][k];
      for (std::size_t q = 0; q < n; ++q) y[(r0 + q) * out + o] = acc[q];
    }
  }
}

/// linear's backward: gw += gy^T x and gb += gy over the rows; gx += gy w.
void linear_backward(const float* x, const float* gy, std::size_t rows, const std::vector<float>& w,
                     std::size_t in, std::size_t out, std::vector<float>& gw, std::vector<float>& gb, float* gx) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * in;
    const float* gr = gy + r * out;
    float* gxr = gx + r * in;
    for (std::size_t o = 0; o < out; ++o) {
      const float g = gr[o];
      gb[o] += g;
      float* gwo = gw.data() + o * in;
      const float* wo = w.data() + o * in;
      for (std::size_t k = 0; k < in; ++k) {
        gwo[k] += g * xr[k];
        gxr[k] += g * wo[k];
      }
    }
  }
}

/// LayerNorm of `rows` rows of h: keeps the normalized rows and 1/sigma for backward.
void layer_norm(const float* s, std::size_t rows, std::size_t h, const std::vector<float>& g,
                const std::vector<float>& b, float* n, float* rstd, float* y) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* sr = s + r * h;
    float mean = 0.0f;
    for (std::size_t k = 0; k < h; ++k) mean += sr[k];
    mean /= static_cast<float>(h);
    float var = 0.0f;
    for (std::size_t k = 0; k < h; ++k) var += (sr[k] - mean) * (sr[k] - mean);
    var /= static_cast<float>(h);
    rstd[r] = 1.0f / std::sqrt(var + k_ln_eps);
    for (std::size_t k = 0; k < h; ++k) {
      n[r * h + k] = (sr[k] - mean) * rstd[r];
      y[r * h + k] = g[k] * n[r * h + k] + b[k];
    }
  }
}

/// LayerNorm's backward: gg += gy n, gb += gy; gs = rstd (gn - mean(gn) - n mean(gn n))
/// with gn = gy g.
void layer_norm_backward(const float* gy, const float* n, const float* rstd, std::size_t rows, std::size_t h,
                         const std::vector<float>& g, std::vector<float>& gg, std::vector<float>& gb, float* gs) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* gr = gy + r * h;
    const float* nr = n + r * h;
    float mean_gn = 0.0f;
    float mean_gnn = 0.0f;
    for (std::size_t k = 0; k < h; ++k) {
      gg[k] += gr[k] * nr[k];
      gb[k] += gr[k];
      const float gn = gr[k] * g[k];
      mean_gn += gn;
      mean_gnn += gn * nr[k];
    }
    mean_gn /= static_cast<float>(h);
    mean_gnn /= static_cast<float>(h);
    for (std::size_t k = 0; k < h; ++k) {
      gs[r * h + k] = rstd[r] * (gr[k] * g[k] - mean_gn - nr[k] * mean_gnn);
    }
  }
}

float gelu(float z) { return 0.5f * z * (1.0f + std::erf(z * static_cast<float>(M_SQRT1_2))); }

float gelu_grad(float z) {
  const float cdf = 0.5f * (1.0f + std::erf(z * static_cast<float>(M_SQRT1_2)));
  const float pdf = std::exp(-0.5f * z * z) * static_cast<float>(0.5 * M_2_SQRTPI * M_SQRT1_2);
  return cdf + z * pdf;
}

ExpertSchema transformer_schema(std::uint32_t seq, std::uint32_t h, pb::CompressionType in,
                                pb::CompressionType out) {
  ExpertSchema s;
  s.args.push_back(TensorSchema{{seq, h}, messages::dtype::float32, false, in, "cpu"});
  s.args.push_back(TensorSchema{{seq}, messages::dtype::bool_, false, pb::NONE, "cpu"});
  s.outputs.push_back(TensorSchema{{seq, h}, messages::dtype::float32, true, out, "cpu"});
  s.single_output = true;
  return s;
}

}  // namespace

TransformerExpert::TransformerExpert(const FfnConfig& config, std::uint32_t seq_len)
    : h_(std::max<std::uint32_t>(config.hidden_dim, 1)),
      seq_(std::max<std::uint32_t>(seq_len, 1)),
      heads_(std::gcd(h_, 16u)),
      lr_(config.learning_rate),
      schema_(transformer_schema(seq_, h_, config.input_compression, config.output_compression)) {
  Rng rng(config.seed);
  const std::size_t h = h_;
  const std::size_t f = 4 * h;
  params_.in_w = uniform(rng, 3 * h * h, std::sqrt(6.0 / static_cast<double>(h + 3 * h)));  // xavier
  params_.in_b.assign(3 * h, 0.0f);
  params_.out_w = uniform(rng, h * h, 1.0 / std::sqrt(static_cast<double>(h)));
  params_.out_b.assign(h, 0.0f);
  params_.ln1_g.assign(h, 1.0f);
  params_.ln1_b.assign(h, 0.0f);
  params_.w1 = uniform(rng, f * h, 1.0 / std::sqrt(static_cast<double>(h)));
  params_.b1 = uniform(rng, f, 1.0 / std::sqrt(static_cast<double>(h)));
  params_.w2 = uniform(rng, h * f, 1.0 / std::sqrt(static_cast<double>(f)));
  params_.b2 = uniform(rng, h, 1.0 / std::sqrt(static_cast<double>(f)));
  params_.ln2_g.assign(h, 1.0f);
  params_.ln2_b.assign(h, 0.0f);
}

TransformerExpert::Dims TransformerExpert::dims() const {
  const std::size_t d = h_ / heads_;
  return Dims{seq_, h_, 4 * std::size_t{h_}, heads_, d, 1.0f / std::sqrt(static_cast<float>(d))};
}

Status TransformerExpert::set_params(TransformerParams params) {
  const auto want = params_.all();
  const auto got = params.all();
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i]->size() != want[i]->size()) {
      return make_error(errc::invalid_argument,
                        "transformer parameters of hidden_dim {}: array {} has {} values, expected {}", h_, i,
                        got[i]->size(), want[i]->size());
    }
  }
  params_ = std::move(params);
  return ok_status();
}

void TransformerExpert::forward_sample(const float* x, const std::uint8_t* mask, float* y, Cache* cache) const {
  const auto [S, h, f, H, d, scale] = dims();
  Cache local;
  Cache& c = cache != nullptr ? *cache : local;
  c.x = x;
  c.qkv.resize(S * 3 * h);
  c.p.assign(H * S * S, 0.0f);
  c.o.assign(S * h, 0.0f);
  linear(x, S, params_.in_w, params_.in_b, h, 3 * h, c.qkv.data());
  // Self-attention, head by head: p = softmax over the unpadded keys of q k / sqrt(d).
  std::vector<float> scores(S);
  for (std::size_t hd = 0; hd < H; ++hd) {
    for (std::size_t i = 0; i < S; ++i) {
      const float* q = c.qkv.data() + i * 3 * h + hd * d;
      float max = -INFINITY;
      for (std::size_t j = 0; j < S; ++j) {
        if (mask[j] != 0) continue;
        const float* k = c.qkv.data() + j * 3 * h + h + hd * d;
        float dot = 0.0f;
        for (std::size_t t = 0; t < d; ++t) dot += q[t] * k[t];
        scores[j] = dot * scale;
        max = std::max(max, scores[j]);
      }
      if (max == -INFINITY) continue;  // every key is padding: this query attends to nothing
      float* p = c.p.data() + (hd * S + i) * S;
      float sum = 0.0f;
      for (std::size_t j = 0; j < S; ++j) {
        if (mask[j] != 0) continue;
        p[j] = std::exp(scores[j] - max);
        sum += p[j];
      }
      float* o = c.o.data() + i * h + hd * d;
      for (std::size_t j = 0; j < S; ++j) {
        if (mask[j] != 0) continue;
        p[j] /= sum;
        const float* v = c.qkv.data() + j * 3 * h + 2 * h + hd * d;
        for (std::size_t t = 0; t < d; ++t) o[t] += p[j] * v[t];
      }
    }
  }
  // x1 = LayerNorm1(x + out_proj(o)).
  std::vector<float> s(S * h);
  linear(c.o.data(), S, params_.out_w, params_.out_b, h, h, s.data());
  for (std::size_t i = 0; i < S * h; ++i) s[i] += x[i];
  c.n1.resize(S * h);
  c.r1.resize(S);
  c.x1.resize(S * h);
  layer_norm(s.data(), S, h, params_.ln1_g, params_.ln1_b, c.n1.data(), c.r1.data(), c.x1.data());
  // y = LayerNorm2(x1 + W2 gelu(W1 x1 + b1) + b2).
  c.z1.resize(S * f);
  c.g1.resize(S * f);
  linear(c.x1.data(), S, params_.w1, params_.b1, h, f, c.z1.data());
  for (std::size_t i = 0; i < S * f; ++i) c.g1[i] = gelu(c.z1[i]);
  linear(c.g1.data(), S, params_.w2, params_.b2, f, h, s.data());
  for (std::size_t i = 0; i < S * h; ++i) s[i] += c.x1[i];
  c.n2.resize(S * h);
  c.r2.resize(S);
  layer_norm(s.data(), S, h, params_.ln2_g, params_.ln2_b, c.n2.data(), c.r2.data(), y);
}

void TransformerExpert::backward_sample(const Cache& c, const std::uint8_t* mask, const float* gy, TransformerParams& grad,
                                        float* gx) const {
  const auto [S, h, f, H, d, scale] = dims();
  // Through LayerNorm2 to s2 = x1 + ffn(x1); the residual carries gs2 to x1 as well.
  std::vector<float> gs2(S * h);
  layer_norm_backward(gy, c.n2.data(), c.r2.data(), S, h, params_.ln2_g, grad.ln2_g, grad.ln2_b, gs2.data());
  std::vector<float> gg1(S * f, 0.0f);
  linear_backward(c.g1.data(), gs2.data(), S, params_.w2, f, h, grad.w2, grad.b2, gg1.data());
  for (std::size_t i = 0; i < S * f; ++i) gg1[i] *= gelu_grad(c.z1[i]);
  std::vector<float> gx1 = gs2;
  linear_backward(c.x1.data(), gg1.data(), S, params_.w1, h, f, grad.w1, grad.b1, gx1.data());
  // Through LayerNorm1 to s1 = x + attention(x); the residual carries gs1 to x.
  std::vector<float> gs1(S * h);
  layer_norm_backward(gx1.data(), c.n1.data(), c.r1.data(), S, h, params_.ln1_g, grad.ln1_g, grad.ln1_b,
                      gs1.data());
  std::copy(gs1.begin(), gs1.end(), gx);
  std::vector<float> go(S * h, 0.0f);
  linear_backward(c.o.data(), gs1.data(), S, params_.out_w, h, h, grad.out_w, grad.out_b, go.data());
  // Through the attention: o = p v, p = softmax(q k / sqrt(d)).
  std::vector<float> gqkv(S * 3 * h, 0.0f);
  std::vector<float> gp(S);
  for (std::size_t hd = 0; hd < H; ++hd) {
    for (std::size_t i = 0; i < S; ++i) {
      const float* p = c.p.data() + (hd * S + i) * S;
      const float* goi = go.data() + i * h + hd * d;
      float dot = 0.0f;
      for (std::size_t j = 0; j < S; ++j) {
        gp[j] = 0.0f;
        if (mask[j] != 0 || p[j] == 0.0f) continue;
        const float* v = c.qkv.data() + j * 3 * h + 2 * h + hd * d;
        float* gv = gqkv.data() + j * 3 * h + 2 * h + hd * d;
        for (std::size_t t = 0; t < d; ++t) {
          gp[j] += goi[t] * v[t];
          gv[t] += p[j] * goi[t];
        }
        dot += p[j] * gp[j];
      }
      const float* q = c.qkv.data() + i * 3 * h + hd * d;
      float* gq = gqkv.data() + i * 3 * h + hd * d;
      for (std::size_t j = 0; j < S; ++j) {
        if (mask[j] != 0 || p[j] == 0.0f) continue;
        const float gs = p[j] * (gp[j] - dot) * scale;
        const float* k = c.qkv.data() + j * 3 * h + h + hd * d;
        float* gk = gqkv.data() + j * 3 * h + h + hd * d;
        for (std::size_t t = 0; t < d; ++t) {
          gq[t] += gs * k[t];
          gk[t] += gs * q[t];
        }
      }
    }
  }
  linear_backward(c.x, gqkv.data(), S, params_.in_w, h, 3 * h, grad.in_w, grad.in_b, gx);
}

Result<std::vector<Tensor>> TransformerExpert::forward(const std::vector<Tensor>& inputs) {
  auto rows = check_batch(schema_.forward_inputs(), inputs, "transformer forward");
  if (!rows) return rows.error();
  const std::size_t sample = std::size_t{seq_} * h_;
  Buffer bytes = Buffer::allocate(*rows * sample * sizeof(float));
  auto* y = reinterpret_cast<float*>(bytes.data());
  const float* x = inputs[0].data<float>();
  const std::uint8_t* mask = inputs[1].data<std::uint8_t>();
  for (std::size_t b = 0; b < *rows; ++b) forward_sample(x + b * sample, mask + b * seq_, y + b * sample, nullptr);
  auto out = Tensor::make(messages::dtype::float32, {static_cast<std::uint32_t>(*rows), seq_, h_}, std::move(bytes));
  if (!out) return out.error();
  return std::vector<Tensor>{std::move(*out)};
}

Result<std::vector<Tensor>> TransformerExpert::backward(const std::vector<Tensor>& inputs,
                                                        const std::vector<Tensor>& grad_outputs) {
  auto rows = check_backward(schema_, inputs, grad_outputs, "transformer");
  if (!rows) return rows.error();
  const std::size_t sample = std::size_t{seq_} * h_;
  const float* x = inputs[0].data<float>();
  const std::uint8_t* mask = inputs[1].data<std::uint8_t>();
  const float* gy = grad_outputs[0].data<float>();
  Buffer gx_bytes = Buffer::allocate(*rows * sample * sizeof(float));
  auto* gx = reinterpret_cast<float*>(gx_bytes.data());
  TransformerParams grad = zeros_like(params_);
  Cache cache;
  std::vector<float> y(sample);
  for (std::size_t b = 0; b < *rows; ++b) {
    forward_sample(x + b * sample, mask + b * seq_, y.data(), &cache);
    backward_sample(cache, mask + b * seq_, gy + b * sample, grad, gx + b * sample);
  }
  // The optimizer step, once the whole batch's gradients are in: p -= lr * dp.
  auto params = params_.all();
  auto grads = grad.all();
  for (std::size_t i = 0; i < params.size(); ++i) {
    for (std::size_t k = 0; k < params[i]->size(); ++k) (*params[i])[k] -= lr_ * (*grads[i])[k];
  }
  const auto batch = static_cast<std::uint32_t>(*rows);
  auto gx_tensor = Tensor::make(messages::dtype::float32, {batch, seq_, h_}, std::move(gx_bytes));
  if (!gx_tensor) return gx_tensor.error();
  auto gmask = Tensor::zeros(messages::dtype::bool_, {batch, seq_});
  if (!gmask) return gmask.error();
  return std::vector<Tensor>{std::move(*gx_tensor), std::move(*gmask)};
}

Result<std::string> TransformerExpert::state() const { return pack_state("transformer", h_, params_.all()); }

Status TransformerExpert::load_state(std::string_view state) {
  return unpack_state(state, "transformer", h_, params_.all());
}

}  // namespace apiary::core::moe
