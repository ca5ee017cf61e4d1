#include "core/averaging/allreduce.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>

#include "core/averaging/allreduce_fastwire.hpp"
#include "core/averaging/allreduce_wire.hpp"

namespace apiary::core::averaging {

namespace {
const std::string k_no_string;
}  // namespace

Status validate(const AllReduceConfig& c, const std::vector<std::vector<float>>& tensors) {
  const std::size_t n = c.peers.size();
  if (c.identical_results && (!c.averages_in_place || !c.answer_averages)) {
    return make_error(errc::invalid_argument,
                      "all-reduce: identical_results needs averages_in_place and answer_averages");
  }
  if (n == 0 || c.self >= n) {
    return make_error(errc::invalid_argument,
                      "all-reduce: self index {} is not inside a group of {} peers; pass the "
                      "own position in the leader's order",
                      c.self, n);
  }
  if (c.modes.size() != n || c.peer_fractions.size() != n) {
    return make_error(errc::invalid_argument,
                      "all-reduce: expected one mode and one fraction per peer ({}), got {} "
                      "modes and {} fractions",
                      n, c.modes.size(), c.peer_fractions.size());
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (c.modes[i] == AveragingMode::client && c.peer_fractions[i] != 0.0) {
      return make_error(errc::invalid_argument,
                        "all-reduce: peer {} is a client but has fraction {}; clients reduce "
                        "nothing, give them bandwidth 0 in load balancing",
                        i, c.peer_fractions[i]);
    }
  }
  if (!std::isfinite(c.weight) || c.weight < 0.0) {
    return make_error(errc::invalid_argument,
                      "all-reduce: weight {} is not a finite number >= 0", c.weight);
  }
  if (c.codecs.size() != 1 && c.codecs.size() != c.tensor_sizes.size()) {
    return make_error(errc::invalid_argument,
                      "all-reduce: expected 1 codec or one per tensor ({}), got {}",
                      c.tensor_sizes.size(), c.codecs.size());
  }
  if (c.sender_timeout <= Duration::zero() || c.reducer_timeout <= c.sender_timeout ||
      c.call_timeout <= Duration::zero()) {
    return make_error(errc::invalid_argument,
                      "all-reduce: expected 0 < sender_timeout < reducer_timeout and "
                      "call_timeout > 0, got {} ns, {} ns, {} ns",
                      c.sender_timeout.count(), c.reducer_timeout.count(),
                      c.call_timeout.count());
  }
  const bool needs_values = c.modes[c.self] != AveragingMode::aux;
  if (needs_values && tensors.size() != c.tensor_sizes.size()) {
    return make_error(errc::invalid_argument,
                      "all-reduce: config lists {} tensors, {} were given", c.tensor_sizes.size(),
                      tensors.size());
  }
  for (std::size_t t = 0; needs_values && t < tensors.size(); ++t) {
    if (static_cast<std::int64_t>(tensors[t].size()) != c.tensor_sizes[t]) {
      return make_error(errc::invalid_argument,
                        "all-reduce: tensor {} has {} elements, the config says {}", t,
                        tensors[t].size(), c.tensor_sizes[t]);
    }
  }
  return ok_status();
}

Result<AllReduceRunner> AllReduceRunner::create(AllReduceConfig config,
                                                std::vector<std::vector<float>> tensors) {
  if (auto valid = validate(config, tensors); !valid) return valid.error();
  std::vector<TensorLayout> layouts;
  for (std::size_t t = 0; t < config.tensor_sizes.size(); ++t) {
    const pb::CompressionType codec = config.codecs[config.codecs.size() == 1 ? 0 : t];
    layouts.push_back(TensorLayout{config.tensor_sizes[t], sizeof(float), compression_ratio(codec)});
  }
  auto partition = partition_tensors(layouts, config.peer_fractions, config.part_size_bytes);
  if (!partition) return partition.error();
  return AllReduceRunner(std::move(config), std::move(tensors), std::move(*partition));
}

AllReduceRunner::AllReduceRunner(AllReduceConfig config, std::vector<std::vector<float>> tensors,
                                 Partition partition)
    : config_(std::move(config)),
      tensors_(std::make_shared<std::vector<std::vector<float>>>(std::move(tensors))),
      partition_(std::move(partition)) {
  const std::size_t n = config_.peers.size();
  sender_index_.resize(n);
  sender_seen_.assign(n, false);
  sender_failed_.assign(n, false);
  std::size_t senders = 0;
  for (std::size_t p = 0; p < n; ++p) {
    if (config_.modes[p] != AveragingMode::aux) sender_index_[p] = senders++;
  }
  const auto& own = partition_.parts_by_peer[config_.self];
  if (!own.empty()) {
    std::vector<std::size_t> sizes;
    for (std::size_t i : own) sizes.push_back(static_cast<std::size_t>(partition_.parts[i].length));
    // In place, the own span's averages are written straight over the own copy (an aux
    // peer sends no copy: its tensors stay as they are).
    std::vector<float*> dests;
    if (config_.averages_in_place && is_sender(config_.self)) {
      for (std::size_t i : own) {
        const Part& part = partition_.parts[i];
        dests.push_back((*tensors_)[part.tensor_index].data() + part.offset);
      }
    }
    reducer_.emplace(sizes, senders, config_.deferred_reductions, dests);
  }
  if (!config_.averages_in_place) {
    for (std::int64_t size : config_.tensor_sizes) outcome_.deltas.emplace_back(static_cast<std::size_t>(size), 0.0f);
  }
  if (config_.modes[config_.self] == AveragingMode::aux) config_.weight = 0.0;
}

bool AllReduceRunner::is_sender(std::size_t peer) const {
  return peer < sender_index_.size() && sender_index_[peer].has_value();
}

pb::CompressionType AllReduceRunner::codec_of(const Part& part) const {
  return config_.codecs[config_.codecs.size() == 1 ? 0 : part.tensor_index];
}

const float* AllReduceRunner::local_data(const Part& part) const {
  return (*tensors_)[part.tensor_index].data() + part.offset;
}

TimerId AllReduceRunner::outgoing_timer(std::size_t peer) const {
  return config_.id_base + 2 + peer;
}

TimerId AllReduceRunner::incoming_timer(std::size_t peer) const {
  return config_.id_base + 2 + config_.peers.size() + peer;
}

Result<Payload> AllReduceRunner::part_message(std::size_t part_index, bool first) const {
  const Part& part = partition_.parts[part_index];
  const auto count = static_cast<std::size_t>(part.length);
  const pb::MessageCode code = first ? pb::PART_FOR_AVERAGING : pb::NO_CODE;
  const std::string& group_id = first ? config_.group_id : k_no_string;
  const std::string& peer_id = first ? config_.peers[config_.self].multiaddr() : k_no_string;
  if (config_.splice_parts && codec_of(part) == pb::NONE && count > 0) {
    // The values stay where they lie: the message's body is a view of the tensor.
    auto [head, tail] = none_part_framing(code, group_id, peer_id, count, config_.weight);
    return Payload{std::move(head), Buffer::view_of(tensors_, local_data(part), count * sizeof(float)),
                   std::move(tail)};
  }
  auto msg = encode_part_message(code, group_id, peer_id, local_data(part), count, codec_of(part), config_.weight);
  if (!msg) return msg.error();
  return Payload{std::move(*msg), Buffer{}, std::string{}};
}

std::vector<Landing> AllReduceRunner::answer_landings(std::size_t reducer) const {
  // In place, an uncompressed answer that is the average itself (AVERAGED_VALUES) can land
  // straight where its part lies in the tensors; other answers do not match and arrive
  // as usual. One landing per answer, in order.
  std::vector<Landing> landings;
  if (!config_.averages_in_place || !config_.splice_parts) return landings;
  for (std::size_t index : partition_.parts_by_peer[reducer]) {
    const Part& part = partition_.parts[index];
    const auto count = static_cast<std::size_t>(part.length);
    Landing& landing = landings.emplace_back();
    if (codec_of(part) != pb::NONE || count == 0) continue;  // an empty zone never matches
    float* at = (*tensors_)[part.tensor_index].data() + part.offset;
    landing.zone = Buffer::zone_of(tensors_, at, count * sizeof(float));
    std::tie(landing.head, landing.tail) = none_part_framing(pb::AVERAGED_VALUES, "", "", count, 0.0);
  }
  return landings;
}

Effects AllReduceRunner::start(TimePoint now) {
  Effects fx;
  if (started_ || finished_) return fx;
  started_ = true;
  const std::size_t self = config_.self;
  if (is_sender(self)) {
    // The own span: the local copy goes straight into the reducer, no call.
    if (reducer_) {
      const auto& own = partition_.parts_by_peer[self];
      for (std::size_t k = 0; k < own.size(); ++k) {
        const Part& part = partition_.parts[own[k]];
        // Borrowed: tensors_ outlives the reducer's use of it.
        const PartBytes own_copy{reinterpret_cast<const std::byte*>(local_data(part)),
                                 static_cast<std::size_t>(part.length), Buffer{}};
        // Its delta goes straight into the outcome as the part is averaged (in place,
        // the average itself lands over the copy instead).
        PartSink sink;
        if (!config_.averages_in_place) {
          float* dest = outcome_.deltas[part.tensor_index].data() + part.offset;
          sink = [dest](const float* values, std::size_t n) mutable {
            std::copy(values, values + n, dest);
            dest += n;
          };
        }
        (void)reducer_->accumulate(*sender_index_[self], k, own_copy, config_.weight, std::move(sink));
      }
    }
    // Every other reducer with parts: open a stream, send its parts in order.
    for (std::size_t r = 0; r < config_.peers.size(); ++r) {
      const auto& parts = partition_.parts_by_peer[r];
      if (r == self || parts.empty()) continue;
      outgoing_[r] = Outgoing{r, 0, true};
      std::vector<Payload> messages;
      for (std::size_t k = 0; k < parts.size(); ++k) {
        auto msg = part_message(parts[k], k == 0);
        if (!msg) break;
        messages.push_back(std::move(*msg));
      }
      if (messages.size() != parts.size()) {
        // A part this peer cannot encode: keep the local values for that reducer's span.
        outgoing_[r].open = false;
        outcome_.failed_reducers.push_back(config_.peers[r]);
        continue;
      }
      const CallId call = config_.id_base + 1 + r;
      Payload& first = messages[0];
      fx.push_back(Call{call, config_.peers[r], config_.handle, std::move(first.head), config_.call_timeout, "",
                        true, false, std::move(first.body), std::move(first.tail), answer_landings(r)});
      for (std::size_t k = 1; k < messages.size(); ++k) {
        Payload& m = messages[k];
        fx.push_back(Send{call, std::move(m.head), k + 1 == messages.size(), std::move(m.body), std::move(m.tail)});
      }
      if (messages.size() == 1) fx.push_back(Send{call, std::string{}, true});
      fx.push_back(SetTimer{outgoing_timer(r), now + config_.reducer_timeout});
    }
  }
  // Senders that never open their stream are excluded after sender_timeout.
  if (reducer_) fx.push_back(SetTimer{config_.id_base + 1, now + config_.sender_timeout});
  flush_answers(fx);
  maybe_finish(fx);
  return fx;
}

Effects AllReduceRunner::on_message(TimePoint now, CallId call, std::string_view message, bool landed) {
  Effects fx;
  const std::size_t peer = static_cast<std::size_t>(call - config_.id_base - 1);
  auto it = outgoing_.find(peer);
  if (finished_ || call <= config_.id_base || it == outgoing_.end() || !it->second.open) return fx;
  Outgoing& out = it->second;
  const auto& parts = partition_.parts_by_peer[peer];
  if (out.received >= parts.size()) {
    fail_reducer(fx, peer, true);
    return fx;
  }
  // Anything but the next averaged part means the reducer failed.
  const Part& part = partition_.parts[parts[out.received]];
  const bool taken = landed ? landed_answer(message, part) : take_answer(message, part);
  if (!taken) {
    fail_reducer(fx, peer, true);
    return fx;
  }
  ++out.received;
  if (out.received == parts.size()) {
    out.open = false;
    fx.push_back(CancelTimer{outgoing_timer(peer)});
    maybe_finish(fx);
  } else {
    fx.push_back(SetTimer{outgoing_timer(peer), now + config_.reducer_timeout});
  }
  return fx;
}

bool AllReduceRunner::take_answer(std::string_view message, const Part& part) {
  // The values are read where they lie in the message (uncompressed, any alignment) or
  // decoded. In place, a delta is added to the tensors and an average copied over them;
  // otherwise the outcome's delta is the delta itself, or the average less the local values.
  std::string_view floats;
  auto msg = read_part_message(message, floats);
  const auto length = static_cast<std::size_t>(part.length);
  if (!msg || (msg->code != pb::AVERAGED_PART && msg->code != pb::AVERAGED_VALUES)) return false;
  const char* src = nullptr;
  if (msg->values.empty() && floats.size() == length * sizeof(float)) {
    src = floats.data();
  } else if (msg->values.size() == length) {
    src = reinterpret_cast<const char*>(msg->values.data());
  } else {
    return false;
  }
  if (length == 0) return true;
  const bool average = msg->code == pb::AVERAGED_VALUES;
  float* __restrict x = (*tensors_)[part.tensor_index].data() + part.offset;
  float* __restrict delta = config_.averages_in_place ? nullptr : outcome_.deltas[part.tensor_index].data() + part.offset;
  auto value = [src](std::size_t k) {
    float v;
    std::memcpy(&v, src + k * sizeof(float), sizeof v);
    return v;
  };
  if (config_.averages_in_place && average) {
    std::memcpy(x, src, length * sizeof(float));
  } else if (config_.averages_in_place) {
    for (std::size_t k = 0; k < length; ++k) x[k] += value(k);
  } else if (average) {
    for (std::size_t k = 0; k < length; ++k) delta[k] = value(k) - x[k];
  } else {
    std::memcpy(delta, src, length * sizeof(float));
  }
  return true;
}

bool AllReduceRunner::landed_answer(std::string_view message, const Part& part) const {
  // The body already lies in the tensors; what is left must be exactly the framing of
  // this part's average (which is what the landing matched).
  const auto count = static_cast<std::size_t>(part.length);
  if (!config_.averages_in_place || codec_of(part) != pb::NONE || count == 0) return false;
  const auto [head, tail] = none_part_framing(pb::AVERAGED_VALUES, "", "", count, 0.0);
  return message.size() == head.size() + tail.size() && message.substr(0, head.size()) == head &&
         message.substr(head.size()) == tail;
}

Effects AllReduceRunner::on_response(TimePoint now, CallId call, const Result<std::string>& result) {
  Effects fx;
  const std::size_t peer = static_cast<std::size_t>(call - config_.id_base - 1);
  auto it = outgoing_.find(peer);
  if (finished_ || call <= config_.id_base || it == outgoing_.end() || !it->second.open) return fx;
  // A final message, if any, is one more answer.
  if (result && !result->empty()) fx = on_message(now, call, *result);
  // The call is over: whatever is still missing keeps the local values.
  if (it->second.open) fail_reducer(fx, peer, false);
  return fx;
}

void AllReduceRunner::fail_reducer(Effects& fx, std::size_t peer, bool cancel_call) {
  Outgoing& out = outgoing_[peer];
  if (!out.open) return;
  out.open = false;
  fx.push_back(CancelTimer{outgoing_timer(peer)});
  if (cancel_call) {
    fx.push_back(Cancel{config_.id_base + 1 + peer,
                        "all-reduce: reducer gave up (timeout or bad answer); keeping local values"});
  }
  outcome_.failed_reducers.push_back(config_.peers[peer]);
  maybe_finish(fx);
}

Effects AllReduceRunner::on_timer(TimePoint now, TimerId id) {
  Effects fx;
  if (finished_ || id <= config_.id_base) return fx;
  const std::size_t n = config_.peers.size();
  const TimerId local = id - config_.id_base;
  if (local == 1) {
    // Senders that never opened their stream are excluded.
    for (std::size_t p = 0; p < n; ++p) {
      if (p != config_.self && is_sender(p) && !sender_seen_[p]) fail_sender(fx, p);
    }
  } else if (local >= 2 && local < 2 + n) {
    fail_reducer(fx, static_cast<std::size_t>(local - 2), true);
  } else if (local >= 2 + n && local < 2 + 2 * n) {
    const std::size_t peer = static_cast<std::size_t>(local - 2 - n);
    for (auto& [request, in] : incoming_) {
      if (in.peer == peer && in.open) {
        close_incoming(fx, request, in, pb::CANCELLED);
        fail_sender(fx, peer);
      }
    }
  }
  (void)now;
  maybe_finish(fx);
  return fx;
}

Effects AllReduceRunner::cancel(TimePoint now) {
  (void)now;
  Effects fx;
  if (finished_) return fx;
  for (auto& [peer, out] : outgoing_) {
    if (!out.open) continue;
    out.open = false;
    fx.push_back(CancelTimer{outgoing_timer(peer)});
    fx.push_back(Cancel{config_.id_base + 1 + peer, "all-reduce: this peer left the round"});
  }
  for (auto& [request, in] : incoming_) close_incoming(fx, request, in, pb::CANCELLED);
  fx.push_back(CancelTimer{config_.id_base + 1});
  for (auto& delta : outcome_.deltas) std::fill(delta.begin(), delta.end(), 0.0f);
  // In place, the tensors go back as they stand: averaged where a part was complete
  // before the cancel, the local values elsewhere.
  release_tensors();
  outcome_.status = make_error(errc::cancelled,
                               "all-reduce of group cancelled by this peer; its tensors keep their local "
                               "values except parts averaged before the cancel; retry in another round");
  finished_ = true;
  return fx;
}

void AllReduceRunner::release_tensors() {
  if (!config_.averages_in_place) return;
  // A spliced part's frame may still hold a view of the copy (its send completes on the
  // transport's thread): the caller then gets a copy, so the view's bytes stay unchanged.
  outcome_.averages = tensors_.use_count() == 1 ? std::move(*tensors_) : *tensors_;
}

void AllReduceRunner::maybe_finish(Effects& fx) {
  if (finished_ || !started_) return;
  for (const auto& [peer, out] : outgoing_) {
    if (out.open) return;
  }
  if (reducer_ && !reducer_->finished()) return;
  for (const auto& [request, in] : incoming_) {
    if (in.open) return;
  }
  fx.push_back(CancelTimer{config_.id_base + 1});
  for (std::size_t p = 0; p < config_.peers.size(); ++p) {
    if (sender_failed_[p]) outcome_.failed_senders.push_back(config_.peers[p]);
  }
  std::sort(outcome_.failed_senders.begin(), outcome_.failed_senders.end());
  std::sort(outcome_.failed_reducers.begin(), outcome_.failed_reducers.end());
  if (config_.identical_results && reducer_) {  // the parts not released yet
    for (std::size_t k = released_; k < reducer_->num_parts(); ++k) settle_own_part(k);
  }
  // Every stream is over: nothing here reads the copy any more (the reducer's borrowed own
  // parts included).
  release_tensors();
  finished_ = true;
}

}  // namespace apiary::core::averaging
