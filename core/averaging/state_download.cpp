// State sharing, downloading side: the stream reader and the donor-by-donor loader.
#include <chrono>
#include <utility>

#include "core/averaging/state_sharing.hpp"
#include "messages/tensor/codec.hpp"

namespace apiary::core::averaging {

// ---------------------------------------------------------------- StateStreamReader

StateStreamReader::StateStreamReader(std::optional<std::vector<messages::Shape>> expected_shapes,
                                     std::uint64_t max_bytes, bool any_dtype)
    : expected_(std::move(expected_shapes)), max_bytes_(max_bytes), any_dtype_(any_dtype) {}

Status StateStreamReader::push(const std::string& message) {
  const std::size_t n = ++messages_;
  pb::DownloadData data;
  if (!data.ParseFromString(message)) {
    return make_error(errc::malformed,
                      "state stream message {}: expected a DownloadData, got {} bytes that do "
                      "not parse; the donor speaks another protocol",
                      n, message.size());
  }
  // The metadata comes once, in the first message.
  if (n == 1) {
    if (data.metadata().empty()) {
      return make_error(errc::malformed,
                        "state stream: expected the first message to carry the state's "
                        "metadata, got none; the donor's state is unusable, ask another");
    }
    state_.metadata = data.metadata();
  } else if (!data.metadata().empty()) {
    return make_error(errc::protocol,
                      "state stream message {} carries metadata again: expected it only in "
                      "the first message; the donor is broken",
                      n);
  }
  if (!data.has_tensor_part()) {
    if (n == 1) return ok_status();  // a state without tensors
    return make_error(errc::protocol,
                      "state stream message {} has no tensor chunk: expected one in every "
                      "message after the first; the donor is broken",
                      n);
  }
  if (!assembler_.started() && data.tensor_part().dtype().empty()) {
    return make_error(errc::protocol,
                      "state stream message {}: expected the first chunk of tensor {} (with "
                      "dtype and shape), got a buffer-only chunk; the donor sent more chunks "
                      "than it announced",
                      n, state_.shapes.size());
  }
  bytes_ += data.tensor_part().buffer().size();
  if (max_bytes_ != 0 && bytes_ > max_bytes_) {
    return make_error(errc::too_large,
                      "state stream: {} tensor bytes by message {}, expected at most {}; raise "
                      "max_state_bytes if the state is really this large",
                      bytes_, n, max_bytes_);
  }
  // Join the tensor's chunks; decode it once complete.
  auto complete = assembler_.push(std::move(*data.mutable_tensor_part()));
  if (!complete) return complete.error();
  if (!*complete) return ok_status();
  auto joined = assembler_.finish();
  if (!joined) return joined.error();
  auto tensor = messages::decode(*joined);
  if (!tensor) return tensor.error();
  const std::size_t index = state_.shapes.size();
  if (!any_dtype_ && tensor->type() != messages::dtype::float32) {
    return make_error(errc::malformed,
                      "state stream tensor {}: expected float32 values, got dtype \"{}\"; "
                      "state tensors travel as float32",
                      index, joined->dtype());
  }
  if (expected_) {
    if (index >= expected_->size()) {
      return make_error(errc::protocol,
                        "state stream: expected {} tensors, got a tensor {}; the donor "
                        "averages another model",
                        expected_->size(), index + 1);
    }
    if (tensor->shape() != (*expected_)[index]) {
      return make_error(errc::protocol,
                        "state stream tensor {}: expected shape {}, got {}; the donor "
                        "averages another model",
                        index, messages::format_shape((*expected_)[index]),
                        messages::format_shape(tensor->shape()));
    }
  }
  state_.shapes.push_back(tensor->shape());
  if (any_dtype_) {
    state_.typed.push_back(std::move(*tensor));
  } else {
    const float* p = tensor->data<float>();
    state_.tensors.emplace_back(p, p + tensor->numel());
  }
  return ok_status();
}

Result<DownloadedState> StateStreamReader::finish() {
  if (messages_ == 0) {
    return make_error(errc::not_found,
                      "state stream ended without a message: expected the donor's state; the "
                      "donor does not share its state now, ask another");
  }
  if (assembler_.started()) {
    auto cut = assembler_.finish();
    if (!cut) {
      return make_error(cut.error().code, "state stream tensor {}: {}", state_.shapes.size(),
                        cut.error().message);
    }
  }
  if (expected_ && state_.shapes.size() != expected_->size()) {
    return make_error(errc::protocol,
                      "state stream ended after {} tensors, expected {}; the donor averages "
                      "another model",
                      state_.shapes.size(), expected_->size());
  }
  return std::move(state_);
}

// ---------------------------------------------------------------- StateLoader

StateLoader::StateLoader(StateLoaderConfig config)
    : config_(std::move(config)),
      reader_(config_.expected_shapes, config_.max_state_bytes, config_.any_dtype) {}

Result<StateLoader> StateLoader::create(StateLoaderConfig config) {
  if (config.handle.empty()) {
    return make_error(errc::invalid_argument,
                      "state loader: expected a handle, got an empty one; use \"<prefix>::\" + "
                      "k_download_state_handle");
  }
  if (config.chunk_timeout <= Duration::zero() || config.call_timeout <= Duration::zero()) {
    return make_error(errc::invalid_argument,
                      "state loader: expected chunk_timeout and call_timeout > 0, got {} ns "
                      "and {} ns; pass positive durations",
                      config.chunk_timeout.count(), config.call_timeout.count());
  }
  return StateLoader(std::move(config));
}

bool StateLoader::is_current(CallId call) const {
  return running_ && !outcome_ && call == call_id();
}

void StateLoader::arm(Effects& fx, TimePoint now) {
  deadline_ = now + config_.chunk_timeout;
  fx.push_back(SetTimer{timer_id(), deadline_});
}

void StateLoader::ask(Effects& fx, TimePoint now) {
  // No donor left: the outcome lists why each failed.
  if (current_ >= config_.donors.size()) {
    running_ = false;
    if (!config_.donors.empty()) fx.push_back(CancelTimer{timer_id()});
    if (failures_.empty()) {
      outcome_ = make_error(errc::not_found,
                            "load state: expected at least one donor, got none; no other peer "
                            "declares that it shares its state, retry after they declare");
      return;
    }
    std::string list;
    for (const DonorFailure& f : failures_) {
      if (!list.empty()) list += "; ";
      list += f.donor.multiaddr() + ": " + f.error.what();
    }
    outcome_ = make_error(errc::unavailable,
                          "load state: expected one of {} donors to stream a complete state, "
                          "every one failed ({}); retry later or with other donors",
                          failures_.size(), list);
    return;
  }
  // Ask the next donor: DownloadRequest is the caller's only message.
  reader_ = StateStreamReader(config_.expected_shapes, config_.max_state_bytes, config_.any_dtype);
  Call call;
  call.id = call_id();
  call.peer = config_.donors[current_];
  call.handle = config_.handle;
  call.request = pb::DownloadRequest().SerializeAsString();
  call.timeout = config_.call_timeout;
  call.stream = true;
  call.last = true;
  fx.push_back(std::move(call));
  running_ = true;
  arm(fx, now);
}

void StateLoader::fail_donor(Effects& fx, TimePoint now, Error error, bool cancel_call) {
  if (cancel_call) fx.push_back(Cancel{call_id(), "load state: " + error.message});
  failures_.push_back(DonorFailure{config_.donors[current_], std::move(error)});
  running_ = false;
  ++current_;
  ask(fx, now);
}

Effects StateLoader::start(TimePoint now) {
  Effects fx;
  if (running_ || outcome_ || !failures_.empty()) return fx;  // started already
  ask(fx, now);
  return fx;
}

Effects StateLoader::on_message(TimePoint now, CallId call, const std::string& message) {
  Effects fx;
  if (!is_current(call)) return fx;
  if (auto pushed = reader_.push(message); !pushed) {
    fail_donor(fx, now, std::move(pushed.error()), true);
    return fx;
  }
  arm(fx, now);  // the donor is alive: a new chunk_timeout from now
  return fx;
}

Effects StateLoader::on_response(TimePoint now, CallId call, const Result<std::string>& result) {
  Effects fx;
  if (!is_current(call)) return fx;
  if (!result) {
    fail_donor(fx, now, result.error(), false);
    return fx;
  }
  // A final message travels with the end.
  if (!result->empty()) {
    if (auto pushed = reader_.push(*result); !pushed) {
      fail_donor(fx, now, std::move(pushed.error()), false);
      return fx;
    }
  }
  auto state = reader_.finish();
  if (!state) {
    fail_donor(fx, now, std::move(state.error()), false);
    return fx;
  }
  state->donor = config_.donors[current_];
  running_ = false;
  fx.push_back(CancelTimer{timer_id()});
  outcome_ = std::move(*state);
  return fx;
}

Effects StateLoader::on_timer(TimePoint now, TimerId id) {
  Effects fx;
  if (id != timer_id() || !running_ || outcome_ || now < deadline_) return fx;
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(config_.chunk_timeout);
  fail_donor(fx, now,
             make_error(errc::deadline_exceeded,
                        "no message for {} ms after {} messages: expected the next chunk "
                        "within chunk_timeout; the donor stalled",
                        waited.count(), reader_.messages()),
             true);
  return fx;
}

Effects StateLoader::cancel(TimePoint /*now*/) {
  Effects fx;
  if (outcome_) return fx;
  if (running_) {
    fx.push_back(Cancel{call_id(), "load state: cancelled by the caller"});
    fx.push_back(CancelTimer{timer_id()});
  }
  running_ = false;
  outcome_ = make_error(errc::cancelled,
                        "load state: cancelled by the caller after {} failed donors; start a "
                        "new load to try again",
                        failures_.size());
  return fx;
}

}  // namespace apiary::core::averaging
