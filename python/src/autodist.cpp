// Bindings of apiary::AutoDistJob for apiary.autodist: the strategy, PS devices and
// replica of one trainer process; tensors cross as float32 numpy arrays (the caller's
// torch tensors' memory), copied with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <set>

#include <google/protobuf/text_format.h>

#include "api/autodist.hpp"
#include "python/src/common.hpp"

namespace apiary::python {

namespace {

namespace cs = core::strategy;

using FloatArray = py::array_t<float, py::array::c_style>;

/// A float32 C-contiguous array's buffer (no copy), named for errors.
struct Buffer {
  float* data = nullptr;
  std::size_t size = 0;
};

Buffer buffer_of(const std::string& name, const py::handle& object, bool writable) {
  if (!py::isinstance<FloatArray>(object)) {
    throw py::type_error("expected a C-contiguous float32 numpy array for " + name);
  }
  auto array = py::reinterpret_borrow<py::array>(object);
  if (writable && !array.writeable()) throw py::value_error("expected a writable array for " + name);
  return Buffer{static_cast<float*>(array.mutable_data()), static_cast<std::size_t>(array.size())};
}

cs::BuilderOptions builder_options(const py::dict& given) {
  cs::BuilderOptions o;
  for (const auto& [key, value] : given) {
    const auto k = key.cast<std::string>();
    if (value.is_none()) continue;
    if (k == "local_proxy_variable") {
      o.local_proxy_variable = value.cast<bool>();
    } else if (k == "sync") {
      o.sync = value.cast<bool>();
    } else if (k == "staleness") {
      o.staleness = value.cast<std::int32_t>();
    } else if (k == "chunk_size") {
      o.chunk_size = value.cast<std::int64_t>();
    } else if (k == "seed") {
      o.seed = value.cast<std::uint64_t>();
    } else if (k == "all_reduce_spec") {
      cs::ArSpec spec{};
      if (!pb::autodist::AllReduceSynchronizer::Spec_Parse(value.cast<std::string>(), &spec)) {
        throw py::value_error("all_reduce_spec: expected AUTO, NCCL or RING, got " + value.cast<std::string>());
      }
      o.all_reduce_spec = spec;
    } else if (k == "compressor") {
      cs::ArCompressor compressor{};
      if (!pb::autodist::AllReduceSynchronizer::Compressor_Parse(value.cast<std::string>(), &compressor)) {
        throw py::value_error("compressor: expected NoneCompressor, HorovodCompressor or HorovodCompressorEF, got " +
                              value.cast<std::string>());
      }
      o.compressor = compressor;
    } else {
      throw py::value_error("unknown builder option " + k);
    }
  }
  return o;
}

core::ps::OptimizerConfig optimizer_of(const py::dict& given) {
  core::ps::OptimizerConfig o;
  const auto kind = given["kind"].cast<std::string>();
  if (kind == "sgd") {
    o.kind = core::ps::OptimizerKind::sgd;
  } else if (kind == "momentum") {
    o.kind = core::ps::OptimizerKind::momentum;
  } else if (kind == "adam") {
    o.kind = core::ps::OptimizerKind::adam;
  } else {
    throw py::value_error("optimizer kind: expected sgd, momentum or adam, got " + kind);
  }
  o.learning_rate = given["lr"].cast<float>();
  if (given.contains("momentum")) o.momentum = given["momentum"].cast<float>();
  if (given.contains("nesterov")) o.nesterov = given["nesterov"].cast<bool>();
  if (given.contains("beta1")) o.beta1 = given["beta1"].cast<float>();
  if (given.contains("beta2")) o.beta2 = given["beta2"].cast<float>();
  if (given.contains("epsilon")) o.epsilon = given["epsilon"].cast<float>();
  return o;
}

/// A trainer's job: the gradients and parameters it exchanges live in maps kept across
/// steps (their memory reused), copied from and to the caller's arrays.
struct PyAutoDistJob {
  std::unique_ptr<AutoDistJob> job;
  std::map<std::string, std::vector<float>> params;
  std::map<std::string, std::vector<float>> grads;
  std::set<std::string> names;  ///< the job's variables

  ~PyAutoDistJob() {
    py::gil_scoped_release unlocked;
    job.reset();
  }
  AutoDistJob& get() {
    if (!job) throw std::runtime_error("expected a running AutoDist job, but it was shut down");
    return *job;
  }

  /// Pulls this step's parameters into the arrays of `out` (name -> array): the
  /// all-reduced ones written straight into them by the replica, the PS ones received
  /// into this job's vectors and copied.
  std::int64_t pull(const py::dict& out) {
    std::vector<std::pair<std::vector<float>*, Buffer>> targets;
    std::map<std::string, core::train::DirectTarget> direct;
    std::vector<std::pair<std::string, Buffer>> given;
    for (const auto& [key, value] : out) {
      const auto name = key.cast<std::string>();
      if (names.count(name) == 0) throw py::key_error("the job has no variable " + name);
      Buffer b = buffer_of(name, value, true);
      direct[name] = core::train::DirectTarget{b.data, b.size};
      given.emplace_back(name, b);
    }
    std::int64_t version = 0;
    Status st = ok_status();
    {
      py::gil_scoped_release unlocked;
      st = get().pull_into(params, direct, &version);
    }
    if (!st) raise(st.error());
    for (const auto& [name, b] : given) {
      auto it = params.find(name);
      if (it == params.end()) continue;  // written in place
      if (b.size != it->second.size()) {
        throw py::value_error(name + ": expected an array of " + std::to_string(it->second.size()) + " values, got " +
                              std::to_string(b.size));
      }
      targets.emplace_back(&it->second, b);
    }
    py::gil_scoped_release unlocked;
    for (auto& [from, to] : targets) std::memcpy(to.data, from->data(), to.size * sizeof(float));
    return version;
  }

  /// Arrays over this job's own gradient vectors (name -> number of values, dense variables),
  /// `owner` (this job's Python object) their base: a trainer that lets backward() write
  /// its gradients there pushes them without a copy. A vector of another size is made
  /// anew, zeroed; one of that size keeps its values.
  py::dict gradient_arrays(const py::object& owner, const std::map<std::string, std::size_t>& sizes) {
    py::dict out;
    for (const auto& [name, size] : sizes) {
      if (names.count(name) == 0) throw py::key_error("the job has no variable " + name);
      auto& v = grads[name];
      if (v.size() != size) v.assign(size, 0.0f);
      out[py::str(name)] = py::array_t<float>({static_cast<py::ssize_t>(size)}, {sizeof(float)}, v.data(), owner);
    }
    return out;
  }

  /// Pushes the gradients of `given` (name -> array) and the sparse ones of `rows` (name ->
  /// (int64 row indices, float32 values, row after row)), every variable once, from
  /// `samples` examples. An array over this job's own vector (gradient_arrays) is lent
  /// as it is; any other is copied. Returns whether a lent vector's memory moved during
  /// the step (the arrays over it are then stale and must be asked for again).
  bool push(const py::dict& given, double samples, const py::dict& rows, double learning_rate) {
    std::vector<std::pair<std::vector<float>*, Buffer>> sources;
    std::vector<std::pair<std::string, const float*>> lent;  // by name: the step may return other map nodes
    for (const auto& [key, value] : given) {
      const auto name = key.cast<std::string>();
      auto& to = grads[name];
      const Buffer from = buffer_of(name, value, false);
      if (from.data == to.data() && from.size == to.size() && from.size > 0) {
        lent.emplace_back(name, to.data());
      } else {
        sources.emplace_back(&to, from);
      }
    }
    std::map<std::string, core::ps::SparseGradient> sparse;
    for (const auto& [key, value] : rows) {
      const auto name = key.cast<std::string>();
      auto t = value.cast<py::tuple>();
      if (t.size() != 2) throw py::value_error(name + ": expected (row indices, values)");
      auto indices = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(t[0]);
      if (!indices) throw py::type_error(name + ": expected int64 row indices");
      Buffer v = buffer_of(name, t[1], false);
      auto& g = sparse[name];
      g.rows.assign(indices.data(), indices.data() + indices.size());
      g.values.assign(v.data, v.data + v.size);
      grads.erase(name);
    }
    Status st = ok_status();
    {
      py::gil_scoped_release unlocked;
      for (auto& [to, from] : sources) to->assign(from.data, from.data + from.size);
      st = get().push_lent(grads, samples, std::move(sparse), static_cast<float>(learning_rate));
    }
    if (!st) raise(st.error());
    bool moved = false;
    for (const auto& [name, data] : lent) {
      const auto it = grads.find(name);
      moved = moved || it == grads.end() || it->second.data() != data;
    }
    return moved;
  }
};

}  // namespace

void bind_autodist(py::module_& m) {
  m.def(
      "autodist_ps_devices",
      [](const std::string& resource_spec,
         const std::vector<std::tuple<std::string, std::vector<std::int64_t>, bool>>& variables,
         const std::string& builder, const py::dict& options, const std::string& strategy_file,
         const py::dict& optimizer, const std::string& job_name) {
        AutoDistOptions o;
        o.resource_spec = resource_spec;
        for (const auto& [name, shape, sparse] : variables) o.variables.push_back({name, shape, sparse});
        o.builder = builder;
        o.builder_options = builder_options(options);
        o.strategy_file = strategy_file;
        o.optimizer = optimizer_of(optimizer);
        o.job = job_name;
        return value_or_raise(AutoDistJob::ps_devices(o));
      },
      py::arg("resource_spec"), py::arg("variables"), py::arg("builder"), py::arg("builder_options"),
      py::arg("strategy_file"), py::arg("optimizer"), py::arg("job"),
      "The PS devices of the strategy built for these variables, in plan order.");
  py::class_<PyAutoDistJob>(m, "AutoDistJob", "This trainer's part of an AutoDist job (apiary.autodist).")
      .def(py::init([](const std::string& resource_spec, const std::vector<std::tuple<std::string, std::vector<std::int64_t>, bool>>& variables,
                       const py::dict& initial, std::int32_t rank, std::uint16_t port, const std::string& builder,
                       const py::dict& options, const std::string& strategy_file, const py::dict& optimizer,
                       double timeout, double patience, const std::string& job_name, const py::dict& states,
                       const std::vector<std::string>& serve_devices, bool ps_processes, const std::string& mode,
                       bool insecure, double drop_lost_replicas_after, double ps_restart_wait,
                       std::int64_t replay_steps, std::int64_t resume_at, bool rejoin) {
             AutoDistOptions o;
             o.resource_spec = resource_spec;
             for (const auto& [name, shape, sparse] : variables) o.variables.push_back({name, shape, sparse});
             for (const auto& [key, value] : initial) {
               const auto name = key.cast<std::string>();
               Buffer b = buffer_of(name, value, false);
               o.initial[name].assign(b.data, b.data + b.size);
             }
             o.rank = rank;
             o.port = port;
             o.builder = builder;
             o.builder_options = builder_options(options);
             o.strategy_file = strategy_file;
             o.optimizer = optimizer_of(optimizer);
             if (!(timeout > 0) || !(patience > 0)) throw py::value_error("expected timeout and patience > 0 seconds");
             o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000));
             o.patience = std::chrono::milliseconds(static_cast<std::int64_t>(patience * 1000));
             o.job = job_name;
             o.serve_devices = serve_devices;
             o.ps_processes = ps_processes;
             o.mode = mode;
             o.insecure = insecure;
             if (drop_lost_replicas_after >= 0) {
               o.drop_lost_replicas_after =
                   std::chrono::milliseconds(static_cast<std::int64_t>(drop_lost_replicas_after * 1000));
             }
             if (!(ps_restart_wait >= 0)) throw py::value_error("expected ps_restart_wait >= 0 seconds");
             o.ps_restart_wait = std::chrono::milliseconds(static_cast<std::int64_t>(ps_restart_wait * 1000));
             o.replay_steps = replay_steps;
             if (resume_at >= 0) o.resume_at = resume_at;
             o.rejoin = rejoin;
             for (const auto& [key, value] : states) {
               const auto name = key.cast<std::string>();
               auto t = value.cast<py::tuple>();
               if (t.size() != 3) throw py::value_error(name + ": expected an optimizer state (updates, m, v)");
               core::ps::Optimizer::State s;
               s.updates = t[0].cast<std::int64_t>();
               Buffer m = buffer_of(name + " m", t[1], false);
               Buffer v = buffer_of(name + " v", t[2], false);
               s.m.assign(m.data, m.data + m.size);
               s.v.assign(v.data, v.data + v.size);
               o.states.emplace(name, std::move(s));
             }
             Result<std::unique_ptr<AutoDistJob>> started = make_error(errc::internal, "not started");
             {
               py::gil_scoped_release unlocked;
               started = AutoDistJob::start(std::move(o));
             }
             auto out = std::make_unique<PyAutoDistJob>();
             out->job = value_or_raise(std::move(started));
             for (const auto& v : variables) out->names.insert(std::get<0>(v));
             return out;
           }),
           py::arg("resource_spec"), py::arg("variables"), py::arg("initial"), py::arg("rank"), py::arg("port"),
           py::arg("builder"), py::arg("builder_options"), py::arg("strategy_file"), py::arg("optimizer"),
           py::arg("timeout"), py::arg("patience"), py::arg("job"), py::arg("states") = py::dict(),
           py::arg("serve_devices") = std::vector<std::string>{}, py::arg("ps_processes") = false,
           py::arg("mode") = "tcp", py::arg("insecure") = false, py::arg("drop_lost_replicas_after") = -1.0,
           py::arg("ps_restart_wait") = 0.0, py::arg("replay_steps") = 0, py::arg("resume_at") = -1,
           py::arg("rejoin") = false)
      .def("pull", &PyAutoDistJob::pull, py::arg("out"),
           "Pulls this step's parameters into the arrays of out (name -> float32 array); returns the version.")
      .def(
          "gradient_arrays",
          [](py::object self, const std::map<std::string, std::size_t>& sizes) {
            return self.cast<PyAutoDistJob&>().gradient_arrays(self, sizes);
          },
          py::arg("sizes"),
          "float32 arrays (zeros) over the job's own gradient memory, name -> array for sizes (name -> values); "
          "push() lends an array of these without copying it.")
      .def("push", &PyAutoDistJob::push, py::arg("gradients"), py::arg("samples"), py::arg("rows") = py::dict(),
           py::arg("learning_rate") = 0.0,
           "Pushes every variable's gradient (name -> float32 array; a sparse one as rows: name -> (int64 rows, "
           "float32 values)) from samples examples, updated at learning_rate (0: the configured one); returns once "
           "applied, with whether the memory of gradient_arrays() moved (ask for them again).")
      .def("leave",
           [](PyAutoDistJob& self) {
             Status st = ok_status();
             {
               py::gil_scoped_release unlocked;
               st = self.get().leave();
             }
             if (!st) raise(st.error());
           })
      .def("shutdown",
           [](PyAutoDistJob& self) {
             py::gil_scoped_release unlocked;
             self.job.reset();
           })
      .def("optimizer_states",
           [](PyAutoDistJob& self) {
             Result<std::map<std::string, core::ps::Optimizer::State>> states = make_error(errc::internal, "not run");
             {
               py::gil_scoped_release unlocked;
               states = self.get().optimizer_states();
             }
             py::dict out;
             for (auto& [name, s] : value_or_raise(std::move(states))) {
               out[py::str(name)] = py::make_tuple(s.updates, py::array_t<float>(s.m.size(), s.m.data()),
                                                   py::array_t<float>(s.v.size(), s.v.data()));
             }
             return out;
           })
      .def_property_readonly("rank", [](PyAutoDistJob& self) { return self.get().rank(); })
      .def_property_readonly("replicas", [](PyAutoDistJob& self) { return self.get().replicas(); })
      .def_property_readonly("summary", [](PyAutoDistJob& self) { return self.get().summary(); })
      .def_property_readonly("served", [](PyAutoDistJob& self) { return self.get().served(); })
      .def_property_readonly("strategy", [](PyAutoDistJob& self) {
        std::string text;
        google::protobuf::TextFormat::PrintToString(self.get().strategy(), &text);
        return text;
      });
}

}  // namespace apiary::python
