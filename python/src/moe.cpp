// Bindings of the expert server and its client (api/expert_server.hpp,
// api/remote_expert.hpp) for apiary.moe. Tensors cross as (contiguous bytes, dtype name,
// shape); a schema as {"args": [...], "kwargs": {name: ...}, "outputs": [...],
// "single_output": bool}, each descriptor (instance shape, dtype name, requires_grad,
// compression). A served torch module is a Python object with forward(tensors) and
// backward(tensors), called from the server's thread with the GIL taken.
#include <pybind11/stl.h>

#include <utility>

#include "api/expert_server.hpp"
#include "api/remote_expert.hpp"
#include "core/moe/dht_layout.hpp"
#include "core/moe/expert_backend.hpp"
#include "python/src/common.hpp"
#include "python/src/moe.hpp"

namespace apiary::python {

namespace {

namespace moe = core::moe;

/// A tensor given from Python as (bytes-like, dtype name, shape), copied.
Result<messages::Tensor> tensor_from_python(const py::handle& item) {
  auto parts = py::reinterpret_borrow<py::tuple>(item);
  if (parts.size() != 3) return make_error(errc::invalid_argument, "expected (bytes, dtype, shape) for a tensor");
  auto type = messages::parse_dtype(parts[1].cast<std::string>());
  if (!type) return type.error();
  const auto shape = parts[2].cast<std::vector<std::uint32_t>>();
  const py::buffer_info bytes = parts[0].cast<py::buffer>().request();
  const auto size = static_cast<std::size_t>(bytes.size * bytes.itemsize);
  return messages::Tensor::copy_of(*type, messages::Shape(shape.begin(), shape.end()), bytes.ptr, size);
}

std::vector<messages::Tensor> tensors_from_python(const py::iterable& items) {
  std::vector<messages::Tensor> out;
  std::size_t index = 0;
  for (const auto& item : items) {
    auto tensor = tensor_from_python(item);
    if (!tensor) raise(make_error(tensor.error().code, "tensor {}: {}", index, tensor.error().message));
    out.push_back(std::move(*tensor));
    ++index;
  }
  return out;
}

py::list tensors_to_python(std::vector<messages::Tensor>& tensors) {
  py::list out;
  for (auto& tensor : tensors) out.append(tensor_to_python(tensor));
  return out;
}

moe::TensorSchema descriptor_of(const py::handle& item) {
  auto parts = py::reinterpret_borrow<py::tuple>(item);
  if (parts.size() != 4) raise(make_error(errc::invalid_argument, "expected (shape, dtype, requires_grad, compression)"));
  moe::TensorSchema out;
  const auto shape = parts[0].cast<std::vector<std::uint32_t>>();
  out.instance_shape.assign(shape.begin(), shape.end());
  out.type = value_or_raise(messages::parse_dtype(parts[1].cast<std::string>()));
  out.requires_grad = parts[2].cast<bool>();
  const int codec = parts[3].cast<int>();
  if (!pb::CompressionType_IsValid(codec)) raise(make_error(errc::invalid_argument, "unknown compression {}", codec));
  out.compression = static_cast<pb::CompressionType>(codec);
  return out;
}

py::tuple descriptor_to_python(const moe::TensorSchema& d) {
  std::vector<std::uint32_t> shape(d.instance_shape.begin(), d.instance_shape.end());
  return py::make_tuple(shape, std::string(messages::to_string(d.type)), d.requires_grad,
                        static_cast<int>(d.compression));
}

moe::ExpertSchema schema_of(const py::dict& schema) {
  moe::ExpertSchema out;
  for (const auto& d : schema["args"].cast<py::list>()) out.args.push_back(descriptor_of(d));
  if (schema.contains("kwargs")) {
    for (const auto& [name, d] : schema["kwargs"].cast<py::dict>()) out.kwargs[name.cast<std::string>()] = descriptor_of(d);
  }
  for (const auto& d : schema["outputs"].cast<py::list>()) out.outputs.push_back(descriptor_of(d));
  out.single_output = schema["single_output"].cast<bool>();
  if (out.single_output && out.outputs.size() != 1) {
    raise(make_error(errc::invalid_argument, "single_output with {} outputs", out.outputs.size()));
  }
  return out;
}

py::dict schema_to_python(const moe::ExpertSchema& schema) {
  py::dict out;
  py::list args;
  for (const auto& d : schema.args) args.append(descriptor_to_python(d));
  py::dict kwargs;
  for (const auto& [name, d] : schema.kwargs) kwargs[py::str(name)] = descriptor_to_python(d);
  py::list outputs;
  for (const auto& d : schema.outputs) outputs.append(descriptor_to_python(d));
  out["args"] = args;
  out["kwargs"] = kwargs;
  out["outputs"] = outputs;
  out["single_output"] = schema.single_output;
  return out;
}

/// A Python module's compute behind the server: its forward(tensors) and
/// backward(tensors) take and give lists of (bytes, dtype, shape).
class PyBackend final : public moe::ExpertBackend {
 public:
  PyBackend(py::object backend, moe::ExpertSchema schema) : backend_(std::move(backend)), schema_(std::move(schema)) {}
  // The server's threads may drop it while the main thread waits for them.
  ~PyBackend() override { drop_later(std::move(backend_)); }
  PyBackend(const PyBackend&) = delete;
  PyBackend& operator=(const PyBackend&) = delete;

  [[nodiscard]] const moe::ExpertSchema& info() const override { return schema_; }
  [[nodiscard]] Result<std::vector<moe::Tensor>> forward(const std::vector<moe::Tensor>& inputs) override {
    return call("forward", inputs);
  }
  [[nodiscard]] Result<std::vector<moe::Tensor>> backward(const std::vector<moe::Tensor>& inputs,
                                                          const std::vector<moe::Tensor>& grad_outputs) override {
    std::vector<moe::Tensor> all = inputs;
    all.insert(all.end(), grad_outputs.begin(), grad_outputs.end());
    return call("backward", all);
  }

 private:
  /// backend_.<method>(tensors); a Python exception is the batch's error, with its text.
  Result<std::vector<moe::Tensor>> call(const char* method, std::vector<moe::Tensor> tensors) {
    if (!Py_IsInitialized()) return make_error(errc::unavailable, "the Python interpreter has stopped");
    py::gil_scoped_acquire locked;
    try {
      py::object answer = backend_.attr(method)(tensors_to_python(tensors));
      std::vector<moe::Tensor> out;
      for (const auto& item : answer) {
        auto tensor = tensor_from_python(item);
        if (!tensor) return tensor.error();
        out.push_back(std::move(*tensor));
      }
      return out;
    } catch (py::error_already_set& e) {
      return make_error(errc::internal, "{}", e.what());
    } catch (const std::exception& e) {
      return make_error(errc::internal, "{}: {}", method, e.what());
    }
  }

  py::object backend_;
  moe::ExpertSchema schema_;
};

/// An expert server of Python backends on a DHT's runtime.
struct PyExpertServer {
  PyExpertServer() = default;
  ~PyExpertServer() {
    if (server) stop();
  }
  PyExpertServer(const PyExpertServer&) = delete;
  PyExpertServer& operator=(const PyExpertServer&) = delete;

  std::shared_ptr<Runtime> host;
  py::object dht_object;
  std::unique_ptr<ExpertServer> server;
  void stop() {
    {
      py::gil_scoped_release unlocked;  // a batch in flight takes the GIL to finish
      if (server) server->stop();
      server.reset();
      host.reset();
    }
    dht_object = py::object();
  }
};

PyExpertServer* make_server(const py::object& dht_object, const std::vector<std::tuple<std::string, py::object, py::dict>>& experts,
                            std::size_t max_batch_size, std::size_t min_batch_size, std::optional<double> timeout,
                            double update_period, std::optional<double> expiration, bool declare) {
  PyDht& node = dht_object.cast<PyDht&>();
  Dht& dht = node.get();
  std::vector<ExpertSlot> slots;
  for (const auto& [uid, backend, schema] : experts) {
    slots.push_back(ExpertSlot{uid, std::make_unique<PyBackend>(backend, schema_of(schema))});
  }
  ExpertServerOptions options;
  options.max_batch_size = max_batch_size;
  options.min_batch_size = min_batch_size;
  if (timeout) options.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(*timeout * 1000));
  options.update_period = update_period;
  options.expiration = expiration;
  auto out = std::make_unique<PyExpertServer>();
  out->host = node.host;
  out->dht_object = dht_object;  // the node's runtime serves the experts
  Result<std::unique_ptr<ExpertServer>> started = make_error(errc::internal, "not started");
  {
    py::gil_scoped_release unlocked;
    // Served under the DHT node's PeerID (the nodes of a process share one transport).
    started = ExpertServer::start(dht.runtime(), std::move(slots), options, declare ? &dht : nullptr);
  }
  out->server = value_or_raise(std::move(started));
  return out.release();
}

py::dict counters_of(PyExpertServer& s) {
  if (!s.server) throw std::runtime_error("the expert server was stopped");
  const ExpertServerCounters c = s.server->counters();
  py::dict out;
  out["batches"] = c.server.batches;
  out["rows"] = c.server.rows;
  out["failed_batches"] = c.server.failed_batches;
  out["refused"] = c.server.refused;
  out["declarations"] = c.declarations;
  out["failed_declarations"] = c.failed_declarations;
  return out;
}

/// expert.<call>(tensors) with the GIL released.
template <class Call>
py::list run_remote(PyRemoteExpert& self, const py::iterable& items, Call call) {
  auto tensors = tensors_from_python(items);
  Result<std::vector<messages::Tensor>> out = make_error(errc::internal, "not called");
  {
    py::gil_scoped_release unlocked;
    out = call(*self.expert, std::move(tensors));
  }
  auto values = value_or_raise(std::move(out));
  return tensors_to_python(values);
}

}  // namespace

void bind_moe(py::module_& m) {
  bind_moe_client(m);
  py::class_<PyExpertServer>(m, "ExpertServer", "Experts served on a DHT's runtime (and declared in it).")
      .def(py::init(&make_server), py::arg("dht"), py::arg("experts"), py::arg("max_batch_size"),
           py::arg("min_batch_size"), py::arg("timeout"), py::arg("update_period"), py::arg("expiration"),
           py::arg("declare"))
      .def("address", [](PyExpertServer& s) { return s.server ? s.server->address() : std::string(); })
      .def("uids", [](PyExpertServer& s) { return s.server ? s.server->uids() : std::vector<std::string>{}; })
      .def("counters", &counters_of)
      .def("stop", &PyExpertServer::stop, "Stops declaring and serving (idempotent).");
  py::class_<PyRemoteExpert>(m, "RemoteExpert", "A client of one expert of an expert server.")
      .def(py::init([](PyDht& node, const std::string& uid, const std::string& address, double timeout) {
             auto server = value_or_raise(core::PeerAddr::parse(address));
             (void)node.get();
             auto out = std::make_unique<PyRemoteExpert>();
             out->host = node.host;
             out->expert = std::make_unique<RemoteExpert>(*out->host, uid, std::move(server),
                                                          std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000)));
             return out.release();
           }),
           py::arg("dht"), py::arg("uid"), py::arg("address"), py::arg("timeout"))
      .def("info",
           [](PyRemoteExpert& self) {
             Result<moe::ExpertSchema> schema = make_error(errc::internal, "not asked");
             {
               py::gil_scoped_release unlocked;
               schema = self.expert->info();
             }
             return schema_to_python(value_or_raise(std::move(schema)));
           })
      .def("forward",
           [](PyRemoteExpert& self, const py::iterable& tensors) {
             return run_remote(self, tensors, [](RemoteExpert& e, std::vector<messages::Tensor> t) {
               return e.forward_tensors(std::move(t));
             });
           })
      .def("backward", [](PyRemoteExpert& self, const py::iterable& tensors) {
        return run_remote(self, tensors, [](RemoteExpert& e, std::vector<messages::Tensor> t) {
          return e.backward_tensors(std::move(t));
        });
      });
  m.def(
      "get_experts",
      [](PyDht& node, const std::vector<std::string>& uids, double timeout) {
        Dht& dht = node.get();
        Result<std::map<std::string, core::PeerAddr>> found = make_error(errc::internal, "not asked");
        {
          py::gil_scoped_release unlocked;
          found = get_experts(dht, uids, std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000)));
        }
        std::map<std::string, std::string> out;
        for (const auto& [uid, address] : value_or_raise(std::move(found))) out.emplace(uid, address.multiaddr());
        return out;
      },
      py::arg("dht"), py::arg("uids"), py::arg("timeout"), "uid -> server multiaddr of the uids declared.");
  m.def(
      "generate_uids_from_pattern",
      [](PyDht& node, std::size_t num_experts, const std::string& pattern, std::uint64_t seed) {
        ExpertServerOptions options;
        options.num_experts = num_experts;
        options.expert_pattern = pattern;
        options.seed = seed;
        Dht& dht = node.get();
        Result<std::vector<std::string>> uids = make_error(errc::internal, "not drawn");
        {
          py::gil_scoped_release unlocked;
          uids = expert_uids_of(options, &dht);
        }
        return value_or_raise(std::move(uids));
      },
      py::arg("dht"), py::arg("num_experts"), py::arg("pattern"), py::arg("seed"),
      "num_experts uids drawn from a pattern ('expert.[0:4].[0:4]'; '' for expert.0, expert.1, ...), skipping "
      "uids declared in the DHT.");
  m.def(
      "declare_experts",
      [](PyDht& node, const std::vector<std::string>& uids, const std::string& address, double expiration_time) {
        Dht& dht = node.get();
        auto entries = value_or_raise(moe::declaration_entries(uids, address));
        auto stored = dht.store_records(moe::store_items(entries, expiration_time));
        return Pending::of<std::vector<DhtStored>>(std::move(stored), [entries](std::vector<DhtStored>& results) {
          // hivemind's form: {key or (key, subkey): stored}.
          py::dict out;
          for (std::size_t i = 0; i < entries.size(); ++i) {
            const bool ok = i < results.size() && results[i].ok;
            if (entries[i].subkey) {
              out[py::make_tuple(entries[i].key, *entries[i].subkey)] = ok;
            } else {
              out[py::str(entries[i].key)] = ok;
            }
          }
          return py::object(out);
        });
      },
      py::arg("dht"), py::arg("uids"), py::arg("address"), py::arg("expiration_time"),
      "Declares `uids` as served at `address` until expiration_time (DHT seconds).");
}

}  // namespace apiary::python
