#include "core/collective/synchronizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>

#include "core/ps/row_slots.hpp"
#include "messages/tensor/codec_kernels.hpp"

namespace apiary::core::collective {
namespace {

template <class T>
void put(std::string& out, const T* values, std::size_t count) {
  out.append(reinterpret_cast<const char*>(values), count * sizeof(T));
}

/// Reads `count` values of T at `at`; false when the payload is too short.
template <class T>
bool take(std::string_view bytes, std::size_t& at, T* values, std::size_t count) {
  if (count > (bytes.size() - at) / sizeof(T)) return false;
  if (count > 0) std::memcpy(values, bytes.data() + at, count * sizeof(T));
  at += count * sizeof(T);
  return true;
}

/// Whether `layouts` cut a variable of `shape` into blocks that follow one another: split
/// along an axis with only axes of one entry before it, each piece starting where the
/// one before it ends.
bool blocks_in_order(const std::vector<std::int64_t>& shape, const std::vector<ps::ShardLayout>& layouts) {
  const std::size_t axis = layouts.front().axis;
  if (axis >= shape.size()) return false;
  for (std::size_t d = 0; d < axis; ++d) {
    if (shape[d] != 1) return false;
  }
  std::int64_t next = 0;
  for (const auto& l : layouts) {
    if (l.axis != axis || l.shape.size() != shape.size() || l.offset != next) return false;
    next += l.shape[axis];
  }
  return next == shape[axis];
}

/// Values in a variable of `layouts`.
std::size_t values_in(const std::vector<ps::ShardLayout>& layouts) {
  std::size_t n = 0;
  for (const auto& l : layouts) n += l.size();
  return n;
}

}  // namespace

ps::SparseGradient touched_rows(const std::vector<float>& dense, std::size_t row_width) {
  ps::SparseGradient g;
  if (row_width == 0) return g;
  const float* d = dense.data();
  const std::size_t n = dense.size();
  const auto nonzero = [](float v) { return v != 0.0f; };  // NaN counts: it is not zero
  if (row_width == 1) {
    // First the blocks of 64 values that hold one other than zero: any bits but the sign
    // set (-0 is zero, NaN is not), two values a word. Few of them (a batch of sparse data
    // touches a few rows of an embedding): only those blocks are read again. Many: counted,
    // then every value written at the next free place and the place kept only for a
    // non-zero one: no branch on the data, no growth.
    constexpr std::size_t k_block = 64;
    const auto any_in = [d](std::size_t b, std::size_t end) {
      std::uint64_t bits = 0;
      std::size_t i = b;
      for (; i + 2 <= end; i += 2) {
        std::uint64_t two = 0;
        std::memcpy(&two, d + i, sizeof two);
        bits |= two;
      }
      if (i < end) {
        std::uint32_t one = 0;
        std::memcpy(&one, d + i, sizeof one);
        bits |= one;
      }
      return (bits & 0x7fffffff7fffffffULL) != 0;
    };
    std::vector<std::size_t> hit;  // the first value of each block with one
    const std::size_t whole = n - n % k_block;
    for (std::size_t b = 0; b < whole; b += k_block) {
      std::uint64_t words[k_block / 2];
      std::memcpy(words, d + b, sizeof words);
      std::uint64_t bits = 0;
      for (std::uint64_t w : words) bits |= w;
      if ((bits & 0x7fffffff7fffffffULL) != 0) hit.push_back(b);
    }
    if (whole < n && any_in(whole, n)) hit.push_back(whole);
    if (hit.empty()) return g;
    if (hit.size() < (n / k_block) / 4) {
      g.rows.reserve(2 * hit.size());
      g.values.reserve(2 * hit.size());
      for (std::size_t b : hit) {
        // A bit a value other than zero, then the set bits in order: no branch per value.
        const std::size_t end = std::min(n, b + k_block);
        std::uint64_t mask = 0;
        for (std::size_t i = b; i < end; ++i) {
          std::uint32_t bits = 0;
          std::memcpy(&bits, d + i, sizeof bits);
          mask |= static_cast<std::uint64_t>((bits & 0x7fffffffU) != 0) << (i - b);
        }
        for (; mask != 0; mask &= mask - 1) {
          const std::size_t i = b + static_cast<std::size_t>(__builtin_ctzll(mask));
          g.rows.push_back(static_cast<std::int64_t>(i));
          g.values.push_back(d[i]);
        }
      }
      return g;
    }
    std::size_t count = 0;
    for (std::size_t i = 0; i < n; ++i) count += nonzero(d[i]) ? 1 : 0;
    g.rows.resize(count + 1);
    g.values.resize(count + 1);
    std::size_t k = 0;
    for (std::size_t i = 0; i < n; ++i) {
      g.rows[k] = static_cast<std::int64_t>(i);
      g.values[k] = d[i];
      k += nonzero(d[i]) ? 1 : 0;
    }
    g.rows.pop_back();
    g.values.pop_back();
    return g;
  }
  const std::size_t rows = (n + row_width - 1) / row_width;
  const auto touched = [&](std::size_t row) {
    const float* first = d + row * row_width;
    return std::any_of(first, first + std::min(row_width, n - row * row_width), nonzero);
  };
  std::size_t count = 0;
  for (std::size_t row = 0; row < rows; ++row) count += touched(row) ? 1 : 0;
  g.rows.reserve(count);
  g.values.reserve(count * row_width);
  for (std::size_t row = 0; row < rows && g.rows.size() < count; ++row) {
    if (!touched(row)) continue;
    const float* first = d + row * row_width;
    g.rows.push_back(static_cast<std::int64_t>(row));
    g.values.insert(g.values.end(), first, first + std::min(row_width, n - row * row_width));
  }
  return g;
}

Result<Synchronizer> Synchronizer::create(ArPlan plan) {
  std::vector<std::vector<ps::ShardLayout>> layouts;
  for (const auto& v : plan.variables) {
    auto l = ps::shard_layouts(v.shape, v.partitioner);
    if (!l) return make_error(errc::invalid_argument, "variable {}: {}", v.name, l.error().message);
    if (l->size() != v.shards.size()) {
      return make_error(errc::invalid_argument,
                        "variable {}: expected {} planned pieces for partitioner \"{}\", got {}", v.name, l->size(),
                        v.partitioner, v.shards.size());
    }
    layouts.push_back(std::move(*l));
  }
  return Synchronizer(std::move(plan), std::move(layouts));
}

Synchronizer::Synchronizer(ArPlan plan, std::vector<std::vector<ps::ShardLayout>> layouts)
    : plan_(std::move(plan)), layouts_(std::move(layouts)), whole_(plan_.variables.size(), false) {
  for (const auto& g : plan_.groups) {
    const auto& ids = g.tensors;
    for (std::size_t k = 0; k < ids.size(); ++k) {
      const std::size_t v = plan_.tensors[ids[k]].variable;
      const auto& l = layouts_[v];
      if (l.size() < 2 || k + l.size() > ids.size() || !blocks_in_order(plan_.variables[v].shape, l)) continue;
      bool run = true;
      for (std::size_t i = 0; i < l.size() && run; ++i) {
        const ArTensor& t = plan_.tensors[ids[k + i]];
        run = t.variable == v && t.piece == i && t.compressor == CompressorKind::none;
      }
      if (run) whole_[v] = true;
    }
  }
  for (const auto& g : plan_.groups) {
    std::vector<Slot> slots;
    for (const auto id : g.tensors) {
      const ArTensor& t = plan_.tensors[id];
      if (!whole_[t.variable]) {
        slots.push_back(Slot{id, std::nullopt});
      } else if (t.piece == 0) {
        slots.push_back(Slot{id, t.variable});  // the whole variable, where its first piece was
      }
    }
    slots_.push_back(std::move(slots));
  }
}

Result<std::vector<float>> Synchronizer::compress(const ArTensor& t, std::vector<float> values) {
  if (t.compressor == CompressorKind::none) return values;
  if (t.compressor == CompressorKind::horovod) {
    // fp16(x) back as float32, in place, a block at a time (HorovodCompressor's bits).
    constexpr std::size_t k_block = 2048;
    std::uint16_t halves[k_block];
    for (std::size_t at = 0; at < values.size(); at += k_block) {
      const std::size_t n = std::min(k_block, values.size() - at);
      messages::compress_f16(halves, values.data() + at, n);
      messages::kernels::halves_to_floats(values.data() + at, halves, n);
    }
    return values;
  }
  // HorovodCompressorEF: fp16(x + residual), and what that lost kept, in place.
  if (auto st = ef_.round_in_place(t.name, values.data(), values.size()); !st) return st.error();
  return values;
}

Result<std::vector<CollectiveInput>> Synchronizer::prepare(std::map<std::string, std::vector<float>> gradients) {
  // Cut every variable first, so that a bad gradient changes no residual.
  std::vector<std::vector<std::vector<float>>> pieces;
  for (std::size_t v = 0; v < plan_.variables.size(); ++v) {
    const auto& var = plan_.variables[v];
    auto it = gradients.find(var.name);
    if (it == gradients.end()) {
      return make_error(errc::invalid_argument, "all-reduce step: expected a gradient for {}, got none", var.name);
    }
    if (layouts_[v].size() == 1 && it->second.size() == layouts_[v].front().size()) {
      pieces.push_back({});
      pieces.back().push_back(std::move(it->second));  // one piece: the gradient itself
      continue;
    }
    if (whole_[v]) {
      if (it->second.size() != values_in(layouts_[v])) {
        return make_error(errc::invalid_argument, "all-reduce step: gradient of {}: expected {} values, got {}",
                          var.name, values_in(layouts_[v]), it->second.size());
      }
      pieces.push_back({});
      pieces.back().push_back(std::move(it->second));  // sent whole: the gradient itself
      continue;
    }
    auto cut = ps::split_dense(it->second, var.shape, layouts_[v]);
    if (!cut)
      return make_error(errc::invalid_argument, "all-reduce step: gradient of {}: {}", var.name, cut.error().message);
    pieces.push_back(std::move(*cut));
  }
  std::vector<CollectiveInput> out;
  for (std::size_t gi = 0; gi < plan_.groups.size(); ++gi) {
    const auto& g = plan_.groups[gi];
    CollectiveInput in;
    in.group = g.group;
    in.transport = g.transport;
    for (const auto& slot : slots_[gi]) {
      if (slot.variable) {
        in.tensors.push_back(std::move(pieces[*slot.variable].front()));
        in.codecs.push_back(pb::NONE);
        continue;
      }
      const auto& t = plan_.tensors[slot.tensor];
      auto sent = compress(t, std::move(pieces[t.variable][t.piece]));
      if (!sent) return sent.error();
      in.tensors.push_back(std::move(*sent));
      in.codecs.push_back(t.compressor == CompressorKind::none ? pb::NONE : pb::FLOAT16);
    }
    out.push_back(std::move(in));
  }
  return out;
}

Result<std::map<std::string, std::vector<float>>> Synchronizer::assemble(
    std::vector<std::vector<std::vector<float>>> outputs) const {
  if (outputs.size() != plan_.groups.size()) {
    return make_error(errc::invalid_argument, "all-reduce step: expected {} group outputs, got {}", plan_.groups.size(),
                      outputs.size());
  }
  std::vector<std::vector<std::vector<float>>> pieces(plan_.variables.size());
  for (std::size_t v = 0; v < pieces.size(); ++v) pieces[v].resize(plan_.variables[v].shards.size());
  for (std::size_t g = 0; g < outputs.size(); ++g) {
    const auto& slots = slots_[g];
    if (outputs[g].size() != slots.size()) {
      return make_error(errc::invalid_argument, "all-reduce step: group {}: expected {} tensors, got {}",
                        plan_.groups[g].group, slots.size(), outputs[g].size());
    }
    for (std::size_t k = 0; k < slots.size(); ++k) {
      const auto& t = plan_.tensors[slots[k].tensor];
      pieces[t.variable][t.piece] = std::move(outputs[g][k]);
    }
  }
  std::map<std::string, std::vector<float>> out;
  for (std::size_t v = 0; v < pieces.size(); ++v) {
    const auto& var = plan_.variables[v];
    if (whole_[v]) {
      if (pieces[v].front().size() != values_in(layouts_[v])) {
        return make_error(errc::invalid_argument, "all-reduce step: {}: expected {} values back, got {}", var.name,
                          values_in(layouts_[v]), pieces[v].front().size());
      }
      out[var.name] = std::move(pieces[v].front());  // sent whole: the output itself
      continue;
    }
    if (layouts_[v].size() == 1 && pieces[v].front().size() == layouts_[v].front().size()) {
      out[var.name] = std::move(pieces[v].front());  // one piece: the output itself
      continue;
    }
    auto whole = ps::reassemble(pieces[v], var.shape, layouts_[v]);
    if (!whole) return make_error(errc::invalid_argument, "all-reduce step: {}: {}", var.name, whole.error().message);
    out[var.name] = std::move(*whole);
  }
  return out;
}

Result<std::string> Synchronizer::prepare_sparse(const std::map<std::string, ps::SparseGradient>& gradients,
                                                 double weight) const {
  if (!std::isfinite(weight) || weight < 0) {
    return make_error(errc::invalid_argument, "sparse all-reduce step: expected a finite weight >= 0, got {}", weight);
  }
  std::string out;
  put(out, &weight, 1);
  for (const auto& sp : plan_.sparse) {
    auto it = gradients.find(sp.name);
    if (it == gradients.end()) {
      return make_error(errc::invalid_argument, "sparse all-reduce step: expected a sparse gradient for {}, got none",
                        sp.name);
    }
    const auto& g = it->second;
    if (g.values.size() != g.rows.size() * sp.row_width) {
      return make_error(errc::invalid_argument,
                        "sparse all-reduce step: gradient of {}: expected {} rows x {} values, got {} values", sp.name,
                        g.rows.size(), sp.row_width, g.values.size());
    }
    for (auto row : g.rows) {
      if (row < 0 || row >= sp.rows) {
        return make_error(errc::invalid_argument,
                          "sparse all-reduce step: gradient of {}: expected rows in [0, {}), got row {}", sp.name,
                          sp.rows, row);
      }
    }
    const std::uint64_t count = g.rows.size();
    put(out, &count, 1);
    put(out, g.rows.data(), g.rows.size());
    put(out, g.values.data(), g.values.size());
  }
  return out;
}

Result<std::map<std::string, ps::SparseGradient>> Synchronizer::assemble_sparse(
    const std::vector<std::string>& gathered) const {
  // Every rank's rows and values, read first; then per variable, sum(w_i g_i[row]) in
  // double, replicas in rank order.
  struct Rows {
    std::vector<std::int64_t> rows;
    std::vector<float> values;
  };
  std::vector<std::vector<Rows>> ranks(gathered.size(), std::vector<Rows>(plan_.sparse.size()));
  std::vector<double> weights(gathered.size(), 0.0);
  std::vector<std::size_t> entries(plan_.sparse.size(), 0);
  double total = 0;
  for (std::size_t r = 0; r < gathered.size(); ++r) {
    const std::string_view bytes = gathered[r];
    std::size_t at = 0;
    double& weight = weights[r];
    auto bad = [&](const std::string& what) {
      return make_error(errc::malformed,
                        "sparse all-reduce step: the payload of rank {} does not fit the plan ({}); do all replicas "
                        "run the same strategy?",
                        r, what);
    };
    if (!take(bytes, at, &weight, 1) || !std::isfinite(weight) || weight < 0) return bad("weight");
    total += weight;
    for (std::size_t v = 0; v < plan_.sparse.size(); ++v) {
      const auto& sp = plan_.sparse[v];
      std::uint64_t count = 0;
      // Checked against the bytes left before anything is allocated for them.
      const std::size_t row_bytes = sizeof(std::int64_t) + sp.row_width * sizeof(float);
      if (!take(bytes, at, &count, 1) || count > (bytes.size() - at) / row_bytes) return bad(sp.name + " row count");
      Rows& got = ranks[r][v];
      got.rows.resize(count);
      got.values.resize(count * sp.row_width);
      if (!take(bytes, at, got.rows.data(), got.rows.size()) || !take(bytes, at, got.values.data(), got.values.size())) {
        return bad(sp.name + " rows");
      }
      for (auto row : got.rows) {
        if (row < 0 || row >= sp.rows) return bad(sp.name + " row index");
      }
      entries[v] += count;
    }
    if (at != bytes.size()) return bad("trailing bytes");
  }
  std::map<std::string, ps::SparseGradient> out;
  for (std::size_t v = 0; v < plan_.sparse.size(); ++v) {
    const std::size_t width = plan_.sparse[v].row_width;
    ps::RowSlots slots(plan_.sparse[v].rows, entries[v]);
    std::vector<double> sums;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const Rows& got = ranks[r][v];
      for (std::size_t k = 0; k < got.rows.size(); ++k) {
        const std::size_t s = slots.slot(got.rows[k]);
        if (sums.size() < (s + 1) * width) sums.resize((s + 1) * width, 0.0);
        for (std::size_t c = 0; c < width; ++c) sums[s * width + c] += weights[r] * got.values[k * width + c];
      }
    }
    auto& g = out[plan_.sparse[v].name];
    g.rows.reserve(slots.rows().size());
    g.values.reserve(sums.size());
    for (std::size_t s : slots.by_row()) {
      g.rows.push_back(slots.rows()[s]);
      for (std::size_t c = 0; c < width; ++c) {
        g.values.push_back(total > 0 ? static_cast<float>(sums[s * width + c] / total) : 0.0f);
      }
    }
  }
  return out;
}

}  // namespace apiary::core::collective
