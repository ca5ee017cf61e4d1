// ProgressRole driven by hand: its Asks run on DHT nodes of the in-memory network (whose
// validators sign the records and check them against the progress schema), their
// results come back as LocalReplies, and its local methods answer as the tracker says.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/dht/msgpack_value.hpp"
#include "core/dht/node_role.hpp"
#include "core/dht/ownership_validator.hpp"
#include "core/optim/progress_role.hpp"
#include "tests/core/dht/node_network.hpp"

namespace {

namespace dht = apiary::core::dht;
namespace optim = apiary::core::optim;
using apiary::core::Ask;
using apiary::core::CancelTimer;
using apiary::core::Complete;
using apiary::core::Effects;
using apiary::core::LocalCall;
using apiary::core::LocalReply;
using apiary::core::SetTimer;
using apiary::core::Start;
using apiary::core::TimerFired;
using apiary::core::Value;
using dht::testing::NodeNetwork;

std::shared_ptr<dht::CompositeValidator> validators(const apiary::messages::Ed25519PrivateKey& key, std::string& marker) {
  auto owner = std::make_unique<dht::OwnershipValidator>(key);
  marker = owner->own_marker();
  auto composite = std::make_shared<dht::CompositeValidator>();
  composite->extend(std::move(owner));
  composite->extend(std::make_unique<dht::SchemaValidator>(std::vector<dht::SchemaField>{optim::progress_schema_field()},
                                                          dht::SchemaOptions{std::string("run"), true}));
  return composite;
}

template <class E>
std::vector<E> all_of(const Effects& fx) {
  std::vector<E> out;
  for (const auto& e : fx) {
    if (const auto* x = std::get_if<E>(&e)) out.push_back(*x);
  }
  return out;
}

/// Runs each Ask of `fx` on `node` and hands its result back to the role; returns the
/// role's effects of those replies.
Effects serve_asks(NodeNetwork& net, dht::Node& node, optim::ProgressRole& role, const Effects& fx) {
  static apiary::core::OpId next = 100000;
  Effects out;
  for (const Ask& ask : all_of<Ask>(fx)) {
    REQUIRE(ask.role == "dht");
    REQUIRE(ask.method == dht::k_run_method);
    const auto* op = ask.args.as<dht::NodeOp>();
    REQUIRE(op != nullptr);
    const apiary::core::OpId id = next++;
    dht::OpResult result = net.finish(node, id, (*op)(node, net.now(), id));
    Effects more = role.on(net.now(), LocalReply{ask.op, Value::of(std::move(result))});
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

/// A tracker of run "run" on the network's DHT time.
optim::ProgressRoleConfig role_config(std::int64_t target, std::string peer_id, std::string marker) {
  optim::ProgressRoleConfig config;
  config.run_id = "run";
  config.tracker.target_batch_size = target;
  config.peer_id = std::move(peer_id);
  config.owner_marker = std::move(marker);
  config.dht_epoch = NodeNetwork::k_epoch;
  return config;
}

optim::ProgressSnapshot look(optim::ProgressRole& role, NodeNetwork& net) {
  Effects fx = role.on(net.now(), LocalCall{1, "", optim::k_look_method, {}});
  auto done = all_of<Complete>(fx);
  REQUIRE(done.size() == 1);
  REQUIRE(done[0].result.ok());
  return *done[0].result->as<optim::ProgressSnapshot>();
}

}  // namespace

TEST_CASE("the progress role publishes signed records, reads every peer's, and leaves with None", "[optim]") {
  std::mt19937_64 rng(5);
  NodeNetwork net;
  auto my_key = apiary::messages::Ed25519PrivateKey::generate();
  auto their_key = apiary::messages::Ed25519PrivateKey::generate();
  REQUIRE(my_key.ok());
  REQUIRE(their_key.ok());
  std::string my_marker, their_marker;
  dht::Node& mine = net.add(dht::NodeId::random([&] { return rng(); }), {}, validators(*my_key, my_marker));
  dht::Node& theirs = net.add(dht::NodeId::random([&] { return rng(); }), {}, validators(*their_key, their_marker));
  REQUIRE(net.start(mine, {}).status);
  REQUIRE(net.start(theirs, {net.addr(mine)}).status);

  optim::ProgressRole role(role_config(100, "my peer id", my_marker));

  // Start: a report (with its periodic timer at metadata_expiration / 2) and a fetch.
  Effects fx = role.on(net.now(), Start{});
  REQUIRE(all_of<Ask>(fx).size() == 2);
  REQUIRE(all_of<SetTimer>(fx).size() == 1);
  CHECK(all_of<SetTimer>(fx)[0].at == net.now() + std::chrono::seconds(30));
  Effects after = serve_asks(net, mine, role, fx);
  auto fetch_timer = all_of<SetTimer>(after);
  REQUIRE(fetch_timer.size() == 1);
  auto s = look(role, net);
  CHECK(s.reports_stored == 1);
  CHECK(s.fetches == 1);
  CHECK(s.global.num_peers == 1);  // itself
  CHECK(fetch_timer[0].at == apiary::core::from_seconds(s.global.next_fetch_time - NodeNetwork::k_epoch));

  // Another peer publishes its own progress (its node signs it); a forged entry under this
  // peer's subkey is refused.
  const dht::NodeId key = dht::NodeId::of_str_key("run_progress");
  const double exp = net.dht_now() + 60;
  const std::string other = optim::pack_progress(optim::LocalProgress{"their id", 0, 30, 6.0, net.dht_now(), false});
  CHECK(net.store(theirs, {dht::StoreItem{key, dht::pack_bin(their_marker), other, exp}}).stored[0]);
  CHECK_FALSE(net.store(theirs, {dht::StoreItem{key, dht::pack_bin(my_marker), other, exp}}).stored[0]);
  CHECK_FALSE(net.store(theirs, {dht::StoreItem{key, dht::pack_bin(their_marker), dht::pack_str("not progress"), exp + 1}})
                  .stored[0]);

  // The trainer reports; a second report while the store is out waits for it.
  net.advance(std::chrono::seconds(2));
  fx = role.on(net.now(), LocalCall{2, "", optim::k_report_method, Value::of(optim::ProgressReport{0, 40, true})});
  REQUIRE(all_of<Complete>(fx).size() == 1);
  REQUIRE(all_of<Ask>(fx).size() == 1);
  Effects second = role.on(net.now(), LocalCall{3, "", optim::k_report_method, Value::of(optim::ProgressReport{0, 50, true})});
  CHECK(all_of<Ask>(second).empty());
  Effects resent = serve_asks(net, mine, role, fx);
  REQUIRE(all_of<Ask>(resent).size() == 1);  // the newer report goes out now
  CHECK(serve_asks(net, mine, role, resent).empty());
  CHECK(look(role, net).reports_stored == 3);

  // A fetch on demand: both peers, this one's record as last reported.
  fx = role.on(net.now(), LocalCall{4, "", optim::k_fetch_method, {}});
  after = serve_asks(net, mine, role, fx);
  auto fetched = all_of<Complete>(after);
  REQUIRE(fetched.size() == 1);
  const auto& snap = *fetched[0].result->as<optim::ProgressSnapshot>();
  CHECK(snap.global.num_peers == 2);
  CHECK(snap.global.samples_accumulated == 80);  // 50 + 30 at epoch 0
  CHECK(snap.local.samples_accumulated == 50);
  CHECK_FALSE(snap.ready_to_update_epoch);

  // The epoch moves on; bad arguments are refused by name.
  fx = role.on(net.now(), LocalCall{5, "", optim::k_update_epoch_method, Value::of(std::optional<std::int64_t>{})});
  REQUIRE(all_of<Complete>(fx).size() == 1);
  CHECK(*all_of<Complete>(fx)[0].result->as<std::int64_t>() == 1);
  (void)serve_asks(net, mine, role, fx);
  fx = role.on(net.now(), LocalCall{6, "", optim::k_report_method, Value::of(std::string("no"))});
  REQUIRE(all_of<Complete>(fx).size() == 1);
  CHECK(all_of<Complete>(fx)[0].result.error().code == apiary::errc::invalid_argument);
  fx = role.on(net.now(), LocalCall{7, "", "nonsense", {}});
  CHECK(all_of<Complete>(fx)[0].result.error().code == apiary::errc::not_found);

  // The periodic report fires.
  fx = role.on(net.now(), TimerFired{1});
  REQUIRE(all_of<Ask>(fx).size() == 1);
  (void)serve_asks(net, mine, role, fx);

  // Leaving: the timers stop, None is published, and the call completes once it is stored.
  fx = role.on(net.now(), LocalCall{8, "", optim::k_leave_method, {}});
  CHECK(all_of<CancelTimer>(fx).size() == 2);
  REQUIRE(all_of<Ask>(fx).size() == 1);
  after = serve_asks(net, mine, role, fx);
  REQUIRE(all_of<Complete>(after).size() == 1);
  CHECK(*all_of<Complete>(after)[0].result->as<bool>());
  CHECK(role.on(net.now(), TimerFired{2}).empty());
  fx = role.on(net.now(), LocalCall{9, "", optim::k_report_method, Value::of(optim::ProgressReport{1, 1, true})});
  CHECK(all_of<Complete>(fx)[0].result.error().code == apiary::errc::cancelled);

  // The other peer now sees this one as gone (None) and itself alone.
  auto got = net.get(theirs, {key}, true);
  REQUIRE(got.found[0]);
  const auto& dict = std::get<dht::FoundValue::Dictionary>(got.found[0]->value);
  REQUIRE(dict.count(dht::pack_bin(my_marker)) == 1);
  CHECK(dict.at(dht::pack_bin(my_marker)).value == std::string(1, '\xc0'));
}

TEST_CASE("paused, the progress role holds its reports and fetches back until it resumes", "[optim]") {
  std::mt19937_64 rng(9);
  NodeNetwork net;
  auto key = apiary::messages::Ed25519PrivateKey::generate();
  REQUIRE(key.ok());
  std::string marker;
  dht::Node& node = net.add(dht::NodeId::random([&] { return rng(); }), {}, validators(*key, marker));
  REQUIRE(net.start(node, {}).status);
  optim::ProgressRole role(role_config(10, "me", marker));
  (void)serve_asks(net, node, role, role.on(net.now(), Start{}));

  Effects fx = role.on(net.now(), LocalCall{1, "", optim::k_pause_method, Value::of(true)});
  CHECK(all_of<Complete>(fx).size() == 1);
  net.advance(std::chrono::seconds(1));
  fx = role.on(net.now(), LocalCall{2, "", optim::k_report_method, Value::of(optim::ProgressReport{0, 5, true})});
  CHECK(all_of<Ask>(fx).empty());  // held back
  fx = role.on(net.now(), LocalCall{3, "", optim::k_update_epoch_method, Value::of(std::optional<std::int64_t>{})});
  CHECK(all_of<Ask>(fx).empty());
  CHECK(role.on(net.now(), TimerFired{2}).empty());  // the fetch waits too
  fx = role.on(net.now(), LocalCall{4, "", optim::k_pause_method, Value::of(false)});
  REQUIRE(all_of<Ask>(fx).size() == 2);  // one store (the latest state) and the fetch
  (void)serve_asks(net, node, role, fx);
  auto s = look(role, net);
  CHECK(s.reports_stored == 2);
  CHECK(s.local.epoch == 1);
  CHECK(s.global.epoch == 1);
  fx = role.on(net.now(), LocalCall{5, "", optim::k_pause_method, Value::of(std::string("yes"))});
  CHECK(all_of<Complete>(fx)[0].result.error().code == apiary::errc::invalid_argument);
}
