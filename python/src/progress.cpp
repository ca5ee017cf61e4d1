// Bindings of apiary::ProgressTracker: a run's progress beside a Python DHT; every call
// releases the GIL while the tracker's actor answers.
#include <pybind11/stl.h>

#include "core/optim/epoch.hpp"
#include "api/progress.hpp"
#include "python/src/common.hpp"

namespace apiary::python {

namespace {

py::dict local_to_python(const core::optim::LocalProgress& p) {
  py::dict d;
  d["peer_id"] = py::bytes(p.peer_id);
  d["epoch"] = p.epoch;
  d["samples_accumulated"] = p.samples_accumulated;
  d["samples_per_second"] = p.samples_per_second;
  d["time"] = p.time;
  d["client_mode"] = p.client_mode;
  return d;
}

py::object snapshot_to_python(const ProgressSnapshot& s) {
  py::dict g;
  g["epoch"] = s.global.epoch;
  g["samples_accumulated"] = s.global.samples_accumulated;
  g["target_batch_size"] = s.global.target_batch_size;
  g["num_peers"] = s.global.num_peers;
  g["num_clients"] = s.global.num_clients;
  g["eta_next_epoch"] = s.global.eta_next_epoch;
  g["next_fetch_time"] = s.global.next_fetch_time;
  py::dict out;
  out["local"] = local_to_python(s.local);
  out["global"] = g;
  out["ready_to_update_epoch"] = s.ready_to_update_epoch;
  out["estimated_next_update_time"] = s.estimated_next_update_time;
  out["fetched_this_epoch"] = s.fetched_this_epoch;
  out["reports_stored"] = s.reports_stored;
  out["fetches"] = s.fetches;
  return std::move(out);
}

/// A Python tracker: stop() leaves the run and ends the C++ tracker even while Python
/// still holds the object, so the runtime beneath can stop.
struct PyProgressTracker {
  explicit PyProgressTracker(std::unique_ptr<ProgressTracker> started) : tracker(std::move(started)) {}
  PyProgressTracker(PyProgressTracker&&) = default;
  PyProgressTracker& operator=(PyProgressTracker&&) = delete;
  ~PyProgressTracker() {
    py::gil_scoped_release unlocked;  // as stop(): the tracker's threads may need the GIL
    tracker.reset();
  }
  PyProgressTracker(const PyProgressTracker&) = delete;
  PyProgressTracker& operator=(const PyProgressTracker&) = delete;
  std::unique_ptr<ProgressTracker> tracker;
  ProgressTracker& get() {
    if (!tracker) throw std::runtime_error("expected a running progress tracker, but it was shut down");
    return *tracker;
  }
  void stop() {
    py::gil_scoped_release unlocked;
    tracker.reset();
  }
};

/// `fn()` on the tracker with the GIL released, its result converted with the GIL held.
template <class T, class F>
T unlocked(F&& fn) {
  Result<T> r = make_error(errc::internal, "not run");
  {
    py::gil_scoped_release released;
    r = fn();
  }
  return value_or_raise(std::move(r));
}

}  // namespace

void bind_progress(py::module_& m) {
  // The collaborative optimizer's per-step decisions (core/optim/epoch.hpp), shared by
  // apiary::Optimizer and apiary.Optimizer.
  m.def("epoch_should_load_state", &core::optim::should_load_state, py::arg("local_epoch"), py::arg("global_epoch"),
        py::arg("check_sync"), py::arg("fetched_this_epoch"));
  m.def("epoch_next", &core::optim::next_epoch, py::arg("local_epoch"), py::arg("global_epoch"));
  m.def("epoch_should_average_state", &core::optim::should_average_state, py::arg("next_epoch"), py::arg("every"),
        py::arg("num_peers"));
  m.def("epoch_should_schedule", &core::optim::should_schedule, py::arg("eta_seconds"), py::arg("matchmaking_time"),
        py::arg("num_peers"), py::arg("scheduled"));
  py::class_<PyProgressTracker>(m, "ProgressTracker", "A collaborative run's progress beside a Dht.")
      .def(py::init([](PyDht& node, const std::string& run_id, py::dict o, const std::optional<py::bytes>& seed) {
             Dht& dht = node.get();
             ProgressTrackerOptions options;
             options.run_id = run_id;
             auto& c = options.tracker;
             c.target_batch_size = o["target_batch_size"].cast<std::int64_t>();
             c.client_mode = o["client_mode"].cast<bool>();
             c.min_refresh_period = o["min_refresh_period"].cast<double>();
             c.max_refresh_period = o["max_refresh_period"].cast<double>();
             c.default_refresh_period = o["default_refresh_period"].cast<double>();
             c.expected_drift_peers = o["expected_drift_peers"].cast<double>();
             c.expected_drift_rate = o["expected_drift_rate"].cast<double>();
             c.performance_ema_alpha = o["performance_ema_alpha"].cast<double>();
             c.metadata_expiration = o["metadata_expiration"].cast<double>();
             if (seed) options.owner_key = value_or_raise(messages::Ed25519PrivateKey::from_seed(std::string(*seed)));
             Result<std::unique_ptr<ProgressTracker>> started = make_error(errc::internal, "not started");
             {
               py::gil_scoped_release released;
               started = ProgressTracker::start(dht, std::move(options));
             }
             return PyProgressTracker(value_or_raise(std::move(started)));
           }),
           py::arg("dht"), py::arg("run_id"), py::arg("options"), py::arg("owner_seed"), py::keep_alive<1, 2>())
      .def(
          "report",
          [](PyProgressTracker& p, std::int64_t epoch, std::int64_t samples, bool update_global) {
            ProgressTracker& t = p.get();
            return snapshot_to_python(
                unlocked<ProgressSnapshot>([&] { return t.report(epoch, samples, update_global); }));
          },
          py::arg("epoch"), py::arg("samples_accumulated"), py::arg("update_global_samples") = true,
          "report_local_progress; the snapshot after.")
      .def(
          "update_epoch",
          [](PyProgressTracker& p, std::optional<std::int64_t> epoch) {
            ProgressTracker& t = p.get();
            return unlocked<std::int64_t>([&] { return t.update_epoch(epoch); });
          },
          py::arg("epoch") = py::none(), "Moves to `epoch` (default local + 1); the new local epoch.")
      .def(
          "look",
          [](PyProgressTracker& p) {
            ProgressTracker& t = p.get();
            return snapshot_to_python(unlocked<ProgressSnapshot>([&] { return t.look(); }));
          },
          "The tracker as it stands.")
      .def(
          "fetch",
          [](PyProgressTracker& p, double timeout) {
            ProgressTracker& t = p.get();
            const auto patience = std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000));
            return snapshot_to_python(unlocked<ProgressSnapshot>([&] { return t.fetch(patience); }));
          },
          py::arg("timeout") = 30.0, "Reads every peer's record now; the snapshot after.")
      .def(
          "leave",
          [](PyProgressTracker& p, double timeout) {
            ProgressTracker& t = p.get();
            const auto patience = std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000));
            return unlocked<bool>([&] { return t.leave(patience); });
          },
          py::arg("timeout") = 10.0, "Publishes None (this peer left); whether the DHT took it.")
      .def(
          "pause",
          [](PyProgressTracker& p, bool paused) {
            ProgressTracker& t = p.get();
            (void)unlocked<Unit>([&] { return t.pause(paused); });
          },
          py::arg("paused"), "Holds reports and fetches back (True) or lets them go (False).")
      .def_property_readonly("owner_marker", [](PyProgressTracker& p) { return py::bytes(p.get().owner_marker()); })
      .def("stop", &PyProgressTracker::stop, "Leaves the run (if not yet) and stops; idempotent.");
}

}  // namespace apiary::python
