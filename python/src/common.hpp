#pragma once
// What the binding files share: errors as Python exceptions, and Pending, a C++ future
// waited on with the GIL released (Ctrl-C interrupts the wait).
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "api/dht.hpp"
#include "api/runtime.hpp"
#include "core/dht/validation.hpp"
#include "messages/tensor/tensor.hpp"
#include "messages/result.hpp"

namespace apiary::python {

namespace py = pybind11;

/// Raises `error` as the Python exception of its kind, with its message:
/// invalid_argument, malformed, too_large -> ValueError; not_found -> LookupError;
/// unavailable, peer_down -> ConnectionError; deadline_exceeded -> TimeoutError;
/// cancelled -> concurrent.futures.CancelledError; io -> OSError; unsupported ->
/// NotImplementedError; the others -> RuntimeError.
[[noreturn]] void raise(const Error& error);

/// The value of `r`, or raise(its error).
template <class T>
T value_or_raise(Result<T> r) {
  if (!r) raise(r.error());
  return std::move(r.value());
}

/// Drops `object` from any thread without waiting for the GIL: at once when this thread
/// holds it, else on the interpreter's main thread at its next chance (a thread that
/// waited for the GIL here could wait forever on a main thread that waits for it).
void drop_later(py::object object);

/// A C++ operation's result on its way: wait for it from Python without holding the GIL.
class Pending {
 public:
  /// `future`'s value, converted to Python by `convert` (called with the GIL held).
  template <class T>
  static Pending of(std::future<Result<T>> future, std::function<py::object(T&)> convert) {
    struct Typed final : Base {
      std::future<Result<T>> future;
      std::function<py::object(T&)> convert;
      bool wait_for(std::chrono::milliseconds d) override {
        return future.wait_for(d) == std::future_status::ready;
      }
      Result<py::object> take() override {
        Result<T> r = future.get();
        if (!r) return r.error();
        return convert(r.value());
      }
    };
    auto typed = std::make_shared<Typed>();
    typed->future = std::move(future);
    typed->convert = std::move(convert);
    Pending out;
    out.impl_ = std::move(typed);
    return out;
  }

  /// True once the result is there.
  [[nodiscard]] bool done();
  /// Waits (at most `timeout` seconds when given) and returns the value or raises its
  /// error; TimeoutError when it is not there in time (the operation goes on).
  py::object result(std::optional<double> timeout);

 private:
  struct Base {
    virtual ~Base() = default;
    virtual bool wait_for(std::chrono::milliseconds d) = 0;
    virtual Result<py::object> take() = 0;
  };
  std::shared_ptr<Base> impl_;
  std::shared_ptr<std::optional<Result<py::object>>> taken_ = std::make_shared<std::optional<Result<py::object>>>();
};

/// A record validator for Python: a prototype the DHT node copies (validators merge by
/// kind when a node composes them), also callable directly.
struct PyValidator {
  std::shared_ptr<const core::dht::RecordValidator> proto;
  std::function<std::unique_ptr<core::dht::RecordValidator>()> clone;
};

/// A Python DHT: a node attached to the process's runtime for its listen address (kept
/// alive by the nodes that use it).
struct PyDht {
  PyDht(const std::string& listen, const std::vector<std::string>& initial_peers, bool client_mode,
        const std::string& identity_path, std::size_t threads, const std::vector<PyValidator>& validators,
        bool insecure, const std::string& authority_path, bool relay_service = false, bool auto_relay = false);
  ~PyDht() { stop(); }
  PyDht(const PyDht&) = delete;
  PyDht& operator=(const PyDht&) = delete;
  /// The node; raises RuntimeError once stopped.
  Dht& get() {
    if (!dht || !host) throw std::runtime_error("expected a running DHT node, but it was stopped");
    return *dht;
  }
  void stop();

  std::shared_ptr<Runtime> host;
  std::unique_ptr<Dht> dht;
};

/// (uint8 array over the values, dtype name, shape) of a decoded tensor (no copy: the
/// array holds the tensor's buffer).
py::tuple tensor_to_python(messages::Tensor& tensor);

void bind_dht(py::module_& m);
void bind_averager(py::module_& m);
void bind_tensor(py::module_& m);
void bind_validators(py::module_& m);
void bind_progress(py::module_& m);
void bind_moe(py::module_& m);
void bind_autodist(py::module_& m);

}  // namespace apiary::python
