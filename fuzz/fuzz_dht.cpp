// libFuzzer target: what a DHT node parses from the network, by the input's first byte:
// msgpack values (one object, tuples, dictionary values; each decoded tuple and
// dictionary must encode and decode again to the same entries), the DHTProtocol servicer's
// requests (rpc_ping / rpc_store / rpc_find bodies), a node role driven through the role
// contract (requests on its handles, fuzzed answers to the pings and finds of its
// bootstrap, gets and stores), records checked by the schema and ownership validators
// (base64 and OpenSSH RSA keys included), and the RPC layer's authorization of calls
// (core/rpc/auth.hpp: requests and answers checked, access tokens, ISO times).
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dht/msgpack_value.hpp"
#include "core/dht/node_role.hpp"
#include "core/dht/ownership_validator.hpp"
#include "core/dht/protocol.hpp"
#include "core/dht/schema_validator.hpp"
#include "core/optim/progress.hpp"
#include "core/rpc/auth.hpp"
#include "fuzz/fuzz_input.hpp"
#include "fuzz/role_driver.hpp"
#include "messages/identity/rsa.hpp"
#include "fuzz/quiet_protobuf.hpp"
#include "messages/identity/peer_id.hpp"

namespace dht = apiary::core::dht;
namespace rpc = apiary::core::rpc;
using apiary::fuzz::FuzzInput;

namespace {

constexpr double k_dht_now = 1764517126.5;  // DHT seconds the servicer and validators run at

const char* const k_handles[] = {dht::k_ping_handle, dht::k_store_handle, dht::k_find_handle};

/// An Ed25519 key made from one repeated seed byte (deterministic), made once per byte: making
/// one took about a fifth of an execution.
const apiary::messages::Ed25519PrivateKey& key_of(char fill) {
  static std::array<std::optional<apiary::messages::Ed25519PrivateKey>, 256> keys;
  auto& key = keys[static_cast<unsigned char>(fill)];
  if (!key) {
    auto made = apiary::messages::Ed25519PrivateKey::from_seed(std::string(32, fill));
    if (!made) __builtin_trap();
    key = std::move(*made);
  }
  return *key;
}

/// A dictionary's entries, every one (none dropped as expired).
std::vector<dht::DictionaryValue::Item> entries(dht::DictionaryValue& d) {
  return d.items(-std::numeric_limits<double>::infinity());
}

void fuzz_msgpack(FuzzInput& in) {
  const std::string_view packed = in.rest();
  if (auto o = dht::unpack_one(packed); o.ok()) (void)dht::describe_packed(packed);
  (void)dht::check_packed(packed);
  if (auto elements = dht::unpack_tuple(packed); elements.ok()) {
    auto again = dht::unpack_tuple(dht::pack_tuple(*elements));
    if (!again.ok() || *again != *elements) __builtin_trap();
  }
  if (auto d = dht::unpack_dictionary(packed); d.ok()) {
    auto again = dht::unpack_dictionary(dht::pack_dictionary(-std::numeric_limits<double>::infinity(), *d));
    if (!again.ok() || entries(*again) != entries(*d)) __builtin_trap();
  }
}

void fuzz_servicer(FuzzInput& in) {
  dht::ProtocolConfig config;
  config.bucket_size = 4;
  config.cache_size = 8;
  dht::Protocol protocol(dht::NodeId::of_str_key("self"), apiary::fuzz::fuzz_peers()[0], config);
  // Several requests in a row, so that stores are found again and the table fills.
  for (int i = 0; i < 8 && !in.empty(); ++i) {
    const char* handle = k_handles[in.pick(3)];
    const auto& from = apiary::fuzz::fuzz_peers()[in.pick(3)];
    (void)protocol.handle(k_dht_now + i, handle, from, in.bytes());
    (void)protocol.take_routing_events();
  }
}

/// The records' validators: two schemas (one with a prefix: the progress records) and
/// owner signatures.
std::shared_ptr<dht::CompositeValidator> make_validator() {
  using dht::schema_type;
  using dht::SchemaField;
  std::vector<std::unique_ptr<dht::RecordValidator>> validators;
  validators.push_back(std::make_unique<dht::SchemaValidator>(std::vector<SchemaField>{
      SchemaField::regular("name", schema_type::bytes), SchemaField::regular("count", schema_type::integer),
      SchemaField::dictionary("n_batches", schema_type::bytes, schema_type::nonnegative_int),
      SchemaField::dictionary("signed", schema_type::bytes_with_owner, schema_type::float64)}));
  validators.push_back(std::make_unique<dht::SchemaValidator>(
      std::vector<SchemaField>{apiary::core::optim::progress_schema_field()}, dht::SchemaOptions{"run", false}));
  validators.push_back(std::make_unique<dht::OwnershipValidator>(key_of('\x03')));
  return std::make_shared<dht::CompositeValidator>(std::move(validators));
}

/// The key ids the validators know, then fuzzed ones.
std::string record_key(FuzzInput& in) {
  switch (in.pick(6)) {
    case 0: return dht::SchemaValidator::field_key(std::nullopt, "name");
    case 1: return dht::SchemaValidator::field_key(std::nullopt, "count");
    case 2: return dht::SchemaValidator::field_key(std::nullopt, "n_batches");
    case 3: return dht::SchemaValidator::field_key(std::nullopt, "signed");
    case 4: return dht::SchemaValidator::field_key(std::string("run"), "progress");
    default: return in.bytes();
  }
}

void fuzz_validators(FuzzInput& in) {
  const auto validator = make_validator();
  dht::DhtRecord record;
  record.key = record_key(in);
  record.subkey = in.bytes();
  record.expiration = in.real();
  record.value = std::string(in.rest());
  (void)validator->validate(record);
  (void)validator->strip_value(record);
  (void)validator->sign_value(record);
  if (auto decoded = dht::base64_decode(record.value); decoded.ok()) {
    if (dht::base64_encode(*decoded) != record.value) __builtin_trap();  // canonical base64 only
  }
  if (auto key = apiary::messages::RsaPublicKey::from_openssh(record.value); key.ok()) {
    if (!apiary::messages::RsaPublicKey::from_openssh(key->openssh()).ok()) __builtin_trap();
    (void)key->verify_pss(record.subkey, record.key);
  }
}

/// An authorizer of a member of authority '\x01', its nonces counted.
std::shared_ptr<rpc::TokenAuthorizer> make_authorizer(char tag) {
  auto holder = key_of(tag);
  auto issuer = rpc::AuthorityTokenIssuer::create(key_of('\x01'), std::string("user-") + tag, holder.public_key());
  if (!issuer) __builtin_trap();
  auto counter = std::make_shared<std::uint64_t>(0);
  return std::make_shared<rpc::TokenAuthorizer>(
      holder, std::make_shared<rpc::AuthorityTokenIssuer>(std::move(*issuer)),
      [tag, counter] { return std::string(1, tag) + std::to_string(1000000 + ++*counter); });
}

void fuzz_auth(FuzzInput& in) {
  const std::string handle = k_handles[in.pick(3)];
  const double now = k_dht_now + static_cast<double>(in.number(1));
  const std::string caller = apiary::messages::PeerId::from_public_key(key_of('c').public_key()).bytes();
  const std::string service_id = apiary::messages::PeerId::from_public_key(key_of('s').public_key()).bytes();
  const rpc::CallParties call{handle, caller, service_id};
  switch (in.pick(4)) {
    case 0: {  // a request's authorization, which a service checks before serving it
      auto service = make_authorizer('s');
      apiary::pb::RequestAuthInfo auth;
      const std::string_view bytes = in.rest();
      if (!auth.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) break;
      (void)service->check_request(now, call, auth);
      break;
    }
    case 1: {  // an answer's authorization, which a caller checks against its request's
      auto client = make_authorizer('c');
      auto request = client->sign_request(now, call);
      if (!request) __builtin_trap();
      apiary::pb::ResponseAuthInfo auth;
      const std::string_view bytes = in.rest();
      if (!auth.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) break;
      (void)client->check_response(now, call, *request, auth);
      break;
    }
    case 2: {
      apiary::pb::AccessToken token;
      const std::string_view bytes = in.rest();
      if (!token.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) break;
      (void)rpc::verify_access_token(key_of('\x01').public_key(), now, token);
      break;
    }
    default: {
      const std::string_view text = in.rest();
      auto t = rpc::parse_iso_time(text);
      if (!t) break;
      auto formatted = rpc::format_iso_time(*t);
      if (!formatted) break;  // a time parse_iso_time takes that format_iso_time does not write
      auto again = rpc::parse_iso_time(*formatted);
      if (!again || std::fabs(*again - *t) > 1e-4) __builtin_trap();
      break;
    }
  }
}

/// A DHT node operation chosen by the input: bootstrap from a peer, a get, a store, a
/// find_nearest; keys from a small set so that answers can match them.
std::optional<apiary::core::LocalCall> node_call(FuzzInput& in, apiary::core::OpId op) {
  const dht::NodeId key = dht::NodeId::of_str_key(std::string(1, static_cast<char>('a' + in.pick(4))));
  dht::NodeOp run;
  switch (in.pick(4)) {
    case 0:
      run = [](dht::Node& node, apiary::core::TimePoint now, apiary::core::OpId id) {
        return node.start(now, id, {apiary::fuzz::fuzz_peers()[2], apiary::fuzz::fuzz_peers()[1]});
      };
      break;
    case 1: {
      const bool latest = in.flag();
      run = [key, latest](dht::Node& node, apiary::core::TimePoint now, apiary::core::OpId id) {
        return node.get(now, id, {key}, latest);
      };
      break;
    }
    case 2: {
      dht::StoreItem item{key, in.flag() ? dht::k_subkey_regular : dht::pack_bin(in.bytes()), in.bytes(),
                          k_dht_now + 60};
      run = [item](dht::Node& node, apiary::core::TimePoint now, apiary::core::OpId id) {
        return node.store(now, id, {item});
      };
      break;
    }
    default:
      run = [key](dht::Node& node, apiary::core::TimePoint now, apiary::core::OpId id) {
        return node.find_nearest(now, id, {key}, 3);
      };
      break;
  }
  return apiary::core::LocalCall{op, "", dht::k_run_method, apiary::core::Value::of(std::move(run))};
}

void fuzz_node(FuzzInput& in) {
  dht::NodeConfig config;
  config.protocol.bucket_size = 4;
  config.protocol.num_replicas = 2;
  config.num_workers = 2;
  config.ensure_bootstrap_success = false;
  auto self_key = key_of('\x02');
  const auto self_id = apiary::messages::PeerId::from_public_key(self_key.public_key());
  auto self_addr = apiary::messages::PeerAddress::parse("/ip4/10.0.0.1/tcp/4100");
  if (!self_addr) __builtin_trap();
  // The node's clock starts at DHT time k_dht_now - 1000 s (the driver's now is 1000 s).
  auto node = std::make_unique<dht::Node>(dht::NodeId::of_str_key("self"), self_addr->with_peer(self_id), config,
                                          make_validator(), k_dht_now - 1000);
  dht::NodeRole role(std::move(node), dht::NodeRoleConfig{self_id, false, true});
  apiary::fuzz::RoleDriver driver(role, in);
  driver.make_call = node_call;
  driver.run();
}

}  // namespace


extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  switch (in.pick(5)) {
    case 0: fuzz_msgpack(in); break;
    case 1: fuzz_servicer(in); break;
    case 2: fuzz_validators(in); break;
    case 3: fuzz_auth(in); break;
    default: fuzz_node(in); break;
  }
  return 0;
}
