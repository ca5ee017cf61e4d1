// The _apiary extension module: the C++ API for apiary's Python package (python/apiary).
#include <pybind11/stl.h>

#include <mutex>
#include <utility>
#include <vector>

#include "api/dht.hpp"
#include "messages/identity/peer_id.hpp"
#include "python/src/common.hpp"

namespace apiary::python {

void raise(const Error& error) {
  // The Python exception of each kind of error; every other kind is a RuntimeError.
  const std::pair<errc, PyObject*> kinds[] = {
      {errc::invalid_argument, PyExc_ValueError},     {errc::malformed, PyExc_ValueError},
      {errc::too_large, PyExc_ValueError},            {errc::not_found, PyExc_LookupError},
      {errc::unavailable, PyExc_ConnectionError},     {errc::peer_down, PyExc_ConnectionError},
      {errc::deadline_exceeded, PyExc_TimeoutError},  {errc::io, PyExc_OSError},
      {errc::unsupported, PyExc_NotImplementedError}, {errc::unauthorized, PyExc_PermissionError},
  };
  PyObject* kind = PyExc_RuntimeError;
  py::object holder;
  if (error.code == errc::cancelled) {
    holder = py::module_::import("concurrent.futures").attr("CancelledError");
    kind = holder.ptr();
  }
  for (const auto& [code, exception] : kinds) {
    if (code == error.code) kind = exception;
  }
  PyErr_SetString(kind, error.message.c_str());
  throw py::error_already_set();
}

namespace {

std::mutex orphans_mutex;
std::vector<PyObject*> orphans;  // references dropped by threads without the GIL

int drop_orphans(void* /*unused*/) {
  std::vector<PyObject*> taken;
  {
    std::lock_guard<std::mutex> lock(orphans_mutex);
    taken.swap(orphans);
  }
  for (PyObject* object : taken) Py_DECREF(object);
  return 0;
}

}  // namespace

void drop_later(py::object object) {
  if (!object) return;
  if (!Py_IsInitialized() || _Py_IsFinalizing()) {
    (void)object.release();  // the interpreter is going: nothing left to free it with
    return;
  }
  if (PyGILState_Check() != 0) return;  // dropped here, by object's destructor
  {
    std::lock_guard<std::mutex> lock(orphans_mutex);
    orphans.push_back(object.release().ptr());
  }
  // When the queue of pending calls is full, one queued already drops this one too.
  (void)Py_AddPendingCall(&drop_orphans, nullptr);
}

bool Pending::done() {
  if (taken_->has_value()) return true;
  py::gil_scoped_release unlocked;
  return impl_->wait_for(std::chrono::milliseconds(0));
}

py::object Pending::result(std::optional<double> timeout) {
  if (timeout && !(*timeout >= 0)) throw py::value_error("expected timeout >= 0 or None");
  if (!taken_->has_value()) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      bool ready = false;
      {
        py::gil_scoped_release unlocked;
        ready = impl_->wait_for(std::chrono::milliseconds(20));
      }
      if (ready) break;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();  // Ctrl-C
      const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
      if (timeout && waited.count() >= *timeout) {
        raise(make_error(errc::deadline_exceeded, "the operation did not finish within {} s; it goes on", *timeout));
      }
    }
    *taken_ = impl_->take();
  }
  const Result<py::object>& r = **taken_;
  if (!r) raise(r.error());
  return r.value();
}

}  // namespace apiary::python

PYBIND11_MODULE(_apiary, m) {
  namespace py = pybind11;
  using apiary::python::Pending;
  m.doc() = "apiary's C++ runtime: the DHT and the decentralized averager (use the apiary package)";
  py::class_<Pending>(m, "Pending", "A C++ operation's result on its way.")
      .def("done", &Pending::done, "True once the result is there.")
      .def("result", &Pending::result, py::arg("timeout") = py::none(),
           "Waits (at most timeout seconds) and returns the value, or raises the operation's error.");
  m.def("get_dht_time", &apiary::Dht::now, "DHT time: seconds since the Unix epoch, as a float.");
  m.def(
      "peer_id_from_base58",
      [](const std::string& text) { return py::bytes(apiary::python::value_or_raise(apiary::messages::PeerId::from_string(text)).bytes()); },
      "The bytes of a PeerID given in base58.");
  m.def(
      "peer_id_to_base58",
      [](const py::bytes& raw) {
        return apiary::python::value_or_raise(apiary::messages::PeerId::from_bytes(std::string(raw))).to_string();
      },
      "The base58 text of a PeerID's bytes.");
  apiary::python::bind_dht(m);
  apiary::python::bind_averager(m);
  apiary::python::bind_tensor(m);
  apiary::python::bind_validators(m);
  apiary::python::bind_progress(m);
  apiary::python::bind_moe(m);
  apiary::python::bind_autodist(m);
}
