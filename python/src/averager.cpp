// Bindings of apiary::Averager: the trainer's float32 tensors are averaged in place
// (their memory is read before each step and updated by the CPU device actor), so
// nothing is copied beyond what the C++ path copies.
#include <pybind11/stl.h>

#include <mutex>
#include <tuple>

#include "api/averager.hpp"
#include "python/src/common.hpp"

namespace apiary::python {

namespace {

py::object report_to_python(AveragerStepReport& r) {
  py::dict out;
  out["group_id"] = py::bytes(r.group_id);
  out["peers"] = r.peers;
  py::list gathered;
  for (const auto& g : r.gathered) gathered.append(py::bytes(g));
  out["gathered"] = gathered;
  out["my_index"] = r.my_index;
  out["shares"] = r.shares;
  out["failed_senders"] = r.failed_senders;
  out["failed_reducers"] = r.failed_reducers;
  out["attempts"] = r.attempts;
  out["next_group_key"] = r.next_group_key;
  return std::move(out);
}

/// A Python callable the averager's actor thread calls (with the GIL), released by its
/// owner under the GIL: the thread may hold the holder longer than Python lives.
struct PyCallback {
  std::mutex mutex;
  PyObject* fn = nullptr;  ///< owned reference; null once released

  /// The callable (None once released); call with the GIL held.
  py::object get() {
    std::lock_guard<std::mutex> lock(mutex);
    return fn == nullptr ? py::none() : py::reinterpret_borrow<py::object>(fn);
  }
  /// Drops the callable; call with the GIL held.
  void release() {
    std::lock_guard<std::mutex> lock(mutex);
    Py_XDECREF(fn);
    fn = nullptr;
  }
};

/// The state a Python averager shares: its provider's (metadata bytes, serialized
/// runtime.proto Tensors) as a SharedState. Called on the averager's actor thread.
Result<SharedState> shared_state_of(PyCallback& provider) {
  if (!Py_IsInitialized() || _Py_IsFinalizing()) return make_error(errc::cancelled, "Python is shutting down");
  py::gil_scoped_acquire locked;
  py::object fn = provider.get();
  if (fn.is_none()) return make_error(errc::cancelled, "expected a running averager, but it was stopped");
  try {
    auto parts = fn().cast<std::pair<py::bytes, std::vector<py::bytes>>>();
    SharedState state;
    state.metadata = std::string(parts.first);
    for (const auto& serialized : parts.second) {
      const std::string_view bytes = serialized;
      pb::Tensor tensor;
      if (!tensor.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
        return make_error(errc::malformed, "get_current_state gave tensor {} as bytes that are not a runtime.proto "
                                           "Tensor", state.tensors.size());
      }
      state.tensors.push_back(std::move(tensor));
    }
    return state;
  } catch (py::error_already_set& e) {
    return make_error(errc::internal, "get_current_state raised {}", e.what());
  } catch (py::cast_error& e) {
    return make_error(errc::invalid_argument, "expected (metadata bytes, [Tensor bytes]) from get_current_state: {}",
                      e.what());
  }
}

/// A Python averager: stop() ends the C++ averager even while Python still holds the
/// object (a traceback's frame, say), so the runtime it runs on can stop.
struct PyAverager {
  std::unique_ptr<Averager> averager;
  std::shared_ptr<PyCallback> provider = std::make_shared<PyCallback>();
  PyAverager() = default;
  PyAverager(PyAverager&&) = default;
  ~PyAverager() {
    if (averager || provider) stop();
  }
  Averager& get() {
    if (!averager) throw std::runtime_error("expected a running averager, but it was stopped");
    return *averager;
  }
  void stop() {
    {
      py::gil_scoped_release unlocked;
      averager.reset();
    }
    if (provider) provider->release();
  }
};

}  // namespace

void bind_averager(py::module_& m) {
  m.def(
      "powersgd_matrix",
      [](const std::vector<std::int64_t>& shape, std::size_t rank, double min_compression_ratio) {
        const auto matrix = core::averaging::powersgd_matrix(shape, rank, min_compression_ratio);
        return std::make_pair(matrix.rows, matrix.cols);
      },
      py::arg("shape"), py::arg("rank"), py::arg("min_compression_ratio"),
      "The (rows, cols) a tensor of this shape is averaged as by PowerSGD; (0, 0): plainly.");
  py::class_<PyAverager>(m, "Averager", "A decentralized averager beside a Dht, over the trainer's memory.")
      .def(py::init([](PyDht& node, const std::vector<std::pair<std::uintptr_t, std::size_t>>& tensors, py::dict o) {
             Dht& dht = node.get();
             AveragerOptions options;
             for (const auto& [ptr, size] : tensors) {
               options.device_tensors.push_back(DeviceTensor{reinterpret_cast<float*>(ptr), size});
             }
             // Host memory: the CPU device actor; a GPU's: that GPU's device actor (a CUDA build).
             const int gpu = o["gpu"].cast<int>();
             options.reduce_on = gpu < 0 ? ReduceOn::cpu : ReduceOn::gpu;
             options.gpu = gpu < 0 ? 0 : gpu;
             options.prefix = o["prefix"].cast<std::string>();
             options.mode = static_cast<core::averaging::AveragingMode>(o["mode"].cast<int>());
             options.target_group_size = o["target_group_size"].cast<std::size_t>();
             options.min_group_size = o["min_group_size"].cast<std::size_t>();
             options.initial_group_bits = o["initial_group_bits"].cast<std::string>();
             options.min_matchmaking_time = o["min_matchmaking_time"].cast<double>();
             options.request_timeout = o["request_timeout"].cast<double>();
             options.averaging_alpha = o["averaging_alpha"].cast<double>();
             options.identical_results = o["identical_results"].cast<bool>();
             options.bandwidth = o["bandwidth"].cast<std::optional<double>>();
             options.codecs.clear();
             for (int codec : o["codecs"].cast<std::vector<int>>()) {
               options.codecs.push_back(static_cast<pb::CompressionType>(codec));
             }
             options.part_size_bytes = o["part_size_bytes"].cast<std::int64_t>();
             options.min_vector_size = o["min_vector_size"].cast<std::int64_t>();
             options.sender_timeout = o["sender_timeout"].cast<double>();
             options.reducer_timeout = o["reducer_timeout"].cast<double>();
             options.state_sharing_priority = o["state_sharing_priority"].cast<std::optional<double>>();
             options.declare_state_period = o["declare_state_period"].cast<double>();
             for (int codec : o["state_codecs"].cast<std::vector<int>>()) {
               options.state_codecs.push_back(static_cast<pb::CompressionType>(codec));
             }
             if (o.contains("powersgd") && !o["powersgd"].is_none()) {
               // (rank, [(rows, cols) per tensor; (0, 0): plain], seed)
               auto [rank, matrices, seed] =
                   o["powersgd"].cast<std::tuple<std::size_t, std::vector<std::pair<std::int64_t, std::int64_t>>,
                                                 std::uint64_t>>();
               core::averaging::PowerSgdConfig powersgd;
               powersgd.rank = rank;
               powersgd.seed = seed;
               for (const auto& [rows, cols] : matrices) powersgd.matrices.push_back({rows, cols});
               options.powersgd = std::move(powersgd);
             }
             PyAverager out;
             py::object provide = o["current_state"];
             if (!provide.is_none()) {
               out.provider->fn = provide.release().ptr();
               options.current_state = [provider = out.provider] { return shared_state_of(*provider); };
             }
             Result<std::unique_ptr<Averager>> started = make_error(errc::internal, "not started");
             {
               py::gil_scoped_release unlocked;
               started = Averager::start(dht, std::move(options));
             }
             out.averager = value_or_raise(std::move(started));
             return out;
           }),
           py::arg("dht"), py::arg("tensors"), py::arg("options"), py::keep_alive<1, 2>())
      .def("stop", &PyAverager::stop, "Stops the averager (a running step ends cancelled); idempotent.")
      .def(
          "step",
          [](PyAverager& p, double weight, double timeout, double scheduled_in, const py::bytes& gather,
             bool require_trigger) {
            AveragerStepOptions options;
            options.weight = weight;
            options.timeout = timeout;
            options.scheduled_in = scheduled_in;
            options.gather = std::string(gather);
            options.require_trigger = require_trigger;
            Averager& a = p.get();
            std::future<Result<AveragerStepReport>> future;
            {
              py::gil_scoped_release unlocked;  // reads the tensors through the device actor
              future = a.step(options);
            }
            return Pending::of<AveragerStepReport>(std::move(future), report_to_python);
          },
          py::arg("weight"), py::arg("timeout"), py::arg("scheduled_in"), py::arg("gather"),
          py::arg("require_trigger"), "Starts one averaging step; its report comes through the Pending.")
      .def(
          "trigger",
          [](PyAverager& p) {
            Averager& a = p.get();
            py::gil_scoped_release unlocked;  // reads the tensors through the device actor
            a.trigger();
          },
          "Lets a require_trigger step begin its all-reduce, with the tensors as they are now.")
      .def("cancel", [](PyAverager& p) { p.get().cancel(); }, "Abandons the running step (it ends cancelled).")
      .def(
          "set_state_sharing_priority",
          [](PyAverager& p, std::optional<double> priority) {
            Averager& a = p.get();
            Status done = ok_status();
            {
              py::gil_scoped_release unlocked;
              done = a.set_state_sharing_priority(priority);
            }
            value_or_raise(std::move(done));
          },
          py::arg("priority"), "Declares this peer a donor with this priority from now on (None: no longer).")
      .def(
          "set_weight",
          [](PyAverager& p, double w) {
            Averager& a = p.get();
            py::gil_scoped_release unlocked;
            return a.set_weight(w);
          },
          "Changes the running step's weight; False once its all-reduce began.")
      .def(
          "load_state_from_peers",
          [](PyAverager& p, double timeout, bool any_state) {
            Averager& a = p.get();
            std::future<Result<AveragerState>> future;
            {
              py::gil_scoped_release unlocked;
              future = a.load_state_from_peers(timeout, any_state);
            }
            return Pending::of<AveragerState>(std::move(future), [](AveragerState& s) {
              py::list tensors;
              for (auto& t : s.tensors) tensors.append(tensor_to_python(t));
              return py::object(py::make_tuple(py::bytes(s.metadata), s.donor, tensors));
            });
          },
          py::arg("timeout"), py::arg("any_state") = true,
          "Downloads the state of the best donor: (metadata bytes, donor multiaddr, [(values, dtype, shape)]).")
      .def("set_state_metadata", [](PyAverager& p, const py::bytes& m) { p.get().set_state_metadata(std::string(m)); })
      .def("tensors", [](PyAverager& p) { return p.get().tensors(); },
           "The averager's copy of the tensors (as of the last step or download).")
      .def_property_readonly("id", [](PyAverager& p) { return p.get().id(); }, "The averager's multiaddr with /p2p/.")
      .def("group_key", [](PyAverager& p) { return p.get().group_key(); }, "The group key the next step uses.")
      .def("transport_bytes", [](PyAverager& p) { return p.get().transport_bytes(); },
           "Bytes sent and received by the transport.");
}

}  // namespace apiary::python
