#include "actors/collective/collective.hpp"

#include <thread>

#include <caf/all.hpp>

#include "actors/effects_executor.hpp"
#include "actors/role_actor.hpp"
#include "core/collective/barrier_role.hpp"
#include "core/collective/group_roles.hpp"
#include "core/mux.hpp"

namespace apiary::actors {

namespace cc = core::collective;

Result<std::unique_ptr<Collective>> Collective::create(caf::actor_system& sys, std::shared_ptr<Gateway> gw,
                                                       CollectiveActorConfig config) {
  for (std::size_t i = 0; i < config.members.size(); ++i) {
    if (config.members[i].empty()) {
      return make_error(errc::invalid_argument,
                        "collective: member {} has no address; expected a multiaddr such as /ip4/127.0.0.1/tcp/7000", i);
    }
  }
  auto mux = std::make_unique<core::Mux>();
  cc::GroupConfig group{config.job, config.rank, config.members, config.timeout, config.part_size_bytes};
  if (auto added = cc::add_group_roles(*mux, group); !added) return added.error();
  std::unique_ptr<Collective> c(new Collective(gw, std::move(config)));
  c->handles_ = mux->handles();
  c->host_ = spawn_role_actor(sys, std::move(gw), std::move(mux));
  (void)c->gw_->describe("").get();  // the transport thread has taken the serve() calls
  return c;
}

Result<core::Value> Collective::call(const char* role, const char* method, core::Value args,
                                     std::chrono::milliseconds limit) {
  auto future = call_role(host_, role, method, std::move(args));
  // The roles' own deadlines end every op; this one only guards against a lost host.
  if (future.wait_for(limit) != std::future_status::ready) {
    return make_error(errc::deadline_exceeded,
                      "collective {}: expected the op to end within {} ms, got no outcome; its host is stuck or gone",
                      config_.job, limit.count());
  }
  return future.get();
}

Status Collective::meet(std::uint64_t level, std::chrono::milliseconds patience) {
  auto r = call("barrier", "meet", core::Value::of(cc::BarrierMeet{level, patience}), patience + config_.timeout);
  if (!r) return r.error();
  return ok_status();
}

Status Collective::join(std::chrono::milliseconds patience) { return meet(0, patience); }

Status Collective::leave(std::chrono::milliseconds patience) { return meet(ops_, patience); }

namespace {

Result<std::vector<std::vector<float>>> tensors_of(Result<core::Value> r) {
  if (!r) return r.error();
  auto* t = r->as<std::vector<std::vector<float>>>();
  if (t == nullptr) return make_error(errc::internal, "collective: an op answered no tensors");
  return std::move(*t);
}

}  // namespace

Result<std::vector<std::vector<float>>> Collective::allreduce(std::vector<std::vector<float>> tensors, double weight,
                                                              std::vector<pb::CompressionType> codecs) {
  auto r = call("allreduce", "allreduce",
                core::Value::of(cc::GroupAllReduceArgs{ops_, std::move(tensors), weight, std::move(codecs)}),
                8 * config_.timeout);
  ++ops_;
  return tensors_of(std::move(r));
}

Result<std::vector<std::vector<float>>> Collective::mean(std::vector<std::vector<float>> tensors, double weight,
                                                         std::vector<pb::CompressionType> codecs) {
  auto r = call("exchange", "mean", core::Value::of(cc::ExchangeMeanArgs{std::move(tensors), weight, std::move(codecs)}),
                4 * config_.timeout);
  ++ops_;
  return tensors_of(std::move(r));
}

Result<std::vector<std::string>> Collective::gather(std::string payload) {
  auto r = call("exchange", "gather", core::Value::of(std::move(payload)), 4 * config_.timeout);
  ++ops_;
  if (!r) return r.error();
  auto* gathered = r->as<std::vector<std::string>>();
  if (gathered == nullptr) return make_error(errc::internal, "collective: a gather answered nothing");
  return std::move(*gathered);
}

void Collective::abandon(const Error& why, std::chrono::milliseconds linger) {
  // Members still calling this one hear why it left, not just that it is gone.
  call_role(host_, "exchange", "stop", core::Value::of(make_error(errc::unavailable, "{}", why.what())),
            [](Result<core::Value>) {});
  std::this_thread::sleep_for(linger);
}

Collective::~Collective() { stop_role_actor(*gw_, host_, handles_); }

}  // namespace apiary::actors
