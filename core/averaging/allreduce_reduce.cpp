// The reducing side of AllReduceRunner: serving the part streams of the other senders.
#include <algorithm>
#include <cstring>
#include <utility>

#include "core/averaging/allreduce.hpp"
#include "core/averaging/allreduce_fastwire.hpp"

namespace apiary::core::averaging {

namespace {

/// The floats `floats` views inside `message`, held by the message's buffer; no owner
/// when the part was decoded instead (its values are then in the PartMessage).
PartBytes held_floats(std::string_view floats, const Buffer& message) {
  if (floats.empty()) return PartBytes{};
  return PartBytes{reinterpret_cast<const std::byte*>(floats.data()), floats.size() / sizeof(float), message};
}

/// Values of one answer computed at a time: small enough to stay in the L1 cache on its
/// way from the delta into the message.
constexpr std::size_t k_answer_chunk = 2048;

/// A message in one piece (a Reply's response, no body).
Payload whole(std::string message) { return Payload{std::move(message), Buffer{}, std::string{}}; }

}  // namespace

Effects AllReduceRunner::on_request(TimePoint now, RequestId id, const PeerAddr& from, Buffer message) {
  Effects fx;
  auto refuse = [&](pb::MessageCode code) {
    fx.push_back(Reply{id, encode_code_message(code), true});
    return fx;
  };
  // A round that is over takes no more parts.
  if (finished_) return refuse(outcome_.status ? pb::INTERNAL_ERROR : pb::CANCELLED);
  std::string_view floats;
  auto msg = read_part_message(message.view(), floats);
  if (!msg) return refuse(pb::PROTOCOL_VIOLATION);
  if (msg->group_id != config_.group_id) return refuse(pb::BAD_GROUP_ID);
  if (msg->code != pb::PART_FOR_AVERAGING) return refuse(pb::PROTOCOL_VIOLATION);
  // The caller must be a sender of this group, other than this peer, with one stream.
  const auto found = from.empty() ? std::find_if(config_.peers.begin(), config_.peers.end(),
                                                  [&](const PeerAddr& p) { return p.multiaddr() == msg->peer_id; })
                                   : std::find(config_.peers.begin(), config_.peers.end(), from);
  const auto peer = static_cast<std::size_t>(found - config_.peers.begin());
  if (found == config_.peers.end() || peer == config_.self || !is_sender(peer) || !reducer_ ||
      sender_seen_[peer]) {
    return refuse(pb::PROTOCOL_VIOLATION);
  }
  sender_seen_[peer] = true;
  if (sender_failed_[peer]) return refuse(pb::CANCELLED);  // it came after sender_timeout
  Incoming& in = incoming_[id];
  in.peer = peer;
  in.sender = *sender_index_[peer];
  fx.push_back(SetTimer{incoming_timer(peer), now + config_.sender_timeout});
  serve_part(fx, id, in, std::move(*msg), held_floats(floats, message));
  maybe_finish(fx);
  return fx;
}

Effects AllReduceRunner::on_request_message(TimePoint now, RequestId id, Result<Buffer> message, bool last) {
  Effects fx;
  auto it = incoming_.find(id);
  if (finished_ || it == incoming_.end() || !it->second.open) return fx;
  Incoming& in = it->second;
  if (!message) {
    // The stream broke (sender gone or cancelled): nothing more can be answered.
    in.open = false;
    fx.push_back(CancelTimer{incoming_timer(in.peer)});
    fail_sender(fx, in.peer);
    maybe_finish(fx);
    return fx;
  }
  if (!message->empty()) {
    std::string_view floats;
    auto msg = read_part_message(message->view(), floats);
    if (!msg || (!msg->group_id.empty() && msg->group_id != config_.group_id) ||
        (msg->code != pb::NO_CODE && msg->code != pb::PART_FOR_AVERAGING)) {
      close_incoming(fx, id, in, msg && !msg->group_id.empty() &&
                                         msg->group_id != config_.group_id
                                     ? pb::BAD_GROUP_ID
                                     : pb::PROTOCOL_VIOLATION);
      fail_sender(fx, in.peer);
      maybe_finish(fx);
      return fx;
    }
    serve_part(fx, id, in, std::move(*msg), held_floats(floats, *message));
  }
  if (in.open && last) {
    in.input_ended = true;
    fx.push_back(CancelTimer{incoming_timer(in.peer)});
    // A sender that ends before its last part is excluded from the rest.
    if (reducer_->parts_received(in.sender) < reducer_->num_parts()) fail_sender(fx, in.peer);
  } else if (in.open) {
    fx.push_back(SetTimer{incoming_timer(in.peer), now + config_.sender_timeout});
  }
  flush_answers(fx);
  maybe_finish(fx);
  return fx;
}

void AllReduceRunner::serve_part(Effects& fx, RequestId id, Incoming& in, PartMessage msg, PartBytes floats) {
  // acc += w * x for the sender's next part; a bad part bans the sender. An uncompressed
  // part is read and kept where it lies in the received message.
  const std::size_t index = reducer_->parts_received(in.sender);
  const pb::CompressionType codec = msg.compression;
  Result<std::vector<std::size_t>> done = std::vector<std::size_t>{};
  if (floats.owner.empty()) {
    done = reducer_->accumulate(in.sender, index, std::move(msg.values), msg.weight);
  } else {
    // Its answer (the delta, or the average with answer_averages) is written as the part
    // is averaged: spliced, over the copy itself (this runner owns the received message,
    // and each piece of the copy is read before its answer is written there); else into a
    // message of its own.
    PreparedAnswer& prepared = in.prepared[index];
    prepared.code = config_.answer_averages ? pb::AVERAGED_VALUES : pb::AVERAGED_PART;
    PartSink sink;
    if (config_.splice_parts) {
      const auto offset = static_cast<std::size_t>(floats.bytes - floats.owner.data());
      prepared.in_place = floats.owner.slice(offset, floats.count * sizeof(float));
      sink = [at = prepared.in_place.data()](const float* values, std::size_t n) mutable {
        std::memcpy(at, values, n * sizeof(float));
        at += n * sizeof(float);
      };
    } else {
      prepared.writer.emplace(prepared.code, "", "", floats.count, 0.0);
      sink = [w = &*prepared.writer](const float* values, std::size_t n) { w->append(values, n); };
    }
    done = reducer_->accumulate(in.sender, index, std::move(floats), msg.weight, std::move(sink),
                                config_.answer_averages ? SinkGets::average : SinkGets::delta);
    if (!done) in.prepared.erase(index);
  }
  if (!done) {
    close_incoming(fx, id, in, pb::PROTOCOL_VIOLATION);
    fail_sender(fx, in.peer);
    return;
  }
  in.codecs.push_back(codec);
  flush_answers(fx);
}

void AllReduceRunner::fail_sender(Effects& fx, std::size_t peer) {
  if (sender_failed_[peer]) return;
  sender_failed_[peer] = true;
  if (!reducer_) return;
  // Excluded from every part it has not sent; those may now be complete.
  (void)reducer_->on_sender_failed(*sender_index_[peer]);
  flush_answers(fx);
}

void AllReduceRunner::close_incoming(Effects& fx, RequestId id, Incoming& in,
                                     pb::MessageCode code) {
  if (!in.open) return;
  in.open = false;
  fx.push_back(Reply{id, encode_code_message(code), true});
  fx.push_back(CancelTimer{incoming_timer(in.peer)});
}

void AllReduceRunner::flush_answers(Effects& fx) {
  if (!reducer_) return;
  for (auto& [request, in] : incoming_) {
    if (!in.open) continue;
    // A client reads only after it finished sending: its answers wait for that.
    if (config_.modes[in.peer] == AveragingMode::client && !in.input_ended) continue;
    const std::size_t sent = reducer_->parts_received(in.sender);
    const std::size_t ready = std::min(sent, reducer_->num_complete());
    for (; in.replied < ready; ++in.replied) {
      auto msg = answer(in, in.replied);
      if (!msg) {
        close_incoming(fx, request, in, pb::INTERNAL_ERROR);
        break;
      }
      fx.push_back(Reply{request, std::move(msg->head), false, std::move(msg->body), std::move(msg->tail)});
    }
    // Every part it sent is answered and it sends no more: end the stream.
    if (in.open && in.input_ended && in.replied == sent) {
      in.open = false;
      fx.push_back(Reply{request, std::string{}, true});
      fx.push_back(CancelTimer{incoming_timer(in.peer)});
    }
  }
  release_answered_parts();
}

Result<Payload> AllReduceRunner::answer(Incoming& in, std::size_t k) {
  // avg - sender's copy (or avg, as prepared); a part without an average (weight 0) keeps
  // its values (delta 0).
  const Part& part = partition_.parts[partition_.parts_by_peer[config_.self][k]];
  const auto length = static_cast<std::size_t>(part.length);
  const bool has_delta = reducer_->state(k) == PartState::averaged;
  if (auto found = in.prepared.find(k); found != in.prepared.end()) {
    PreparedAnswer prepared = std::move(found->second);
    in.prepared.erase(found);
    // Written when the part was averaged.
    if (has_delta && prepared.writer) return whole(prepared.writer->finish());
    if (has_delta) {
      auto [head, tail] = none_part_framing(prepared.code, "", "", length, 0.0);
      return Payload{std::move(head), std::move(prepared.in_place), std::move(tail)};
    }
  }
  if (config_.identical_results && in.codecs[k] != pb::NONE && has_delta) {
    // The average itself, encoded as every sender gets it (settle_own_part decodes the
    // same bytes for this reducer's own copy).
    auto average = reducer_->average(k);
    if (!average) return average.error();
    auto msg = encode_part_message(pb::AVERAGED_VALUES, "", "", average->data(), length, in.codecs[k], 0.0);
    if (!msg) return msg.error();
    return whole(std::move(*msg));
  }
  if (in.codecs[k] != pb::NONE) {
    std::vector<float> delta(length, 0.0f);
    if (has_delta && !reducer_->delta_into(in.sender, k, 0, length, delta.data())) std::fill(delta.begin(), delta.end(), 0.0f);
    auto msg = encode_part_message(pb::AVERAGED_PART, "", "", delta.data(), length, in.codecs[k], 0.0);
    if (!msg) return msg.error();
    return whole(std::move(*msg));
  }
  // Uncompressed: the delta is computed piece by piece straight into the message.
  NonePartWriter writer(pb::AVERAGED_PART, "", "", length, 0.0);
  float piece[k_answer_chunk];
  for (std::size_t begin = 0; begin < length; begin += k_answer_chunk) {
    const std::size_t n = std::min(k_answer_chunk, length - begin);
    if (!has_delta || !reducer_->delta_into(in.sender, k, begin, n, piece)) std::fill(piece, piece + n, 0.0f);
    writer.append(piece, n);
  }
  return whole(writer.finish());
}

void AllReduceRunner::release_answered_parts() {
  // A part is freed once every open stream that sent it got its answer. The own copy
  // needs nothing more: the reducer wrote its average (in place) or its delta (through
  // its sink) when it averaged the part; a part without an average keeps the local values.
  std::size_t limit = reducer_->num_complete();
  for (const auto& [request, in] : incoming_) {
    if (in.open) limit = std::min(limit, in.replied);
  }
  for (; released_ < limit; ++released_) {
    if (config_.identical_results) settle_own_part(released_);
    (void)reducer_->release(released_);
  }
}

void AllReduceRunner::settle_own_part(std::size_t k) {
  const Part& part = partition_.parts[partition_.parts_by_peer[config_.self][k]];
  const pb::CompressionType codec = codec_of(part);
  if (codec == pb::NONE || !is_sender(config_.self) || reducer_->state(k) != PartState::averaged) return;
  const auto length = static_cast<std::size_t>(part.length);
  float* own = (*tensors_)[part.tensor_index].data() + part.offset;  // holds the average (in place)
  auto bytes = encode_part_message(pb::AVERAGED_VALUES, "", "", own, length, codec, 0.0);
  if (!bytes) return;  // no answer could be encoded either: the exact average stays
  std::string_view floats;
  auto decoded = read_part_message(*bytes, floats);
  if (decoded && decoded->values.size() == length) std::copy(decoded->values.begin(), decoded->values.end(), own);
}

std::vector<ReduceJob> AllReduceRunner::take_reduce_jobs() {
  if (!reducer_ || finished_) return {};
  auto jobs = reducer_->take_jobs();
  for (ReduceJob& job : jobs) job.id += config_.id_base;
  return jobs;
}

Effects AllReduceRunner::on_reduced(TimePoint now, std::uint64_t job, Result<ReducedPart> result) {
  (void)now;
  Effects fx;
  if (finished_ || !reducer_ || job < config_.id_base) return fx;
  // A stale or unknown id changes nothing; a malformed result fails its part like an error.
  auto finished = reducer_->finish_job(static_cast<std::size_t>(job - config_.id_base), std::move(result));
  if (!finished && finished.error().code == errc::not_found) return fx;
  flush_answers(fx);
  maybe_finish(fx);
  return fx;
}

}  // namespace apiary::core::averaging
