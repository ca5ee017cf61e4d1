#include "core/ps/wire.hpp"

namespace apiary::core::ps {

pb::PsPushRequest to_pb(const std::string& shard, const Push& push) {
  pb::PsPushRequest m;
  m.set_shard(shard);
  m.set_replica(push.replica);
  m.set_step(push.step);
  m.set_samples(push.samples);
  if (const auto* dense = std::get_if<std::vector<float>>(&push.gradient)) {
    m.mutable_dense()->Add(dense->begin(), dense->end());
  } else {
    const auto& sparse = std::get<SparseGradient>(push.gradient);
    auto* s = m.mutable_sparse();
    s->mutable_rows()->Add(sparse.rows.begin(), sparse.rows.end());
    s->mutable_values()->Add(sparse.values.begin(), sparse.values.end());
  }
  return m;
}

Push from_pb(const pb::PsPushRequest& request) {
  Push p;
  p.replica = request.replica();
  p.step = request.step();
  p.samples = request.samples();
  if (request.has_sparse()) {
    SparseGradient g;
    g.rows.assign(request.sparse().rows().begin(), request.sparse().rows().end());
    g.values.assign(request.sparse().values().begin(), request.sparse().values().end());
    p.gradient = std::move(g);
  } else {
    p.gradient = std::vector<float>(request.dense().begin(), request.dense().end());
  }
  return p;
}

pb::PsPushResponse to_pb(const std::string& shard, const PushAck& ack) {
  pb::PsPushResponse m;
  m.set_shard(shard);
  m.set_replica(ack.replica);
  m.set_step(ack.step);
  return m;
}

pb::PsPullResponse to_pb(const std::string& shard, const PullReply& reply) {
  pb::PsPullResponse m;
  m.set_shard(shard);
  m.set_replica(reply.replica);
  m.set_step(reply.step);
  m.set_version(reply.version);
  m.mutable_values()->Add(reply.values.begin(), reply.values.end());
  return m;
}

PullReply from_pb(const pb::PsPullResponse& response) {
  PullReply r;
  r.replica = response.replica();
  r.step = response.step();
  r.version = response.version();
  r.values.assign(response.values().begin(), response.values().end());
  return r;
}

}  // namespace apiary::core::ps
