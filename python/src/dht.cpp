// Bindings of apiary::Dht: keys, subkeys and values come in as msgpack bytes (the
// package serializes them as hivemind does); found values go out as bytes.
#include <pybind11/stl.h>

#include <map>
#include <mutex>

#include "actors/gateway.hpp"
#include "api/dht.hpp"
#include "messages/identity/key_file.hpp"
#include "python/src/common.hpp"

namespace apiary::python {

namespace {

/// A found value for Python: None, (value bytes, expiration), or ({subkey bytes: (value
/// bytes, expiration)}, expiration) for a dictionary.
py::object found_to_python(std::optional<core::dht::FoundValue>& found) {
  if (!found) return py::none();
  if (const auto* plain = std::get_if<std::string>(&found->value)) {
    return py::make_tuple(py::bytes(*plain), found->expiration);
  }
  py::dict entries;
  for (const auto& [subkey, entry] : std::get<core::dht::FoundValue::Dictionary>(found->value)) {
    entries[py::bytes(subkey)] = py::make_tuple(py::bytes(entry.value), entry.expiration_time);
  }
  return py::make_tuple(entries, found->expiration);
}

/// A subkey from its msgpack bytes.
DhtKey subkey_of(const py::bytes& packed) { return value_or_raise(DhtKey::packed(std::string(packed))); }

/// A key from its msgpack bytes: a bytes key (msgpack bin) hashes its raw bytes, as in
/// hivemind; any other object hashes its msgpack bytes.
DhtKey key_of(const py::bytes& packed) {
  const std::string text(packed);
  const auto tag = text.empty() ? 0 : static_cast<unsigned char>(text[0]);
  std::size_t head = 0;
  std::size_t size = 0;
  if (tag == 0xc4 && text.size() >= 2) {
    head = 2;
    size = static_cast<unsigned char>(text[1]);
  } else if (tag == 0xc5 && text.size() >= 3) {
    head = 3;
    size = (std::size_t{static_cast<unsigned char>(text[1])} << 8) | static_cast<unsigned char>(text[2]);
  } else if (tag == 0xc6 && text.size() >= 5) {
    head = 5;
    for (int i = 1; i <= 4; ++i) size = (size << 8) | static_cast<unsigned char>(text[i]);
  }
  if (head != 0 && head + size == text.size()) return DhtKey::bytes(std::string_view(text).substr(head));
  return value_or_raise(DhtKey::packed(text));
}

/// The runtimes DHT nodes of this process attach to, by listen multiaddr: one transport
/// (one UCX context) for all of them, as UCX wants one per process. A runtime lives while
/// a node uses it.
std::shared_ptr<Runtime> host_for(const std::string& listen, std::size_t threads, bool insecure, bool relay_service) {
  struct Host {
    std::weak_ptr<Runtime> runtime;
    bool relay_service = false;
  };
  static std::mutex mutex;
  static std::map<std::string, Host> hosts;
  std::lock_guard<std::mutex> lock(mutex);
  Host& slot = hosts[listen];
  if (auto running = slot.runtime.lock()) {
    if (running->gateway()->insecure() != insecure) {
      throw std::invalid_argument(fmt::format(
          "a DHT of this process already listens at {} with{} encryption; nodes sharing a listen address share "
          "its transport, so pass the same insecure= to both",
          listen, insecure ? "" : "out"));
    }
    if (slot.relay_service != relay_service) {
      throw std::invalid_argument(fmt::format(
          "a DHT of this process already listens at {} {} a relay; nodes sharing a listen address share its "
          "transport, so pass the same relay_service= to both",
          listen, slot.relay_service ? "as" : "without serving as"));
    }
    return running;
  }
  RuntimeOptions options;
  options.listen = listen;
  options.threads = threads;
  options.insecure = insecure;
  options.relay_service = relay_service;
  std::shared_ptr<Runtime> runtime(value_or_raise(Runtime::start(options)));
  slot = Host{runtime, relay_service};
  return runtime;
}

}  // namespace

PyDht::PyDht(const std::string& listen, const std::vector<std::string>& initial_peers, bool client_mode,
             const std::string& identity_path, std::size_t threads, const std::vector<PyValidator>& validators,
             bool insecure, const std::string& authority_path, bool relay_service, bool auto_relay) {
  // As hivemind: a missing identity file is created with a new key.
  if (!identity_path.empty()) (void)value_or_raise(messages::load_or_create_key_file(identity_path));
  host = host_for(listen, threads, insecure, relay_service);
  DhtOptions options;
  options.system = &host->system();
  options.gateway = host->gateway();
  options.initial_peers = initial_peers;
  options.client_mode = client_mode;
  options.auto_relay = auto_relay;
  options.identity_file = identity_path;
  options.authorization.authority_file = authority_path;
  // Always a composite, so validators added later merge with these (add_validators).
  auto composite = std::make_shared<core::dht::CompositeValidator>();
  for (const auto& v : validators) composite->extend(v.clone());
  options.validator = std::move(composite);
  Result<std::unique_ptr<Dht>> started = make_error(errc::internal, "not started");
  {
    py::gil_scoped_release unlocked;
    started = Dht::start(options);
  }
  if (!started) host.reset();
  dht = value_or_raise(std::move(started));
}

void PyDht::stop() {
  py::gil_scoped_release unlocked;
  if (dht) dht->stop();
  host.reset();  // the last node of a runtime stops it
}

void bind_dht(py::module_& m) {
  py::class_<PyDht>(m, "Dht", "One DHT node, attached to the process's runtime (actor system, transport).")
      .def(py::init<const std::string&, const std::vector<std::string>&, bool, const std::string&, std::size_t,
                    const std::vector<PyValidator>&, bool, const std::string&, bool, bool>(),
           py::arg("listen"), py::arg("initial_peers"), py::arg("client_mode"), py::arg("identity_path"),
           py::arg("threads"), py::arg("validators"), py::arg("insecure") = false, py::arg("authority_path") = "",
           py::arg("relay_service") = false, py::arg("auto_relay") = false)
      .def(
          "store",
          [](PyDht& node, const py::bytes& key, const py::bytes& value, double expiration,
             const std::optional<py::bytes>& subkey) {
            Dht& dht = node.get();
            std::optional<DhtKey> sub;
            if (subkey) sub = subkey_of(*subkey);
            return Pending::of<bool>(dht.store(key_of(key), std::string(value), expiration, std::move(sub)),
                                     [](bool& ok) { return py::bool_(ok); });
          },
          py::arg("key"), py::arg("value"), py::arg("expiration"), py::arg("subkey") = py::none(),
          "Stores msgpack `value` under msgpack `key` (and `subkey`) until `expiration` (DHT seconds).")
      .def(
          "get",
          [](PyDht& node, const py::bytes& key, bool latest) {
            Dht& dht = node.get();
            return Pending::of<std::optional<core::dht::FoundValue>>(dht.get(key_of(key), latest), found_to_python);
          },
          py::arg("key"), py::arg("latest") = false, "Finds the value of msgpack `key`.")
      .def(
          "add_validators",
          [](PyDht& node, const std::vector<PyValidator>& validators) {
            Dht& dht = node.get();
            std::vector<std::unique_ptr<core::dht::RecordValidator>> fresh;
            for (const auto& v : validators) fresh.push_back(v.clone());
            py::gil_scoped_release unlocked;
            auto added = dht.add_validators(std::move(fresh));
            py::gil_scoped_acquire locked;
            (void)value_or_raise(std::move(added));
          },
          py::arg("validators"), "Adds record validators to the running node (merged where they merge).")
      .def_property_readonly("peer_id", [](PyDht& node) { return py::bytes(node.get().peer_id().bytes()); },
                             "The node's PeerID bytes.")
      .def("visible_addrs", [](PyDht& node) { return node.get().visible_addrs(); },
           "Multiaddrs (with /p2p/) other peers reach this node at.")
      .def("address", [](PyDht& node) { return node.get().address().to_string(); },
           "The listen multiaddr with /p2p/.")
      .def("stop", &PyDht::stop, "Stops the node (idempotent); the process's runtime stops with its last node.");
}

}  // namespace apiary::python
