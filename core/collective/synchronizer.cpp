#include "core/collective/synchronizer.hpp"

#include <cstring>

namespace apiary::core::collective {
namespace {

/// float32 values back from a float32 or float16 tensor.
Result<std::vector<float>> floats_of(messages::Compressor& c, const messages::Tensor& wire) {
  auto back = c.decompress(wire);
  if (!back) return back.error();
  if (back->type() != messages::dtype::float32) {
    return make_error(errc::internal, "compressor: expected float32 back from decompress, got another dtype");
  }
  std::vector<float> out(back->numel());
  if (!out.empty()) std::memcpy(out.data(), back->data<float>(), out.size() * sizeof(float));
  return out;
}

}  // namespace

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

Result<std::vector<float>> Synchronizer::compress(const ArTensor& t, const std::vector<float>& values) {
  if (t.compressor == CompressorKind::none) return values;
  auto input = messages::Tensor::copy_of(messages::dtype::float32, {static_cast<std::uint32_t>(values.size())},
                                         values.data(), values.size() * sizeof(float));
  if (!input) return input.error();
  messages::Compressor& c = t.compressor == CompressorKind::horovod_ef ? static_cast<messages::Compressor&>(ef_)
                                                                       : static_cast<messages::Compressor&>(fp16_);
  auto wire = c.compress(t.name, *input);
  if (!wire) return wire.error();
  return floats_of(c, *wire);
}

Result<std::vector<CollectiveInput>> Synchronizer::prepare(const std::map<std::string, std::vector<float>>& gradients) {
  // Cut every variable first, so that a bad gradient changes no residual.
  std::vector<std::vector<std::vector<float>>> pieces;
  for (std::size_t v = 0; v < plan_.variables.size(); ++v) {
    const auto& var = plan_.variables[v];
    auto it = gradients.find(var.name);
    if (it == gradients.end()) {
      return make_error(errc::invalid_argument, "all-reduce step: expected a gradient for {}, got none", var.name);
    }
    auto cut = ps::split_dense(it->second, var.shape, layouts_[v]);
    if (!cut)
      return make_error(errc::invalid_argument, "all-reduce step: gradient of {}: {}", var.name, cut.error().message);
    pieces.push_back(std::move(*cut));
  }
  std::vector<CollectiveInput> out;
  for (const auto& g : plan_.groups) {
    CollectiveInput in;
    in.group = g.group;
    in.transport = g.transport;
    for (const auto id : g.tensors) {
      const auto& t = plan_.tensors[id];
      auto sent = compress(t, pieces[t.variable][t.piece]);
      if (!sent) return sent.error();
      in.tensors.push_back(std::move(*sent));
      in.codecs.push_back(t.compressor == CompressorKind::none ? pb::NONE : pb::FLOAT16);
    }
    out.push_back(std::move(in));
  }
  return out;
}

Result<std::map<std::string, std::vector<float>>> Synchronizer::assemble(
    const std::vector<std::vector<std::vector<float>>>& outputs) const {
  if (outputs.size() != plan_.groups.size()) {
    return make_error(errc::invalid_argument, "all-reduce step: expected {} group outputs, got {}", plan_.groups.size(),
                      outputs.size());
  }
  std::vector<std::vector<std::vector<float>>> pieces(plan_.variables.size());
  for (std::size_t v = 0; v < pieces.size(); ++v) pieces[v].resize(plan_.variables[v].shards.size());
  for (std::size_t g = 0; g < outputs.size(); ++g) {
    const auto& ids = plan_.groups[g].tensors;
    if (outputs[g].size() != ids.size()) {
      return make_error(errc::invalid_argument, "all-reduce step: group {}: expected {} tensors, got {}",
                        plan_.groups[g].group, ids.size(), outputs[g].size());
    }
    for (std::size_t k = 0; k < ids.size(); ++k) {
      const auto& t = plan_.tensors[ids[k]];
      pieces[t.variable][t.piece] = outputs[g][k];
    }
  }
  std::map<std::string, std::vector<float>> out;
  for (std::size_t v = 0; v < pieces.size(); ++v) {
    const auto& var = plan_.variables[v];
    auto whole = ps::reassemble(pieces[v], var.shape, layouts_[v]);
    if (!whole) return make_error(errc::invalid_argument, "all-reduce step: {}: {}", var.name, whole.error().message);
    out[var.name] = std::move(*whole);
  }
  return out;
}

}  // namespace apiary::core::collective
