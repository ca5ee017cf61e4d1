// Writes the seed corpora of fuzz_dht, fuzz_services and fuzz_files (fuzz/corpus/<target>/):
// valid inputs of each kind the targets read, made with apiary's own encoders, in the
// format of fuzz/fuzz_input.hpp and fuzz/role_driver.hpp. Built in the main build
// (tests/fuzz/); run once from the repository root: build/bin/fuzz_make_seeds fuzz/corpus
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "averaging.pb.h"
#include "core/averaging/allreduce_wire.hpp"
#include "core/averaging/averager_role.hpp"
#include "core/averaging/state_sharing.hpp"
#include "core/collective/exchange_wire.hpp"
#include "core/dht/msgpack_value.hpp"
#include "core/dht/ownership_validator.hpp"
#include "core/dht/schema_validator.hpp"
#include "core/optim/progress.hpp"
#include "core/rpc/auth.hpp"
#include "core/ps/checkpoint.hpp"
#include "core/ps/wire.hpp"
#include "core/strategy/builders.hpp"
#include "core/strategy/graph_item.hpp"
#include "core/strategy/resource_spec.hpp"
#include "core/strategy/strategy_io.hpp"
#include "dht.pb.h"
#include "fuzz/fuzz_input.hpp"
#include "fuzz/role_driver.hpp"
#include "fuzz/service_roles.hpp"
#include "fuzz/noise_fixture.hpp"
#include "messages/identity/key_file.hpp"
#include "messages/identity/peer_id.hpp"
#include "messages/identity/rsa.hpp"
#include "ping.pb.h"

namespace dht = apiary::core::dht;
namespace rpc = apiary::core::rpc;
namespace av = apiary::core::averaging;
namespace cps = apiary::core::ps;
namespace cs = apiary::core::strategy;
namespace pb = apiary::pb;
using apiary::fuzz::FuzzOutput;

namespace {

std::filesystem::path g_root;
int g_failures = 0;  ///< seeds that could not be made (a handle not found, a key file not written)

void write(const std::string& target, const std::string& name, const std::string& bytes) {
  const auto folder = g_root / target;
  std::filesystem::create_directories(folder);
  std::ofstream(folder / name, std::ios::binary) << bytes;
}

/// The value of `r`; exits naming `what` when there is none.
template <class T>
T must(apiary::Result<T> r, const char* what) {
  if (!r) {
    std::fprintf(stderr, "make_seeds: %s: %s\n", what, r.error().what().c_str());
    std::exit(1);
  }
  return std::move(*r);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// The index of `handle` among `role`'s handles (0 when it has none such).
std::size_t handle_index(const apiary::core::Role& role, const std::string& handle) {
  const auto handles = role.handles();
  for (std::size_t i = 0; i < handles.size(); ++i) {
    if (handles[i] == handle) return i;
  }
  std::fprintf(stderr, "make_seeds: no handle %s\n", handle.c_str());
  ++g_failures;
  return 0;
}

apiary::messages::Ed25519PrivateKey key_of(char fill) {
  return must(apiary::messages::Ed25519PrivateKey::from_seed(std::string(32, fill)), "key");
}

/// As fuzz_dht.cpp's make_authorizer: a member of authority '\x01', nonces counted from 1.
std::shared_ptr<rpc::TokenAuthorizer> make_authorizer(char tag) {
  auto holder = key_of(tag);
  auto issuer = must(rpc::AuthorityTokenIssuer::create(key_of('\x01'), std::string("user-") + tag, holder.public_key()),
                     "issuer");
  auto counter = std::make_shared<std::uint64_t>(0);
  return std::make_shared<rpc::TokenAuthorizer>(
      holder, std::make_shared<rpc::AuthorityTokenIssuer>(std::move(issuer)),
      [tag, counter] { return std::string(1, tag) + std::to_string(1000000 + ++*counter); });
}

constexpr double k_dht_now = 1764517126.5;

pb::NodeInfo node_info(const std::string& name) {
  pb::NodeInfo info;
  info.set_node_id(dht::NodeId::of_str_key(name).to_bytes());
  return info;
}

std::string ping_request() {
  pb::PingRequest r;
  *r.mutable_peer() = node_info("peer");
  r.set_validate(true);
  return r.SerializeAsString();
}

std::string store_request() {
  pb::StoreRequest r;
  *r.mutable_peer() = node_info("peer");
  r.add_keys(dht::NodeId::of_str_key("a").to_bytes());
  r.add_subkeys(dht::k_subkey_regular);
  r.add_values(dht::pack_str("value"));
  r.add_expiration_time(k_dht_now + 60);
  r.add_in_cache(false);
  r.add_keys(dht::NodeId::of_str_key("b").to_bytes());
  r.add_subkeys(dht::pack_bin("sub"));
  r.add_values(dht::pack_bin("entry"));
  r.add_expiration_time(k_dht_now + 60);
  r.add_in_cache(true);
  return r.SerializeAsString();
}

std::string find_request() {
  pb::FindRequest r;
  *r.mutable_peer() = node_info("peer");
  r.add_keys(dht::NodeId::of_str_key("a").to_bytes());
  r.add_keys(dht::NodeId::of_str_key("b").to_bytes());
  return r.SerializeAsString();
}

std::string ping_response() {
  pb::PingResponse r;
  *r.mutable_peer() = node_info("peer");
  r.set_dht_time(k_dht_now);
  return r.SerializeAsString();
}

std::string find_response() {
  pb::FindResponse r;
  *r.mutable_peer() = node_info("peer");
  auto* result = r.add_results();
  result->set_type(pb::FOUND_REGULAR);
  result->set_value(dht::pack_str("value"));
  result->set_expiration_time(k_dht_now + 60);
  result->add_nearest_node_ids(dht::NodeId::of_str_key("other").to_bytes());
  result->add_nearest_peer_ids(apiary::fuzz::fuzz_peers()[0].multiaddr());
  return r.SerializeAsString();
}

/// fuzz_noise: the fixed handshake's messages, as each side reads them, with sealed
/// frames after (valid ones at the session's first nonces, and one forged).
void noise_seeds() {
  const auto t = apiary::fuzz::fixed_transcript();
  auto a = apiary::fuzz::fixed_side(true);
  auto b = apiary::fuzz::fixed_side(false);
  (void)must(a.write_message(), "noise m1");
  (void)b.read_message(t.m1);
  (void)must(b.write_message(), "noise m2");
  (void)a.read_message(t.m2);
  (void)must(a.write_message(), "noise m3");
  (void)b.read_message(t.m3);
  auto sa = must(a.finish(), "noise session a");
  auto sb = must(b.finish(), "noise session b");
  const std::string to_b0 = must(sa.send.encrypt_with_ad({}, "a frame"), "seal");
  const std::string to_b1 = must(sa.send.encrypt_with_ad({}, std::string(300, 'x')), "seal");
  const std::string to_a0 = must(sb.send.encrypt_with_ad({}, "an answer"), "seal");
  std::string forged = to_b0;
  forged[0] ^= 1;
  write("fuzz_noise", "responder", FuzzOutput().byte(0).bytes(t.m1).bytes(t.m3).bytes(to_b0).bytes(to_b1).str());
  write("fuzz_noise", "responder_forged", FuzzOutput().byte(0).bytes(t.m1).bytes(t.m3).bytes(forged).bytes(to_b0).str());
  write("fuzz_noise", "initiator", FuzzOutput().byte(1).bytes(t.m2).bytes(to_a0).str());
  write("fuzz_noise", "message1_only", FuzzOutput().byte(0).bytes(t.m1).str());
}

/// fuzz_relay's scripts: one step each, as the target reads them.
struct RelayScript {
  FuzzOutput out;
  RelayScript& reserve(int peer, int conn) {
    out.byte(0).byte(peer).byte(conn);
    return *this;
  }
  RelayScript& open(int conn, int from, int peer, int to) {
    out.byte(1).byte(conn).number(from, 1).byte(peer).number(to, 1);
    return *this;
  }
  /// A CIRCUIT_DATA of `bytes` on the model's open end number `end` (in end order).
  RelayScript& forward(int end, std::uint64_t bytes) {
    out.byte(2).flag(true).byte(end).number(bytes, 2);
    return *this;
  }
  RelayScript& close(int end) {
    out.byte(3).flag(true).byte(end);
    return *this;
  }
  RelayScript& drop(int conn) {
    out.byte(4).byte(conn);
    return *this;
  }
  RelayScript& wait(std::uint64_t ms) {
    out.byte(5).number(ms, 2);
    return *this;
  }
};

void relay_seeds() {
  write("fuzz_relay", "relayed", RelayScript().reserve(0, 0).open(1, 1, 0, 1).forward(0, 500).forward(1, 500).close(0)
                                     .out.str());
  write("fuzz_relay", "limits",
        RelayScript().reserve(0, 0).open(1, 1, 0, 1).open(2, 1, 0, 2).open(2, 2, 0, 3).open(1, 2, 0, 4)
            .forward(0, 30000).forward(0, 10).out.str());
  write("fuzz_relay", "expiry",
        RelayScript().reserve(1, 2).open(0, 7, 1, 9).wait(2000).reserve(1, 1).open(0, 8, 1, 9).wait(2000)
            .out.str());
  write("fuzz_relay", "lost",
        RelayScript().reserve(0, 0).reserve(1, 1).reserve(2, 2).reserve(3, 0).open(2, 3, 0, 3).open(2, 4, 1, 4)
            .drop(2).forward(0, 1).out.str());
}

void dht_seeds() {
  const std::string t = "fuzz_dht";
  // msgpack (0)
  write(t, "msgpack_str", FuzzOutput().byte(0).raw(dht::pack_str("expert.5")).str());
  write(t, "msgpack_tuple",
        FuzzOutput().byte(0).raw(dht::pack_tuple({dht::pack_str("expert.5"), dht::pack_float(1.5)})).str());
  dht::DictionaryValue dictionary;
  dictionary.store(k_dht_now, dht::pack_bin("peer-a"), dht::pack_float(2.0), k_dht_now + 30);
  dictionary.store(k_dht_now, dht::pack_str("peer-b"), "\xc3", k_dht_now + 40);
  write(t, "msgpack_dictionary", FuzzOutput().byte(0).raw(dht::pack_dictionary(k_dht_now, dictionary)).str());
  // the servicer (1): handle, peer, body
  FuzzOutput servicer;
  servicer.byte(1);
  servicer.byte(0).byte(0).bytes(ping_request());
  servicer.byte(1).byte(1).bytes(store_request());
  servicer.byte(2).byte(2).bytes(find_request());
  write(t, "servicer", servicer.str());
  // validators (2): key choice, subkey, expiration, value
  write(t, "record_regular",
        FuzzOutput().byte(2).byte(0).bytes(dht::k_subkey_regular).real(k_dht_now + 10).raw(dht::pack_bin("x")).str());
  write(t, "record_dictionary",
        FuzzOutput().byte(2).byte(2).bytes(dht::pack_bin("peer")).real(k_dht_now + 10).raw("\x05").str());
  {
    const dht::OwnershipValidator owner(key_of('\x04'));
    dht::DhtRecord record;
    record.key = dht::SchemaValidator::field_key(std::nullopt, "signed");
    record.subkey = dht::pack_bin("peer" + owner.own_marker());
    record.value = dht::pack_float(3.5);
    record.expiration = k_dht_now + 10;
    const std::string signed_value = must(owner.sign_value(record), "sign");
    write(t, "record_signed",
          FuzzOutput().byte(2).byte(3).bytes(record.subkey).real(record.expiration).raw(signed_value).str());
    write(t, "record_base64", FuzzOutput().byte(2).byte(5).bytes("k").bytes("").real(0).raw(
                                  dht::base64_encode("some bytes")).str());
  }
  {
    apiary::core::optim::LocalProgress progress{"peer", 3, 17, 2.5, k_dht_now, false};
    write(t, "record_progress", FuzzOutput().byte(2).byte(4).bytes(dht::pack_bin("[owner:x]")).real(k_dht_now + 10)
                                    .raw(apiary::core::optim::pack_progress(progress)).str());
  }
  // auth (3): handle, now, kind, rest (fuzz_dht.cpp's fuzz_auth: caller 'c', service 's')
  {
    const std::string caller = apiary::messages::PeerId::from_public_key(key_of('c').public_key()).bytes();
    const std::string service_id = apiary::messages::PeerId::from_public_key(key_of('s').public_key()).bytes();
    const rpc::CallParties call{dht::k_ping_handle, caller, service_id};
    auto client = make_authorizer('c');
    const auto request = must(client->sign_request(k_dht_now, call), "sign request");
    write(t, "auth_request", FuzzOutput().byte(3).byte(0).byte(0).byte(0).raw(request.SerializeAsString()).str());
    auto client_again = make_authorizer('c');  // the target's own client: the same request
    const auto own_request = must(client_again->sign_request(k_dht_now, call), "sign request again");
    auto service = make_authorizer('s');
    const auto response = must(service->sign_response(k_dht_now, call, own_request), "sign response");
    write(t, "auth_response", FuzzOutput().byte(3).byte(0).byte(0).byte(1).raw(response.SerializeAsString()).str());
    const auto token = must(rpc::issue_access_token(key_of('\x01'), "user", key_of('u').public_key(), k_dht_now + 600),
                            "token");
    write(t, "auth_token", FuzzOutput().byte(3).byte(0).byte(0).byte(2).raw(token.SerializeAsString()).str());
    write(t, "auth_time", FuzzOutput().byte(3).byte(0).byte(0).byte(3).raw("2026-11-30T15:38:46.123456").str());
  }
  // a node (4): requests on its plain handles (the last three), then a
  // bootstrap answered (the pings, then the finds), a store and a get.
  {
    FuzzOutput node;
    node.byte(4);
    apiary::fuzz::write_request(node, 3, 0, ping_request());
    apiary::fuzz::write_request(node, 4, 1, store_request());
    apiary::fuzz::write_request(node, 5, 2, find_request());
    apiary::fuzz::write_local_call(node).byte(0).byte(0);  // key 'a', bootstrap
    apiary::fuzz::write_response(node, 0, ping_response());
    apiary::fuzz::write_response(node, 0, ping_response());
    apiary::fuzz::write_response(node, 0, find_response());
    apiary::fuzz::write_response(node, 0, find_response());
    apiary::fuzz::write_local_call(node).byte(0).byte(2).byte(1).bytes(dht::pack_str("v"));  // store
    apiary::fuzz::write_response(node, 0, find_response());
    pb::StoreResponse stored;
    stored.add_store_ok(true);
    apiary::fuzz::write_response(node, 0, stored.SerializeAsString());
    apiary::fuzz::write_local_call(node).byte(1).byte(1).byte(1);  // latest get of 'b'
    apiary::fuzz::write_response(node, 0, find_response());
    apiary::fuzz::write_timer(node, 0);
    write(t, "node", node.str());
  }
}

/// The kind byte of a service seed.
std::size_t kind(apiary::fuzz::Service s) { return static_cast<std::size_t>(s); }

std::string dense_push(const std::string& shard, std::int32_t replica, std::int64_t step, std::vector<float> values) {
  std::string out(cps::dense_push_size(shard, replica, step, 1.0, values.size()), '\0');
  cps::encode_dense_push(out.data(), shard, replica, step, 1.0, values.data(), values.size());
  return out;
}

std::string pull_request(const std::string& shard, std::int32_t replica, std::int64_t step) {
  pb::PsPullRequest m;
  m.set_shard(shard);
  m.set_replica(replica);
  m.set_step(step);
  return m.SerializeAsString();
}

std::string push_response(const std::string& shard) {
  return cps::to_pb(shard, cps::PushAck{0, 0}).SerializeAsString();
}

/// Writes a dht_answer (service_roles.hpp) of a dictionary of `entries` (peer index or
/// 255 with a subkey; value), each expiring 60 s ahead.
void write_dictionary_answer(FuzzOutput& out, const std::vector<std::pair<std::size_t, std::string>>& entries,
                             const std::string& subkey = "") {
  out.byte(1).byte(0).byte(2).byte(entries.size());
  for (const auto& [peer, value] : entries) {
    if (peer < apiary::fuzz::fuzz_peers().size()) {
      out.byte(peer);
    } else {
      out.byte(apiary::fuzz::fuzz_peers().size()).bytes(subkey);
    }
    out.bytes(value).number(60, 1);
  }
}

void service_seeds() {
  using apiary::fuzz::Service;
  namespace fz = apiary::fuzz;
  const std::string t = "fuzz_services";
  {  // ping: a probe; a round, its acks
    pb::PingProbe probe;
    probe.set_seq(1);
    probe.set_sender_addr(fz::fuzz_peers()[0].multiaddr());
    probe.add_known_peers(fz::fuzz_peers()[1].multiaddr());
    pb::PingAck ack;
    ack.set_seq(1);
    ack.set_responder_addr(fz::fuzz_peers()[0].multiaddr());
    ack.add_known_peers(fz::fuzz_peers()[2].multiaddr());
    FuzzOutput out;
    out.byte(kind(Service::ping));
    fz::write_request(out, 0, 0, probe.SerializeAsString());
    fz::write_timer(out, 0);
    fz::write_response(out, 0, ack.SerializeAsString());
    ack.set_seq(2);
    fz::write_response(out, 0, ack.SerializeAsString());
    write(t, "ping", out.str());
  }
  {  // PS server: a session, pushes (dense direct, sparse), pulls, an optimizer state
    auto role = fz::make_service(Service::ps_server);
    const std::size_t push = handle_index(*role.role, cps::k_ps_push_handle);
    const std::size_t pull = handle_index(*role.role, cps::k_ps_pull_handle);
    const std::size_t join = handle_index(*role.role, cps::k_ps_join_handle);
    const std::size_t state = handle_index(*role.role, cps::k_ps_optimizer_state_handle);
    pb::PsJoinRequest session;
    session.set_replica(1);
    FuzzOutput out;
    out.byte(kind(Service::ps_server));
    fz::write_request(out, join, 0, session.SerializeAsString());
    fz::write_request(out, pull, 1, pull_request("w", 0, 0));
    fz::write_request(out, push, 1, dense_push("w", 0, 0, {1, 2, 3, 4}));
    fz::write_request(out, push, 0, dense_push("w", 1, 0, {4, 3, 2, 1}));
    fz::write_request(out, pull, 1, pull_request("w", 0, 1));
    cps::Push sparse;
    sparse.gradient = cps::SparseGradient{{2, 0}, {1, 1, 2, 2}};
    fz::write_request(out, push, 1, cps::to_pb("emb", sparse).SerializeAsString());
    fz::write_request(out, push, 1, dense_push("m", 0, 0, {1, 1, 1}));
    fz::write_request(out, state, 1, pull_request("m", 0, 0));
    fz::write_request_message(out, 0, true, "");
    write(t, "ps_server", out.str());
  }
  {  // PS proxy: a pull, refreshed from the PS
    FuzzOutput out;
    out.byte(kind(Service::ps_proxy));
    fz::write_request(out, 0, 0, pull_request("w", 0, 0));
    fz::write_request(out, 0, 1, pull_request("w", 1, 0));
    const std::vector<float> values{1, 2, 3, 4};
    fz::write_response(out, 0, cps::encode_pull_response("w", 0, 0, 1, values.data(), values.size()));
    write(t, "ps_proxy", out.str());
  }
  {  // PS client: a pull (w through the proxy, emb and m from the PS), then a push
    FuzzOutput out;
    out.byte(kind(Service::ps_client));
    fz::write_local_call(out).byte(0);
    const std::vector<float> w{1, 2, 3, 4}, emb{1, 2, 3, 4, 5, 6, 7, 8}, m{1, 2, 3};
    fz::write_response(out, 1, cps::encode_pull_response("w", 0, 0, 1, w.data(), w.size()));
    fz::write_response(out, 1, cps::encode_pull_response("emb", 0, 0, 1, emb.data(), emb.size()));
    fz::write_response(out, 1, cps::encode_pull_response("m", 0, 0, 1, m.data(), m.size()));
    fz::write_local_call(out).byte(1).raw(std::string(4 + 3, '\x08')).byte(1).raw("\x08\x08").byte(0);
    for (const char* shard : {"w", "emb", "m"}) fz::write_response(out, 1, push_response(shard));
    fz::write_local_call(out).byte(2);
    pb::PsOptimizerState none;
    for (int i = 0; i < 3; ++i) fz::write_response(out, 1, none.SerializeAsString());
    write(t, "ps_client", out.str());
  }
  {  // collective: a barrier asked and met; a gather and a mean from the other members
    auto role = fz::make_service(Service::collective);
    const auto config = fz::group_config();
    const std::size_t barrier = handle_index(*role.role, apiary::core::collective::group_barrier_handle(config.job));
    const std::size_t exchange = handle_index(*role.role, apiary::core::collective::group_exchange_handle(config.job));
    FuzzOutput out;
    out.byte(kind(Service::collective));
    fz::write_request(out, barrier, 0, "0 1");
    fz::write_local_call(out).byte(0).byte(0);
    fz::write_response(out, 0, "");
    fz::write_response(out, 0, "");
    apiary::core::collective::ExchangeFrame frame;
    frame.op = 0;
    frame.rank = 1;
    frame.kind = apiary::core::collective::ExchangeKind::gather;
    frame.payload = "payload-1";
    fz::write_request(out, exchange, 0, apiary::core::collective::encode_frame(frame));
    fz::write_local_call(out).byte(2).bytes("payload-0");
    frame.rank = 0;
    fz::write_response(out, 0, apiary::core::collective::encode_frame(frame));
    write(t, "collective_gather", out.str());

    auto layout = must(apiary::core::collective::make_span_layout({3, 2}, {}), "layout");
    FuzzOutput mean;
    mean.byte(kind(Service::collective));
    frame.op = 0;
    frame.rank = 1;
    frame.kind = apiary::core::collective::ExchangeKind::mean;
    frame.weight = 1.0;
    frame.fingerprint = apiary::core::collective::fingerprint_of(frame.kind, layout);
    const std::vector<float> values{1, 2, 3, 4, 5};
    frame.payload.clear();
    apiary::core::collective::encode_span(layout, 0, 5, values.data(), frame.payload);
    fz::write_request(mean, exchange, 0, apiary::core::collective::encode_frame(frame));
    fz::write_local_call(mean).byte(1).raw(std::string(5, '\x08')).byte(0);
    fz::write_response(mean, 0, apiary::core::collective::encode_frame(frame));
    fz::write_response(mean, 0, apiary::core::collective::encode_frame(frame));
    write(t, "collective_mean", mean.str());
  }
  {  // averager: a step; the DHT's answers; a follower's join; a part
    auto role = fz::make_service(Service::averager);
    const std::size_t join = handle_index(*role.role, av::k_join_handle);
    const std::size_t part = handle_index(*role.role, av::k_aggregate_part_handle);
    FuzzOutput out;  // the steps, after the kind byte
    fz::write_local_call(out).byte(0).bytes(av::wrap_gather(std::nullopt, av::AveragingMode::node, "g"))
        .byte(1).byte(0).raw(std::string(6, '\x08')).byte(0).byte(0);
    fz::write_local_reply(out, 0);
    write_dictionary_answer(out, {{0, "\xc3"}, {1, "\xc3"}});
    fz::write_local_reply(out, 0);
    write_dictionary_answer(out, {{0, "\xc3"}});
    pb::JoinRequest request;
    request.set_schema_hash("f32x6");
    request.set_expiration(k_dht_now + 10);
    request.set_gather(av::wrap_gather(1.0, av::AveragingMode::node, "h"));
    request.set_group_key("run.0b");
    fz::write_request(out, join, 0, request.SerializeAsString());
    pb::MessageFromLeader accepted;
    accepted.set_code(pb::ACCEPTED);
    fz::write_stream_message(out, 0, accepted.SerializeAsString());
    const std::vector<float> values{1, 2};
    fz::write_request(out, part, 0,
                      must(av::encode_part_message(pb::PART_FOR_AVERAGING, "group", fz::fuzz_peers()[0].multiaddr(),
                                                   values.data(), values.size(), pb::NONE, 1.0),
                           "part"));
    fz::write_advance(out, 500);
    fz::write_timer(out, 0);
    write(t, "averager", FuzzOutput().byte(kind(Service::averager)).raw(out.str()).str());
    write(t, "averager_powersgd", FuzzOutput().byte(kind(Service::averager_powersgd)).raw(out.str()).str());
  }
  {  // state: a peer downloads this one's state; this one downloads a donor's
    FuzzOutput out;
    out.byte(kind(Service::state));
    fz::write_request(out, 0, 0, pb::DownloadRequest().SerializeAsString());
    fz::write_local_call(out).byte(1).byte(0).byte(1).byte(0);
    const auto stream = must(av::make_state_stream("meta", {{1, 2, 3, 4}, {5, 6, 7}}, {{2, 2}, {3}}, pb::NONE, 8),
                             "state stream");
    for (const auto& message : stream) fz::write_stream_message(out, 0, message);
    fz::write_response(out, 0, "");
    fz::write_local_reply(out, 0);
    write_dictionary_answer(out, {{0, must(av::encode_sharing_priority(2.0), "priority")}});
    write(t, "state", out.str());
  }
  {  // progress: the tracker's fetch answered with two peers' records
    FuzzOutput out;
    out.byte(kind(Service::progress));
    const apiary::core::optim::LocalProgress a{"peer-a", 0, 20, 4.0, k_dht_now, false};
    const apiary::core::optim::LocalProgress b{"peer-b", 1, 5, 2.0, k_dht_now, true};
    for (std::size_t ask = 0; ask < 2; ++ask) {
      fz::write_local_reply(out, 0);
      write_dictionary_answer(out, {{255, apiary::core::optim::pack_progress(a)}, {0, apiary::core::optim::pack_progress(b)},
                                    {1, "\xc0"}},
                              dht::pack_bin("peer-a[owner:x]"));
    }
    fz::write_local_call(out).byte(0).byte(0).number(30, 2).byte(1);
    fz::write_local_call(out).byte(2);
    write(t, "progress", out.str());
  }
  // decoders (the last kind), by their own choice byte
  const std::size_t decoders = kind(Service::count);
  const std::vector<float> values{1.5F, -2.0F, 3.25F, 0.0F, 7.0F};
  for (auto codec : {pb::NONE, pb::FLOAT16, pb::UNIFORM_8BIT, pb::BLOCKWISE_8BIT}) {
    write(t, "part_" + pb::CompressionType_Name(codec),
          FuzzOutput().byte(decoders).byte(0)
              .raw(must(av::encode_part_message(pb::PART_FOR_AVERAGING, "group", "peer", values.data(), values.size(),
                                                codec, 2.0),
                        "part"))
              .str());
  }
  {
    apiary::core::collective::ExchangeFrame frame;
    frame.op = 3;
    frame.rank = 1;
    frame.weight = 0.5;
    frame.payload = "abc";
    write(t, "exchange_frame", FuzzOutput().byte(decoders).byte(1).flag(true)
                                   .raw(apiary::core::collective::encode_frame(frame)).str());
    auto layout = must(apiary::core::collective::make_span_layout({3, 2}, {pb::NONE, pb::FLOAT16}), "layout");
    std::string span;
    apiary::core::collective::encode_span(layout, 1, 5, values.data(), span);
    write(t, "exchange_span", FuzzOutput().byte(decoders).byte(1).flag(false).byte(1).byte(3).byte(2)
                                  .byte(2).flag(false).flag(true).byte(1).byte(4).raw(span).str());
  }
  write(t, "ps_push", FuzzOutput().byte(decoders).byte(2).raw(dense_push("w", 1, 7, {1, 2, 3})).str());
  write(t, "ps_pull", FuzzOutput().byte(decoders).byte(3).byte(0)
                          .raw(cps::encode_pull_response("w", 1, 7, 3, values.data(), values.size())).str());
  write(t, "ps_pull_landed", FuzzOutput().byte(decoders).byte(3).byte(3)
                                 .raw(cps::pull_response_head("w", 1, 7, 3, 3)).str());
  write(t, "progress_record", FuzzOutput().byte(decoders).byte(4)
                                  .raw(apiary::core::optim::pack_progress({"peer", 2, 9, 1.5, k_dht_now, true})).str());
  write(t, "gather", FuzzOutput().byte(decoders).byte(5).raw(av::wrap_gather(3.0, av::AveragingMode::aux, "u")).str());
  write(t, "group_key", FuzzOutput().byte(decoders).byte(6).raw("run.0b0110").str());
  {
    FuzzOutput out;
    out.byte(decoders).byte(7);
    write_dictionary_answer(out, {{0, "\xc3"}, {1, must(av::encode_sharing_priority(1.0), "priority")}});
    out.byte(5);
    write(t, "declarations", out.str());
  }
  {
    FuzzOutput out;
    out.byte(decoders).byte(8).flag(true).flag(false).flag(false);
    for (const auto& m : must(av::make_state_stream("meta", {{1, 2, 3, 4}, {5, 6, 7}}, {{2, 2}, {3}}, pb::FLOAT16, 8),
                              "state stream")) {
      out.bytes(m);
    }
    write(t, "state_stream", out.str());
  }
}

void file_seeds(const std::string& repo) {
  const std::string t = "fuzz_files";
  const std::string graph_json = read_file(repo + "/examples/autodist/graph_item.json");
  const std::string spec_yaml = read_file(repo + "/examples/autodist/resource_spec.yml");
  const auto item = must(cs::parse_graph_item_json(graph_json, "graph_item.json"), "graph item");
  const auto spec = must(cs::parse_resource_spec(spec_yaml, "resource_spec.yml"), "resource spec");
  for (auto [kind, name] : {std::pair{cs::BuilderKind::ps_load_balancing, "ps_load_balancing"},
                            std::pair{cs::BuilderKind::partitioned_ps, "partitioned_ps"},
                            std::pair{cs::BuilderKind::all_reduce, "all_reduce"}}) {
    auto strategy = must(cs::build_strategy(kind, {}, item, spec, "20260101T000000M000000"), "strategy");
    write(t, std::string("strategy_binary_") + name,
          FuzzOutput().byte(0).flag(false)
              .raw(must(cs::serialize_strategy(strategy, "/tmp/s", cs::StrategyFormat::binary), "binary")).str());
    write(t, std::string("strategy_text_") + name,
          FuzzOutput().byte(0).flag(true)
              .raw(must(cs::serialize_strategy(strategy, "/tmp/s", cs::StrategyFormat::text), "text")).str());
  }
  write(t, "json", FuzzOutput().byte(1).byte(0).raw(R"({"a": [1, 2.5e3, "x\u00e9\n"], "b": {"c": null, "d": true}})").str());
  write(t, "yaml", FuzzOutput().byte(1).byte(1).raw("a:\n  - 1\n  - 'two'\nb: {c: [0, 1]}  # note\nd: ~\n").str());
  write(t, "graph_item", FuzzOutput().byte(1).byte(2).raw(graph_json).str());
  write(t, "resource_spec", FuzzOutput().byte(1).byte(3).raw(spec_yaml).str());
  write(t, "resource_spec_single",
        FuzzOutput().byte(1).byte(3).raw(read_file(repo + "/examples/autodist/resource_spec_single.yml")).str());
  {
    const std::string path = "/tmp/apiary-make-seeds-key";
    if (apiary::messages::save_key_file(path, key_of('\x09'))) {
      write(t, "key_file", FuzzOutput().byte(2).flag(false).raw(read_file(path)).str());
    } else {
      ++g_failures;
    }
    std::filesystem::remove(path);
    const auto rsa = must(apiary::messages::RsaPrivateKey::generate(1024), "RSA key");
    write(t, "rsa_der", FuzzOutput().byte(2).flag(true).raw(must(rsa.to_der(), "RSA DER")).str());
  }
  {
    std::vector<cps::VariablePlan> variables(2);
    variables[0].name = "w";
    variables[0].shape = {2, 2};
    variables[1].name = "b";
    variables[1].shape = {3};
    const std::map<std::string, std::vector<float>> values{{"w", {1, 2, 3, 4}}, {"b", {5, 6, 7}}};
    const std::map<std::string, cps::Optimizer::State> adam{{"w", {3, {1, 1, 1, 1}, {2, 2, 2, 2}}},
                                                            {"b", {3, {1, 1, 1}, {2, 2, 2}}}};
    const std::map<std::string, cps::Optimizer::State> sgd{{"w", {5, {}, {}}}, {"b", {5, {}, {}}}};
    write(t, "checkpoint_adam", FuzzOutput().byte(3).raw(must(cps::encode_checkpoint(
                                                             12, variables, values, cps::OptimizerKind::adam, adam),
                                                         "checkpoint")).str());
    write(t, "checkpoint_sgd", FuzzOutput().byte(3).raw(must(cps::encode_checkpoint(
                                                            5, variables, values, cps::OptimizerKind::sgd, sgd),
                                                        "checkpoint")).str());
  }
  write(t, "device_name", FuzzOutput().byte(4).byte(0).raw("192.168.0.1:GPU:0").str());
  write(t, "expert_uid", FuzzOutput().byte(4).byte(1).raw("expert.3.14").str());
  write(t, "expert_pattern", FuzzOutput().byte(4).byte(2).raw("expert.[0:4].*").str());
  write(t, "shape", FuzzOutput().byte(4).byte(3).raw("2,3,4").str());
  write(t, "dtype", FuzzOutput().byte(4).byte(4).raw("float32").str());
  write(t, "log_level", FuzzOutput().byte(4).byte(5).raw("info").str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR (run from the repository root: fuzz/corpus)\n");
    return 2;
  }
  g_root = argv[1];
  const std::string repo = std::filesystem::current_path().string();
  dht_seeds();
  noise_seeds();
  service_seeds();
  file_seeds(repo);
  relay_seeds();
  if (g_failures > 0) {
    std::fprintf(stderr, "make_seeds: %d seeds could not be made\n", g_failures);
    return 1;
  }
  return 0;
}
