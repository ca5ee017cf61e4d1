#include "api/moe_call_rows.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "messages/tensor/tensor.hpp"

namespace apiary::moe_rows {

using Outputs = std::vector<ExpertTensor>;

namespace {

/// Rows of one sample's tensors (dimension 0, the same in each, at least one).
Result<std::uint32_t> rows_of(const std::vector<ExpertTensor>& tensors, std::size_t sample) {
  if (tensors.empty()) return make_error(errc::invalid_argument, "sample {} has no input tensors", sample);
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const auto& shape = tensors[t].shape;
    if (shape.empty() || shape[0] == 0 || shape[0] != tensors[0].shape[0]) {
      return make_error(errc::invalid_argument,
                        "sample {} tensor {} has shape [{}]; expected {} rows along dimension 0 like its tensor 0",
                        sample, t, messages::format_shape(shape), tensors[0].shape.empty() ? 0 : tensors[0].shape[0]);
    }
  }
  return tensors[0].shape[0];
}

}  // namespace

Result<std::vector<Group>> group_calls(const ExpertsPerSample& experts, const std::vector<std::vector<bool>>* mask) {
  std::vector<Group> groups;
  std::map<std::pair<std::string, std::string>, std::size_t> index;
  for (std::size_t i = 0; i < experts.size(); ++i) {
    for (std::size_t j = 0; j < experts[i].size(); ++j) {
      RemoteExpert* e = experts[i][j];
      if (e == nullptr) return make_error(errc::invalid_argument, "sample {} expert {} is null", i, j);
      if (mask != nullptr && !(*mask)[i][j]) continue;
      auto [it, added] = index.emplace(std::make_pair(e->server().multiaddr(), e->uid()), groups.size());
      if (added) groups.push_back(Group{e, {}});
      Group& g = groups[it->second];
      if (!g.members.empty() && g.members.back().first == i) {
        return make_error(errc::invalid_argument, "sample {} chose expert '{}' twice", i, e->uid());
      }
      g.members.push_back({i, j});
    }
  }
  return groups;
}

Result<Outputs> join_rows(const std::vector<const Outputs*>& parts, const std::string& uid) {
  Outputs joined = *parts.front();
  for (std::size_t m = 1; m < parts.size(); ++m) {
    const Outputs& next = *parts[m];
    if (next.size() != joined.size()) {
      return make_error(errc::invalid_argument, "expert '{}' gets {} tensors from one sample and {} from another",
                        uid, joined.size(), next.size());
    }
    for (std::size_t t = 0; t < next.size(); ++t) {
      auto& shape = joined[t].shape;
      if (!std::equal(shape.begin() + 1, shape.end(), next[t].shape.begin() + 1, next[t].shape.end())) {
        return make_error(errc::invalid_argument, "expert '{}' tensor {}: shapes [{}] and [{}] differ after dimension 0",
                          uid, t, messages::format_shape(shape), messages::format_shape(next[t].shape));
      }
      shape[0] += next[t].shape[0];
      joined[t].values.insert(joined[t].values.end(), next[t].values.begin(), next[t].values.end());
    }
  }
  return joined;
}

Result<std::vector<Outputs>> split_rows(const Outputs& outputs, const std::vector<std::uint32_t>& rows) {
  std::uint32_t total = 0;
  for (auto r : rows) total += r;
  std::vector<Outputs> out(rows.size());
  for (std::size_t t = 0; t < outputs.size(); ++t) {
    const ExpertTensor& o = outputs[t];
    if (o.shape.empty() || o.shape[0] != total) {
      return make_error(errc::protocol, "output {} has shape [{}]; expected {} rows", t,
                        messages::format_shape(o.shape), total);
    }
    const std::size_t row_size = o.values.size() / total;
    std::size_t first = 0;
    for (std::size_t m = 0; m < rows.size(); ++m) {
      ExpertTensor part;
      part.shape = o.shape;
      part.shape[0] = rows[m];
      part.values.assign(o.values.begin() + first * row_size, o.values.begin() + (first + rows[m]) * row_size);
      out[m].push_back(std::move(part));
      first += rows[m];
    }
  }
  return out;
}

Result<std::vector<std::uint32_t>> sample_rows_of(const ExpertsPerSample& experts,
                                                  const std::vector<std::vector<ExpertTensor>>& inputs) {
  if (experts.size() != inputs.size()) {
    return make_error(errc::invalid_argument, "{} samples of experts and {} of inputs; expected one each",
                      experts.size(), inputs.size());
  }
  std::vector<std::uint32_t> rows;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    auto r = rows_of(inputs[i], i);
    if (!r) return r.error();
    rows.push_back(*r);
  }
  return rows;
}

}  // namespace apiary::moe_rows
