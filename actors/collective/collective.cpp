#include "actors/collective/collective.hpp"

#include <thread>

#include <caf/all.hpp>

#include "actors/effects_executor.hpp"

namespace apiary::actors {

Result<std::unique_ptr<Collective>> Collective::create(caf::actor_system& sys, std::shared_ptr<Gateway> gw,
                                                       CollectiveActorConfig config) {
  if (config.job.empty()) {
    return make_error(errc::invalid_argument, "collective: expected a job name (it names the handles), got none");
  }
  if (config.members.empty() || config.rank >= config.members.size()) {
    return make_error(errc::invalid_argument, "collective: expected a rank below the member count {}, got {}",
                      config.members.size(), config.rank);
  }
  for (const auto& m : config.members) {
    if (auto key = peer_key_of(m); !key) {
      return make_error(errc::invalid_argument,
                        "collective: expected every member as a multiaddr such as /ip4/127.0.0.1/tcp/7000, got '{}'",
                        m);
    }
  }
  if (config.timeout.count() <= 0) {
    return make_error(errc::invalid_argument, "collective: expected a timeout > 0 ms, got {}", config.timeout.count());
  }
  auto actor = spawn_collective_actor(sys, gw, config);
  return std::unique_ptr<Collective>(new Collective(std::move(gw), std::move(config), std::move(actor)));
}

CollectiveResult Collective::submit(collective_op_message m, std::chrono::milliseconds limit) {
  m.done = std::make_shared<std::promise<CollectiveResult>>();
  auto future = m.done->get_future();
  caf::anon_send(actor_, std::move(m));
  // The actor's own deadlines end every op; this one only guards against a lost actor.
  if (future.wait_for(limit) != std::future_status::ready) {
    return make_error(errc::deadline_exceeded,
                      "collective {}: expected the op to end within {} ms, got no outcome; the collective actor is "
                      "stuck or gone",
                      config_.job, limit.count());
  }
  return future.get();
}

Status Collective::join(std::chrono::milliseconds patience) {
  collective_op_message m;
  m.kind = collective_op_message::Kind::barrier;
  m.level = 0;
  m.patience = patience;
  auto r = submit(std::move(m), patience + config_.timeout);
  if (!r) return r.error();
  return ok_status();
}

Result<std::vector<std::vector<float>>> Collective::allreduce(std::vector<std::vector<float>> tensors, double weight,
                                                              std::vector<pb::CompressionType> codecs) {
  return tensor_op(collective_op_message::Kind::allreduce, std::move(tensors), weight, std::move(codecs),
                   8 * config_.timeout);
}

Result<std::vector<std::vector<float>>> Collective::mean(std::vector<std::vector<float>> tensors, double weight,
                                                         std::vector<pb::CompressionType> codecs) {
  return tensor_op(collective_op_message::Kind::mean, std::move(tensors), weight, std::move(codecs),
                   4 * config_.timeout);
}

Result<std::vector<std::vector<float>>> Collective::tensor_op(collective_op_message::Kind kind,
                                                              std::vector<std::vector<float>> tensors, double weight,
                                                              std::vector<pb::CompressionType> codecs,
                                                              std::chrono::milliseconds limit) {
  collective_op_message m;
  m.kind = kind;
  m.tensors = std::move(tensors);
  m.weight = weight;
  m.codecs = std::move(codecs);
  auto r = submit(std::move(m), limit);
  ++ops_;
  if (!r) return r.error();
  return std::move(r->tensors);
}

Result<std::vector<std::string>> Collective::gather(std::string payload) {
  collective_op_message m;
  m.kind = collective_op_message::Kind::gather;
  m.payload = std::move(payload);
  auto r = submit(std::move(m), 4 * config_.timeout);
  ++ops_;
  if (!r) return r.error();
  return std::move(r->gathered);
}

void Collective::abandon(const Error& why, std::chrono::milliseconds linger) {
  collective_op_message m;
  m.kind = collective_op_message::Kind::abandon;
  m.payload = why.what();
  caf::anon_send(actor_, std::move(m));
  std::this_thread::sleep_for(linger);
}

Status Collective::leave(std::chrono::milliseconds patience) {
  collective_op_message m;
  m.kind = collective_op_message::Kind::barrier;
  m.level = ops_;
  m.patience = patience;
  auto r = submit(std::move(m), patience + config_.timeout);
  if (!r) return r.error();
  return ok_status();
}

Collective::~Collective() { stop_collective_actor(*gw_, config_.job, actor_); }

}  // namespace apiary::actors
