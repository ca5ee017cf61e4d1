// Bindings of the MoE client's batch parts: the beam search over the DHT
// (api/moe_beam_search.hpp) and the calls of many experts at once
// (api/moe_call_many.hpp). Tensors cross as float32 numpy arrays.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <optional>
#include <utility>

#include "api/moe_beam_search.hpp"
#include "api/moe_call_many.hpp"
#include "python/src/moe.hpp"

namespace apiary::python {

namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

std::optional<std::chrono::milliseconds> millis(const std::optional<double>& seconds) {
  if (!seconds) return std::nullopt;
  return millis(*seconds);
}

ExpertTensor tensor_of(const FloatArray& array) {
  ExpertTensor out;
  for (py::ssize_t d = 0; d < array.ndim(); ++d) out.shape.push_back(static_cast<std::uint32_t>(array.shape(d)));
  out.values.assign(array.data(), array.data() + array.size());
  return out;
}

FloatArray array_of(ExpertTensor& tensor) {
  std::vector<py::ssize_t> shape(tensor.shape.begin(), tensor.shape.end());
  FloatArray out(shape);
  std::copy(tensor.values.begin(), tensor.values.end(), out.mutable_data());
  return out;
}

std::vector<std::vector<ExpertTensor>> rows_of(const std::vector<std::vector<FloatArray>>& rows) {
  std::vector<std::vector<ExpertTensor>> out(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    for (const auto& array : rows[i]) out[i].push_back(tensor_of(array));
  }
  return out;
}

ExpertsPerSample experts_of(const std::vector<std::vector<PyRemoteExpert*>>& natives) {
  ExpertsPerSample out(natives.size());
  for (std::size_t i = 0; i < natives.size(); ++i) {
    for (auto* native : natives[i]) {
      if (native == nullptr || !native->expert) raise(make_error(errc::invalid_argument, "sample {}: no expert", i));
      out[i].push_back(native->expert.get());
    }
  }
  return out;
}

MoeCallOptions options_of(std::size_t k_min, std::size_t backward_k_min, std::optional<double> timeout_after_k_min,
                          std::optional<double> forward_timeout, std::optional<double> backward_timeout) {
  MoeCallOptions options;
  options.k_min = k_min;
  options.backward_k_min = backward_k_min;
  options.timeout_after_k_min = millis(timeout_after_k_min);
  options.forward_timeout = millis(forward_timeout);
  options.backward_timeout = millis(backward_timeout);
  return options;
}

/// (outputs [sample][expert]: list of arrays, or None where masked out; mask).
py::tuple result_to_python(MoeCallResult& result) {
  py::list outputs;
  for (std::size_t i = 0; i < result.outputs.size(); ++i) {
    py::list sample;
    for (std::size_t j = 0; j < result.outputs[i].size(); ++j) {
      if (!result.mask[i][j]) {
        sample.append(py::none());
        continue;
      }
      py::list tensors;
      for (auto& tensor : result.outputs[i][j]) tensors.append(array_of(tensor));
      sample.append(tensors);
    }
    outputs.append(sample);
  }
  return py::make_tuple(outputs, result.mask);
}

/// A beam searcher over a Python DHT (kept alive with it).
struct PySearcher {
  py::object dht_object;
  PyDht* node = nullptr;
  std::unique_ptr<MoEBeamSearcher> searcher;
  MoEBeamSearcher& get() {
    (void)node->get();  // raises once the DHT was shut down
    return *searcher;
  }
};

py::tuple info_tuple(const core::moe::ExpertInfo& info) { return py::make_tuple(info.uid, info.peer_id); }

py::dict successors_to_python(const core::moe::Successors& successors) {
  py::dict out;
  for (const auto& [coord, info] : successors) out[py::int_(coord)] = info_tuple(info);
  return out;
}

template <class T, class Call>
T released(Call call) {
  std::optional<T> out;
  {
    py::gil_scoped_release unlocked;
    out.emplace(call());
  }
  return std::move(*out);
}

}  // namespace

void bind_moe_client(py::module_& m) {
  py::class_<PySearcher>(m, "MoEBeamSearcher", "The best declared experts of a grid, by beam search over a DHT.")
      .def(py::init([](py::object dht, const std::string& uid_prefix, const std::vector<std::size_t>& grid_size,
                       bool negative_caching, double cache_expiration, double timeout) {
             auto out = std::make_unique<PySearcher>();
             out->node = &dht.cast<PyDht&>();
             out->dht_object = std::move(dht);
             out->searcher = std::make_unique<MoEBeamSearcher>(out->node->get(), uid_prefix, grid_size,
                                                               negative_caching, millis(cache_expiration),
                                                               millis(timeout));
             return out.release();
           }),
           py::arg("dht"), py::arg("uid_prefix"), py::arg("grid_size"), py::arg("negative_caching"),
           py::arg("cache_expiration"), py::arg("timeout"))
      .def("batch_find_best_experts",
           [](PySearcher& self, const std::vector<ExpertGridScores>& batch, std::size_t beam_size) {
             auto& searcher = self.get();
             auto found = value_or_raise(released<Result<std::vector<std::vector<FoundExpert>>>>(
                 [&] { return searcher.batch_find_best_experts(batch, beam_size); }));
             py::list out;
             for (const auto& sample : found) {
               py::list experts;
               for (const auto& e : sample) experts.append(py::make_tuple(e.uid, e.server.multiaddr(), e.score));
               out.append(experts);
             }
             return out;
           })
      .def("get_initial_beam",
           [](PySearcher& self, const std::vector<float>& scores, std::size_t beam_size) {
             auto& searcher = self.get();
             auto beam = value_or_raise(released<Result<std::vector<core::moe::BeamEntry>>>(
                 [&] { return searcher.get_initial_beam(scores, beam_size); }));
             py::list out;
             for (const auto& entry : beam) {
               out.append(py::make_tuple(entry.score, entry.prefix, successors_to_python(entry.successors)));
             }
             return out;
           })
      .def("get_active_successors",
           [](PySearcher& self, const std::vector<std::string>& prefixes, std::optional<std::size_t> grid_size) {
             auto& searcher = self.get();
             auto found = value_or_raise(released<Result<std::map<std::string, core::moe::Successors>>>(
                 [&] { return searcher.get_active_successors(prefixes, grid_size); }));
             py::dict out;
             for (const auto& [prefix, successors] : found) out[py::str(prefix)] = successors_to_python(successors);
             return out;
           })
      .def("negative_cache_size", [](PySearcher& self) { return self.get().negative_cache_size(); })
      .def("lookups", [](PySearcher& self) { return self.get().lookups(); });

  m.def(
      "call_many_forward",
      [](const std::vector<std::vector<PyRemoteExpert*>>& natives, const std::vector<std::vector<FloatArray>>& inputs,
         std::size_t k_min, std::size_t backward_k_min, std::optional<double> timeout_after_k_min,
         std::optional<double> forward_timeout, std::optional<double> backward_timeout) {
        const auto experts = experts_of(natives);
        const auto rows = rows_of(inputs);
        const auto options = options_of(k_min, backward_k_min, timeout_after_k_min, forward_timeout, backward_timeout);
        auto result = value_or_raise(
            released<Result<MoeCallResult>>([&] { return call_many_forward(experts, rows, options); }));
        return result_to_python(result);
      },
      "Forward of every sample's rows through each of its experts, all at once: (outputs, mask).");
  m.def(
      "call_many_backward",
      [](const std::vector<std::vector<PyRemoteExpert*>>& natives, const std::vector<std::vector<FloatArray>>& inputs,
         const std::vector<std::vector<std::vector<FloatArray>>>& grad_outputs,
         const std::vector<std::vector<bool>>& mask, std::size_t k_min, std::size_t backward_k_min,
         std::optional<double> timeout_after_k_min, std::optional<double> forward_timeout,
         std::optional<double> backward_timeout) {
        const auto experts = experts_of(natives);
        const auto rows = rows_of(inputs);
        TensorsPerExpert grads(grad_outputs.size());
        for (std::size_t i = 0; i < grad_outputs.size(); ++i) grads[i] = rows_of(grad_outputs[i]);
        const auto options = options_of(k_min, backward_k_min, timeout_after_k_min, forward_timeout, backward_timeout);
        auto result = value_or_raise(released<Result<MoeCallResult>>(
            [&] { return call_many_backward(experts, rows, grads, mask, options); }));
        return result_to_python(result);
      },
      "The gradients of every sample's inputs from each expert the forward's mask kept: (gradients, mask).");
}

}  // namespace apiary::python
