#include "core/moe/expert_server_role.hpp"

#include <utility>

#include "messages/tensor/codec.hpp"
#include "runtime.pb.h"

namespace apiary::core::moe {
namespace {

/// The scheduler's name of an expert's pool (hivemind's "<uid>_forward", "<uid>_backward").
std::string pool_name(const std::string& uid, bool forward) { return uid + (forward ? "_forward" : "_backward"); }

}  // namespace

Status ExpertServerRole::add_expert(const std::string& uid, std::unique_ptr<ExpertBackend> backend,
                                    const PoolConfig& pool) {
  if (uid.empty() || backend == nullptr) {
    return make_error(errc::invalid_argument, "an expert needs a uid and a backend; got uid '{}' and {}", uid,
                      backend == nullptr ? "no backend" : "a backend");
  }
  if (experts_.count(uid) != 0) {
    return make_error(errc::invalid_argument, "expert '{}' is served already; give each expert its own uid", uid);
  }
  if (Status valid = pool.validate(); !valid) {
    return make_error(errc::invalid_argument, "expert '{}': {}", uid, valid.error().message);
  }
  for (bool forward : {true, false}) {
    const std::string name = pool_name(uid, forward);
    if (Status added = scheduler_.add_pool(name, pool); !added) return added.error();
    pools_.emplace(name, PoolOf{uid, forward ? Kind::forward : Kind::backward});
  }
  experts_.emplace(uid, std::move(backend));
  return ok_status();
}

Effects ExpertServerRole::on(TimePoint now, Input input) {
  if (auto* r = std::get_if<Request>(&input)) return on_request(now, r->id, r->handle, r->body);
  if (auto* m = std::get_if<RequestMessage>(&input)) return on_request_message(now, m->id, m->message, m->last);
  if (auto* t = std::get_if<TimerFired>(&input)) return on_timer(now, t->id);
  if (auto* c = std::get_if<LocalCall>(&input)) return on_local(*c);
  return {};  // no calls of its own, nor peers to watch (a caller gone ends its stream)
}

Effects ExpertServerRole::on_local(const LocalCall& call) {
  if (call.method != k_state_method) return {unknown_method(call, "the expert server")};
  ExpertStates states;
  for (const auto& [uid, backend] : experts_) {
    auto state = backend->state();
    if (state) states.emplace(uid, std::move(*state));
  }
  return {Complete{call.op, Value::of(std::move(states))}};
}

Effects ExpertServerRole::on_request(TimePoint now, RequestId id, const std::string& addressed,
                                     const Buffer& body) {
  const std::string handle = Addressing::base_of(addressed);
  if (handle == k_info_handle) return on_info(id, body);
  if (handle == k_forward_handle) return on_call(now, id, Kind::forward, body);
  if (handle == k_backward_handle) return on_call(now, id, Kind::backward, body);
  if (handle == k_forward_stream_handle) return on_stream(now, id, Kind::forward, body);
  if (handle == k_backward_stream_handle) return on_stream(now, id, Kind::backward, body);
  return refuse(id, make_error(errc::not_found, "the expert server has no handle '{}'; it serves {}, {}, {}, {} and {}",
                               handle, k_info_handle, k_forward_handle, k_backward_handle, k_forward_stream_handle,
                               k_backward_stream_handle));
}

Effects ExpertServerRole::on_timer(TimePoint now, TimerId id) {
  if (id == k_stream_timer) {
    stream_timer_at_.reset();
    return expire_streams(now);
  }
  if (id != k_pool_timer) return {};
  timer_at_.reset();
  return run_ready(now);
}

ExpertBackend* ExpertServerRole::expert(const std::string& uid) {
  auto it = experts_.find(uid);
  return it == experts_.end() ? nullptr : it->second.get();
}

Effects ExpertServerRole::on_info(RequestId id, const Buffer& body) {
  pb::ExpertUID request;
  if (!request.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return refuse(id, make_error(errc::malformed, "rpc_info: {} bytes are not an ExpertUID message", body.size()));
  }
  auto it = experts_.find(request.uid());
  if (it == experts_.end()) return refuse(id, unknown_expert(request.uid()));
  pb::ExpertInfo info;
  info.set_serialized_info(pack_info(it->second->info()));
  return {Reply{id, info.SerializeAsString()}};
}

Effects ExpertServerRole::on_call(TimePoint now, RequestId id, Kind kind, const Buffer& body) {
  const char* method = kind == Kind::forward ? "forward" : "backward";
  pb::ExpertRequest request;
  if (!request.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return refuse(id, make_error(errc::malformed, "rpc_{}: {} bytes are not an ExpertRequest message", method,
                                 body.size()));
  }
  return submit(now, id, kind, request, /*stream=*/false);
}

Effects ExpertServerRole::submit(TimePoint now, RequestId id, Kind kind, const pb::ExpertRequest& request,
                                 bool stream) {
  const char* method = kind == Kind::forward ? "forward" : "backward";
  auto it = experts_.find(request.uid());
  if (it == experts_.end()) return refuse(id, unknown_expert(request.uid()));
  const ExpertSchema& schema = it->second->info();
  std::vector<Tensor> inputs;
  inputs.reserve(static_cast<std::size_t>(request.tensors_size()));
  for (int i = 0; i < request.tensors_size(); ++i) {
    auto tensor = messages::decode(request.tensors(i));
    if (!tensor) {
      return refuse(id, make_error(tensor.error().code, "expert '{}' {}: tensor {}: {}", request.uid(), method, i,
                                   tensor.error().message));
    }
    inputs.push_back(std::move(*tensor));
  }
  const auto expected = kind == Kind::forward ? schema.forward_inputs() : schema.backward_inputs();
  auto rows = check_batch(expected, inputs, fmt::format("expert '{}' {}", request.uid(), method));
  if (!rows) return refuse(id, rows.error());
  const TaskId task = next_task_++;
  if (Status queued = scheduler_.submit(now, pool_name(request.uid(), kind == Kind::forward), task, *rows); !queued) {
    return refuse(id, queued.error());
  }
  tasks_.emplace(task, PendingTask{id, std::move(inputs), stream});
  return run_soon(now);
}

Effects ExpertServerRole::run_soon(TimePoint now) {
  if (timer_at_ && *timer_at_ <= now) return {};  // due already: it fires behind this request
  timer_at_ = now;
  return {SetTimer{k_pool_timer, now}};
}

Effects ExpertServerRole::run_ready(TimePoint now) {
  Effects fx;
  for (;;) {
    Decision decision = scheduler_.poll(now);
    if (decision.run) {
      run_batch(*decision.run, fx);
      continue;
    }
    // Nothing ready: wake when the next pool becomes ready by its timeout, if any.
    if (decision.wake_at && decision.wake_at != timer_at_) {
      fx.push_back(SetTimer{k_pool_timer, *decision.wake_at});
    } else if (!decision.wake_at && timer_at_) {
      fx.push_back(CancelTimer{k_pool_timer});
    }
    timer_at_ = decision.wake_at;
    return fx;
  }
}

Result<std::vector<Tensor>> ExpertServerRole::compute(const Batch& batch, const PoolOf& pool) {
  std::vector<const std::vector<Tensor>*> parts;
  for (const TaskSlice& t : batch.tasks) parts.push_back(&tasks_.at(t.id).inputs);
  auto joined = concat_rows(parts);
  if (!joined) return joined.error();
  ExpertBackend& backend = *experts_.at(pool.uid);
  const ExpertSchema& schema = backend.info();
  const std::size_t n_inputs = schema.forward_inputs().size();
  Result<std::vector<Tensor>> outputs = std::vector<Tensor>{};
  if (pool.kind == Kind::forward) {
    outputs = backend.forward(*joined);
  } else {
    // Backward's task tensors are the forward inputs followed by the output gradients.
    std::vector<Tensor> inputs(joined->begin(), joined->begin() + static_cast<std::ptrdiff_t>(n_inputs));
    std::vector<Tensor> grads(joined->begin() + static_cast<std::ptrdiff_t>(n_inputs), joined->end());
    outputs = backend.backward(inputs, grads);
  }
  if (!outputs) return outputs.error();
  // What the batch gives: the outputs, or one gradient per forward input.
  const auto expected = pool.kind == Kind::forward ? schema.outputs : schema.forward_inputs();
  auto rows = check_batch(expected, *outputs, fmt::format("the outputs of expert '{}'", pool.uid));
  if (!rows) return make_error(errc::internal, "{}", rows.error().message);
  return outputs;
}

void ExpertServerRole::run_batch(const Batch& batch, Effects& fx) {
  const PoolOf& pool = pools_.at(batch.pool);
  auto outputs = compute(batch, pool);
  stats_.batches += 1;
  stats_.rows += batch.rows;
  if (!outputs) stats_.failed_batches += 1;
  const Result<std::size_t> rows =
      outputs ? Result<std::size_t>(outputs->front().shape()[0]) : Result<std::size_t>(outputs.error());
  const ExpertSchema& schema = experts_.at(pool.uid)->info();
  const auto out_schema = pool.kind == Kind::forward ? schema.outputs : schema.forward_inputs();
  for (const TaskOutcome& outcome : scheduler_.finish(batch.id, rows)) {
    auto task = tasks_.extract(outcome.slice.id);
    if (!outcome.status) {
      fx.push_back(Reply{task.mapped().request, outcome.status.error()});
      continue;
    }
    auto part = slice_rows(*outputs, outcome.slice.offset, outcome.slice.rows);
    if (!part) {
      fx.push_back(Reply{task.mapped().request, part.error()});
      continue;
    }
    answer(task.mapped(), pool.uid, *part, out_schema, fx);
  }
}

void ExpertServerRole::answer(const PendingTask& task, const std::string& uid, const std::vector<Tensor>& part,
                              const std::vector<TensorSchema>& schema, Effects& fx) {
  // This task's rows of every output, each encoded with its schema's compression.
  std::vector<pb::Tensor> wire;
  wire.reserve(part.size());
  for (std::size_t i = 0; i < part.size(); ++i) {
    auto encoded = messages::encode(part[i], schema[i].compression);
    if (!encoded) {
      const Error& e = encoded.error();
      fx.push_back(Reply{task.request, make_error(e.code, "expert '{}': output {}: {}", uid, i, e.message)});
      return;
    }
    wire.push_back(std::move(*encoded));
  }
  if (!task.stream) {
    pb::ExpertResponse response;
    for (pb::Tensor& tensor : wire) *response.add_tensors() = std::move(tensor);
    fx.push_back(Reply{task.request, response.SerializeAsString()});
    return;
  }
  // Streamed: one chunk per message, then the end.
  for (std::string& message : response_stream(wire)) fx.push_back(Reply{task.request, std::move(message), false});
  fx.push_back(Reply{task.request, std::string{}, true});
}

Effects ExpertServerRole::refuse(RequestId id, Error error) {
  stats_.refused += 1;
  return {Reply{id, std::move(error)}};
}

Error ExpertServerRole::unknown_expert(const std::string& uid) const {
  std::string known;
  std::size_t listed = 0;
  for (const auto& entry : experts_) {
    if (listed == 5) {
      known += ", ...";
      break;
    }
    known += (listed++ == 0 ? "" : ", ") + entry.first;
  }
  return make_error(errc::not_found, "no expert '{}' on this server ({} experts: {}); check the uid", uid,
                    experts_.size(), known);
}

}  // namespace apiary::core::moe
