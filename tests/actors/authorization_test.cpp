// Authorization of every service (core/rpc/auth.hpp, Gateway::authorize), over UCX
// between runtimes of one process: for the DHT, ping, averaging and state download, the
// parameter server, the all-reduce's barrier and exchange, and experts, a member of the
// swarm's authority passes, while a stranger (no token), a peer whose token expired and
// a replayed request are refused with errc::unauthorized, and the connection goes on. A
// member does not believe a stranger's answers. Where a service has a client facade, the
// member's whole flow runs too (a PS replica trains, an expert answers, replicas average).
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "actors/rpc.hpp"
#include "api/averager.hpp"
#include "api/dht.hpp"
#include "api/expert_server.hpp"
#include "api/node.hpp"
#include "api/parameter_server.hpp"
#include "api/remote_expert.hpp"
#include "api/replica.hpp"
#include "api/runtime.hpp"
#include "averaging.pb.h"
#include "core/averaging/matchmaking_types.hpp"
#include "core/averaging/state_sharing.hpp"
#include "core/averaging/allreduce.hpp"
#include "core/collective/group_roles.hpp"
#include "core/dht/protocol.hpp"
#include "core/ping/pinger.hpp"
#include "core/moe/expert_server_role.hpp"
#include "core/ps/partition.hpp"
#include "core/ps/wire.hpp"
#include "core/rpc/auth.hpp"
#include "dht.pb.h"
#include "ping.pb.h"
#include "ps.pb.h"
#include "runtime.pb.h"
#include "tests/actors/expert_pair.hpp"
#include "tests/support/authority_file.hpp"
#include "tests/support/one_variable_plan.hpp"
#include "tests/support/test_system.hpp"

using namespace apiary;
using namespace std::chrono_literals;
namespace rpc = apiary::core::rpc;
namespace cps = apiary::core::ps;
namespace cc = apiary::core::collective;

namespace {

/// Mints tokens that expired a second before they are asked for.
class ExpiredIssuer final : public rpc::TokenIssuer {
 public:
  ExpiredIssuer(messages::Ed25519PrivateKey authority, messages::Ed25519PublicKey holder)
      : authority_(std::move(authority)), holder_(std::move(holder)) {}
  Result<pb::AccessToken> get_token(double now) override {
    return rpc::issue_access_token(authority_, "late", holder_, now - 1);
  }
  Status is_token_valid(double now, const pb::AccessToken& token) const override {
    return rpc::verify_access_token(authority_.public_key(), now, token);
  }
  bool does_token_need_refreshing(double, const pb::AccessToken&) const override { return false; }

 private:
  messages::Ed25519PrivateKey authority_;
  messages::Ed25519PublicKey holder_;
};

/// A member's authorizer that signs its first request and sends that same authorization
/// with every later one: a replay, as an eavesdropper of a plaintext link could send it.
class ReplayingAuthorizer final : public rpc::Authorizer {
 public:
  explicit ReplayingAuthorizer(std::shared_ptr<rpc::TokenAuthorizer> inner) : inner_(std::move(inner)) {}
  const std::string& peer_id() const override { return inner_->peer_id(); }
  Result<pb::RequestAuthInfo> sign_request(double now, const rpc::CallParties& call) override {
    if (!first_) {
      auto signed_request = inner_->sign_request(now, call);
      if (!signed_request) return signed_request.error();
      first_ = std::move(*signed_request);
    }
    return *first_;
  }
  Status check_request(double now, const rpc::CallParties& call, const pb::RequestAuthInfo& auth) override {
    return inner_->check_request(now, call, auth);
  }
  Result<pb::ResponseAuthInfo> sign_response(double now, const rpc::CallParties& call,
                                             const pb::RequestAuthInfo& request) override {
    return inner_->sign_response(now, call, request);
  }
  Status check_response(double now, const rpc::CallParties& call, const pb::RequestAuthInfo& request,
                        const pb::ResponseAuthInfo& auth) override {
    return inner_->check_response(now, call, request, auth);
  }
  /// The next request is signed afresh (and then replayed).
  void forget() { first_.reset(); }

 private:
  std::shared_ptr<rpc::TokenAuthorizer> inner_;
  std::optional<pb::RequestAuthInfo> first_;
};

rpc::NonceSource random_nonces() {
  auto rng = std::make_shared<std::mt19937_64>(std::random_device{}());
  return [rng] {
    std::string nonce(rpc::k_auth_nonce_size, '\0');
    const std::uint64_t bits = (*rng)();
    for (std::size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<char>((bits >> (8 * i)) & 0xff);
    return nonce;
  };
}

/// Runtimes of one swarm authority on one actor system: members `server` (serves) and
/// `member` (calls); `stranger` (no authorization), `late` (its tokens expired) and
/// `replayer` (a member that replays its first request).
struct Swarm {
  testing::TestSystem t;
  testing::AuthorityFile authority;
  std::unique_ptr<Runtime> server;
  std::unique_ptr<Runtime> member;
  std::unique_ptr<Runtime> stranger;
  std::unique_ptr<Runtime> late;
  std::unique_ptr<Runtime> replayer;
  std::shared_ptr<ReplayingAuthorizer> replaying;

  Swarm() {
    server = start(authority.member());
    member = start(authority.member());
    stranger = start({});
    late = start({});
    late->gateway()->authorize(std::make_shared<rpc::TokenAuthorizer>(
        late->key(), std::make_shared<ExpiredIssuer>(authority.key(), late->key().public_key()), random_nonces()));
    replayer = start({});
    auto inner = rpc::shared_authority_authorizer(authority.key(), replayer->key(), "replayer", random_nonces());
    REQUIRE(inner.ok());
    replaying = std::make_shared<ReplayingAuthorizer>(*inner);
    replayer->gateway()->authorize(replaying);
  }
  ~Swarm() {
    for (auto* rt : {&replayer, &late, &stranger, &member, &server}) (*rt)->stop();
  }
  Swarm(const Swarm&) = delete;
  Swarm& operator=(const Swarm&) = delete;

  std::unique_ptr<Runtime> start(const Authorization& authorization) {
    RuntimeOptions o;
    o.system = &t.sys;
    o.authorization = authorization;
    auto rt = Runtime::start(o);
    REQUIRE(rt.ok());
    return std::move(*rt);
  }
  [[nodiscard]] core::PeerAddr server_addr() const { return core::PeerAddr(server->address()); }
};

/// One call from `from` to `handle` at `to`: unary, or a stream of one message.
Status probe(Runtime& from, const core::PeerAddr& to, const std::string& handle, const Buffer& request, bool stream) {
  if (stream) {
    auto pending = actors::stream_call(*from.gateway(), to, handle, {Payload(request)}, 5000ms);
    auto answer = pending.answer.get();
    if (!answer) return answer.error();
    return ok_status();
  }
  auto pending = actors::unary_call(*from.gateway(), to, handle, Payload(request), 5000ms);
  auto answer = pending.answer.get();
  if (!answer) return answer.error();
  return ok_status();
}

void require_refused(const Status& status, const std::string& why) {
  REQUIRE_FALSE(status.ok());
  INFO(status.error().what());
  CHECK(status.error().code == errc::unauthorized);
  CHECK_THAT(status.error().message, Catch::Contains(why));
}

/// The four cases on one served handle of the swarm's server: the member passes
/// authorization (when `member_answered`, the service answers it too), the stranger,
/// the late peer and a replayed request are refused, and the member still gets through.
void check_guarded(Swarm& s, const core::PeerAddr& at, const std::string& handle, const Buffer& request, bool stream,
                   bool member_answered) {
  INFO(handle);
  auto by_member = probe(*s.member, at, handle, request, stream);
  if (member_answered) {
    INFO((by_member ? std::string("ok") : by_member.error().what()));
    CHECK(by_member.ok());
  } else if (!by_member) {
    INFO(by_member.error().what());
    CHECK(by_member.error().code != errc::unauthorized);
  }
  require_refused(probe(*s.stranger, at, handle, request, stream), "expected an access token");
  require_refused(probe(*s.late, at, handle, request, stream), "expired");
  s.replaying->forget();
  auto first = probe(*s.replayer, at, handle, request, stream);
  if (!first) CHECK(first.error().code != errc::unauthorized);
  require_refused(probe(*s.replayer, at, handle, request, stream), "repeated");
  auto again = probe(*s.member, at, handle, request, stream);
  if (!again) CHECK(again.error().code != errc::unauthorized);
}

template <class Message>
Buffer bytes_of(const Message& m) {
  return actors::to_buffer(m);
}

}  // namespace

TEST_CASE("a member's calls pass, a stranger's are refused, and a member does not believe a stranger's answers",
          "[actor][auth]") {
  Swarm s;
  const std::string handle = "apiary.Test.rpc_echo";
  auto echo = [](const core::rpc::Delivery& d) -> Result<Buffer> { return d.data; };
  auto served = actors::serve_unary(s.t.sys, s.server->gateway(), handle, echo);
  auto stranger_served = actors::serve_unary(s.t.sys, s.stranger->gateway(), handle, echo);
  const Buffer hello = Buffer::copy_of("hello");
  check_guarded(s, s.server_addr(), handle, hello, false, true);

  // The stranger's service answers, but a member takes no answer a member did not sign.
  require_refused(probe(*s.member, core::PeerAddr(s.stranger->address()), handle, hello, false), "not a member");
  // A member names the service it means (its PeerID from the address): another member's
  // signed answer is taken only from that service.
  CHECK(probe(*s.member, s.server_addr(), handle, hello, false).ok());
  caf::anon_send_exit(served, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(stranger_served, caf::exit_reason::user_shutdown);
}

TEST_CASE("the DHT serves members only, and a stranger's node cannot join", "[actor][auth]") {
  Swarm s;
  DhtOptions o;
  auto node = Dht::start(*s.server, o);
  REQUIRE(node.ok());
  pb::PingRequest ping;
  ping.mutable_peer()->set_node_id(std::string(20, '\x11'));
  const auto handle = s.server_addr().addressed(core::dht::k_ping_handle);
  check_guarded(s, s.server_addr(), handle, bytes_of(ping), false, true);
  pb::FindRequest find;
  find.add_keys(std::string(20, '\x01'));
  check_guarded(s, s.server_addr(), s.server_addr().addressed(core::dht::k_find_handle), bytes_of(find), false, true);

  // A member's node joins through the server; a stranger's node cannot.
  DhtOptions joining;
  joining.initial_peers = {s.server->address().to_string()};
  auto member_node = Dht::start(*s.member, joining);
  REQUIRE(member_node.ok());
  auto stranger_node = Dht::start(*s.stranger, joining);
  REQUIRE_FALSE(stranger_node.ok());
  CHECK_THAT(stranger_node.error().message, Catch::Contains("access token"));
}

TEST_CASE("ping serves members only", "[actor][auth]") {
  Swarm s;
  NodeOptions o;
  o.authorization = s.authority.member();
  auto node = Node::start(o);
  REQUIRE(node.ok());
  pb::PingProbe probe_message;
  probe_message.set_seq(1);
  check_guarded(s, core::PeerAddr((*node)->address()), core::ping::k_handle, bytes_of(probe_message), false, true);
}

TEST_CASE("averaging and state download serve members only, and members average together", "[actor][auth]") {
  Swarm s;
  auto server_dht = Dht::start(*s.server, DhtOptions{});
  REQUIRE(server_dht.ok());
  DhtOptions joining;
  joining.initial_peers = {s.server->address().to_string()};
  auto member_dht = Dht::start(*s.member, joining);
  REQUIRE(member_dht.ok());
  std::vector<std::unique_ptr<Averager>> averagers;
  for (auto* dht : {server_dht->get(), member_dht->get()}) {
    AveragerOptions o;
    o.prefix = "auth";
    o.tensors = {dht == server_dht->get() ? std::vector<float>{1, 2} : std::vector<float>{3, 4}};
    o.target_group_size = 2;
    o.min_matchmaking_time = 1.0;
    o.request_timeout = 1.0;
    auto averager = Averager::start(*dht, o);
    REQUIRE(averager.ok());
    averagers.push_back(std::move(*averager));
  }
  AveragerStepOptions step;
  step.timeout = 30;
  std::vector<std::future<Result<AveragerStepReport>>> reports;
  for (auto& a : averagers) reports.push_back(a->step(step));
  for (auto& r : reports) {
    auto report = r.get();
    INFO((report ? std::string("ok") : report.error().what()));
    REQUIRE(report.ok());
  }
  for (auto& a : averagers) CHECK(a->tensors()[0] == std::vector<float>{2, 3});

  const core::PeerAddr at = s.server_addr();
  check_guarded(s, at, at.addressed(std::string("auth::") + core::averaging::k_download_state_handle), bytes_of(pb::DownloadRequest{}), true,
                false);
  pb::JoinRequest join;
  join.set_group_key("auth.0b");
  check_guarded(s, at, at.addressed(std::string("auth::") + core::averaging::k_join_handle), bytes_of(join), true, false);
  check_guarded(s, at, at.addressed(std::string("auth::") + core::averaging::k_aggregate_part_handle), bytes_of(pb::AveragingData{}), true,
                false);
  averagers.clear();
}

namespace {

/// One PS device holding "w" [4], one replica, BSP, plain SGD with learning rate 1.
std::shared_ptr<const cps::TrainingPlan> one_shard_plan() {
  cps::TrainingPlan plan;
  plan.replicas = {"localhost:GPU:0"};
  plan.servers = {"localhost:CPU:0"};
  const std::vector<std::int64_t> shape{4};
  auto layouts = cps::shard_layouts(shape, "");
  REQUIRE(layouts.ok());
  cps::PlannedShard shard;
  shard.variable = "w";
  shard.config.variable = "w";
  shard.config.layout = layouts->front();
  shard.config.optimizer.kind = cps::OptimizerKind::sgd;
  shard.config.optimizer.learning_rate = 1.0F;
  shard.config.sync = true;
  shard.config.replica_hosts = {0};
  shard.device = plan.servers.front();
  plan.variables.push_back({"w", shape, "", false, {0}});
  plan.shards.push_back(std::move(shard));
  return std::make_shared<const cps::TrainingPlan>(std::move(plan));
}

/// A PS replica of one_shard_plan() on `runtime`, its PS at `ps`.
Result<std::unique_ptr<Replica>> ps_replica(Runtime& runtime, const core::PeerAddr& ps) {
  ReplicaOptions o;
  o.roles.ps = one_shard_plan();
  o.roles.servers = {{"localhost:CPU:0", ps}};
  o.roles.call_timeout = 5000ms;
  o.patience = 10s;
  return Replica::start(runtime, std::move(o));
}

}  // namespace

TEST_CASE("the parameter server serves members only, and a member's replica trains", "[actor][auth]") {
  Swarm s;
  ParameterServerOptions o;
  o.device = "localhost:CPU:0";
  o.plan = one_shard_plan();
  o.initial = {{"w", {1, 1, 1, 1}}};
  auto ps = ParameterServer::start(*s.server, o);
  REQUIRE(ps.ok());

  {
    auto replica = ps_replica(*s.member, s.server_addr());
    REQUIRE(replica.ok());
    auto& r = **replica;
    REQUIRE(r.join(10s).ok());
    auto params = r.pull();
    REQUIRE(params.ok());
    CHECK(params->params.at("w") == std::vector<float>{1, 1, 1, 1});
    REQUIRE(r.push({{"w", {0.5F, 0.5F, 0.5F, 0.5F}}}, 1.0).ok());
    params = r.pull();
    REQUIRE(params.ok());
    CHECK(params->params.at("w") == std::vector<float>{0.5F, 0.5F, 0.5F, 0.5F});
    CHECK(r.leave(10s).ok());
  }
  {
    // A PS-only replica meets no one at join; its first pull is refused.
    auto replica = ps_replica(*s.stranger, s.server_addr());
    REQUIRE(replica.ok());
    auto joined = (*replica)->join(10s);
    Status pulled = joined;
    if (joined.ok()) {
      auto params = (*replica)->pull();
      if (!params) pulled = params.error();
    }
    REQUIRE_FALSE(pulled.ok());
    INFO(pulled.error().what());
    CHECK_THAT(pulled.error().message, Catch::Contains("access token"));
  }
  pb::PsPullRequest pull;
  pull.set_shard("w");
  check_guarded(s, s.server_addr(), core::ps::k_ps_pull_handle, bytes_of(pull), false, false);
}

TEST_CASE("experts serve members only, and a member's RemoteExpert gets answers", "[actor][auth]") {
  Swarm s;
  auto server = ExpertServer::start(*s.server, testing::ffn_options({"expert.0"}, 1, 4), nullptr);
  REQUIRE(server.ok());
  RemoteExpert by_member(*s.member, "expert.0", s.server_addr());
  CHECK(by_member.info().ok());
  RemoteExpert by_stranger(*s.stranger, "expert.0", s.server_addr());
  auto refused = by_stranger.info();
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == errc::unauthorized);
  pb::ExpertUID uid;
  uid.set_uid("expert.0");
  check_guarded(s, s.server_addr(), s.server_addr().addressed(core::moe::k_info_handle), bytes_of(uid), false, true);
}

TEST_CASE("the all-reduce's barrier and exchange serve members only, and member replicas train alike", "[actor][auth]") {
  Swarm s;
  const auto ar = testing::one_variable_plan(2);
  const std::vector<core::PeerAddr> members{s.server_addr(), core::PeerAddr(s.member->address())};
  std::vector<std::unique_ptr<Replica>> replicas;
  for (Runtime* rt : {s.server.get(), s.member.get()}) {
    ReplicaOptions o;
    o.roles.replica = static_cast<int>(replicas.size());
    o.roles.ar = ar;
    o.roles.members = members;
    o.roles.job = "test.auth";
    o.roles.optimizer.learning_rate = 0.5F;
    o.roles.initial = {{"w", {1.0F, 1.0F}}};
    o.roles.exchange_timeout = 5s;
    o.patience = 20s;
    auto replica = Replica::start(*rt, o);
    REQUIRE(replica.ok());
    replicas.push_back(std::move(*replica));
  }
  auto joined0 = std::async(std::launch::async, [&] { return replicas[0]->join(10s); });
  REQUIRE(replicas[1]->join(10s).ok());
  REQUIRE(joined0.get().ok());
  std::vector<std::future<Status>> pushed;
  for (std::size_t r = 0; r < 2; ++r) {
    REQUIRE(replicas[r]->pull().ok());
    std::map<std::string, std::vector<float>> g{{"w", r == 0 ? std::vector<float>{1, 0} : std::vector<float>{0, 1}}};
    pushed.push_back(std::async(std::launch::async, [&replicas, r, g] { return replicas[r]->push(g, 1.0); }));
  }
  for (auto& p : pushed) REQUIRE(p.get().ok());
  for (auto& replica : replicas) {
    auto params = replica->pull();
    REQUIRE(params.ok());
    CHECK(params->params.at("w") == std::vector<float>{0.75F, 0.75F});
  }

  check_guarded(s, s.server_addr(), cc::group_barrier_handle("test.auth"), Buffer::copy_of("not a barrier message"), false, false);
  check_guarded(s, s.server_addr(), cc::group_exchange_handle("test.auth"), Buffer::copy_of("x"), true, false);
  auto left0 = std::async(std::launch::async, [&] { return replicas[0]->leave(10s); });
  CHECK(replicas[1]->leave(10s).ok());
  CHECK(left0.get().ok());
}

TEST_CASE("an identity attached to a shared gateway is authorized until it leaves", "[actor][auth]") {
  Swarm s;
  const std::string handle = "apiary.Test.rpc_echo";
  auto served = actors::serve_unary(s.t.sys, s.server->gateway(), handle,
                                    [](const core::rpc::Delivery& d) -> Result<Buffer> { return d.data; });
  // A member's identity on the stranger's gateway (as the DHTs of a Python process share one).
  auto attached = Runtime::attach(s.t.sys, s.stranger->gateway(), {}, s.authority.member());
  REQUIRE(attached.ok());
  const std::string as = (*attached)->peer_id().bytes();
  const Buffer hello = Buffer::copy_of("hello");
  auto call_as = [&](const std::string& caller) {
    auto pending = actors::unary_call(*s.stranger->gateway(), s.server_addr(), handle, Payload(hello), 5000ms, caller);
    auto answer = pending.answer.get();
    return answer ? ok_status() : Status(answer.error());
  };
  CHECK(call_as(as).ok());
  require_refused(call_as({}), "expected an access token");  // the gateway's own identity is no member
  (*attached)->stop();
  require_refused(call_as(as), "expected an access token");
  caf::anon_send_exit(served, caf::exit_reason::user_shutdown);
}
