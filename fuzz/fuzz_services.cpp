// libFuzzer target: what the services other than the DHT parse from the network, by the
// input's first byte: a role (fuzz/service_roles.hpp: ping, PS server, PS proxy, PS client,
// the collective group, the averager, state sharing and loading, progress) driven through
// the role contract (fuzz/role_driver.hpp: fuzzed request bodies on each of its handles,
// fuzzed answers and stream messages on its calls, fuzzed DHT answers to its Asks), or
// one of the wire decoders on its own: the all-reduce part messages, the exchange frames
// and spans, the PS messages (the direct dense framing checked against protobuf's
// parse), progress records, gathers, group keys, state donors and state streams. Each
// decoded value that has an encoder must encode and decode again to the same value.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/averaging/allreduce_wire.hpp"
#include "core/averaging/dht_declarations.hpp"
#include "core/averaging/group_key.hpp"
#include "core/collective/exchange_wire.hpp"
#include "core/optim/progress.hpp"
#include "core/proto_scan.hpp"
#include "core/ps/wire.hpp"
#include "fuzz/fuzz_input.hpp"
#include "fuzz/service_roles.hpp"
#include <google/protobuf/stubs/common.h>
#include "fuzz/quiet_protobuf.hpp"

namespace av = apiary::core::averaging;
namespace col = apiary::core::collective;
namespace cps = apiary::core::ps;
using apiary::fuzz::FuzzInput;

namespace {

/// Same bits (NaNs with the same payload equal, 0.0 and -0.0 not).
template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}
bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
/// `back` is `a` encoded and decoded again by a codec that keeps float16 values: equal,
/// any NaN equal to any NaN (a NaN's payload may change), an infinity of `a` clamped to
/// the largest float16 of its sign (the FLOAT16 codecs clamp before rounding). The
/// original comes first.
bool same_values(const std::vector<float>& a, const std::vector<float>& back) {
  if (a.size() != back.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const bool same = a[i] == back[i] || (std::isnan(a[i]) && std::isnan(back[i])) ||
                      (std::isinf(a[i]) && back[i] == std::copysign(65504.0F, a[i]));
    if (!same) return false;
  }
  return true;
}

void fuzz_part_message(std::string_view bytes) {
  auto part = av::decode_part_message(bytes);
  std::string_view floats;
  auto read = av::read_part_message(bytes, floats);
  if (part.ok() != read.ok()) __builtin_trap();
  if (!part.ok()) return;
  // What the fast path reads, protobuf reads too (every field of AveragingData is bytes).
  apiary::pb::AveragingData message;
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) __builtin_trap();
  if (av::part_group_id(bytes) != part->group_id) __builtin_trap();
  if (!floats.empty()) {  // read_part_message left an uncompressed part where it lies
    std::vector<float> viewed(floats.size() / sizeof(float));
    std::memcpy(viewed.data(), floats.data(), viewed.size() * sizeof(float));
    if (floats.size() % sizeof(float) != 0 || !same_floats(viewed, part->values)) __builtin_trap();
  } else if (!same_floats(read->values, part->values)) {
    __builtin_trap();
  }
  // Encoded again with its codec: the same fields; the same values where the codec keeps
  // them exactly (NONE; FLOAT16 of values that came as float16).
  auto again = av::encode_part_message(part->code, part->group_id, part->peer_id, part->values.data(),
                                       part->values.size(), part->compression, part->weight);
  if (!again.ok()) {
    if (part->compression == apiary::pb::NONE) __builtin_trap();
    return;
  }
  auto back = av::decode_part_message(*again);
  if (!back.ok() || back->code != part->code || back->group_id != part->group_id || back->peer_id != part->peer_id ||
      back->compression != part->compression || !same_bits(back->weight, part->weight) ||
      back->values.size() != part->values.size()) {
    __builtin_trap();
  }
  const bool exact = part->compression == apiary::pb::NONE || part->compression == apiary::pb::FLOAT16;
  if (exact && !same_values(part->values, back->values)) __builtin_trap();
}

void fuzz_exchange(FuzzInput& in) {
  if (in.flag()) {
    const std::string_view bytes = in.rest();
    auto frame = col::decode_frame(bytes);
    if (!frame.ok()) return;
    auto back = col::decode_frame(col::encode_frame(*frame));
    if (!back.ok() || back->op != frame->op || back->rank != frame->rank || back->kind != frame->kind ||
        !same_bits(back->weight, frame->weight) || back->fingerprint != frame->fingerprint ||
        back->payload != frame->payload) {
      __builtin_trap();
    }
    return;
  }
  // A span of a small layout: tensor sizes and codecs from the input.
  std::vector<std::size_t> sizes(1 + in.pick(3));
  for (auto& s : sizes) s = in.pick(6);
  std::vector<apiary::pb::CompressionType> codecs;
  for (std::size_t i = 0, n = in.pick(3); i < n; ++i) codecs.push_back(in.flag() ? apiary::pb::FLOAT16 : apiary::pb::NONE);
  auto layout = col::make_span_layout(sizes, codecs);
  if (!layout.ok()) return;
  const std::size_t lo = layout->total == 0 ? 0 : in.pick(layout->total + 1);
  const std::size_t hi = lo + (layout->total == lo ? 0 : in.pick(layout->total - lo + 1));
  const std::string_view bytes = in.rest();
  std::vector<float> values(hi - lo);
  if (!col::decode_span(*layout, lo, hi, bytes, values.data()).ok()) return;
  std::string again;
  col::encode_span(*layout, lo, hi, values.data(), again);
  std::vector<float> back(hi - lo);
  if (!col::decode_span(*layout, lo, hi, again, back.data()).ok() || !same_values(values, back)) __builtin_trap();
}

/// A push two ways: the direct dense scan must agree with protobuf's parse.
void fuzz_ps_push(std::string_view bytes) {
  cps::DensePushView view;
  if (!cps::scan_dense_push(bytes, view)) return;
  apiary::pb::PsPushRequest message;
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    // protobuf refuses a shard name that is not UTF-8; the scan leaves names to the shard lookup.
    if (google::protobuf::internal::IsStructurallyValidUTF8(view.shard.data(), static_cast<int>(view.shard.size()))) {
      __builtin_trap();
    }
    return;
  }
  const cps::Push push = cps::from_pb(message);
  const auto* dense = std::get_if<std::vector<float>>(&push.gradient);
  std::vector<float> scanned(view.gradient.count);
  if (view.gradient.count > 0) std::memcpy(scanned.data(), view.gradient.bytes, view.gradient.count * sizeof(float));
  if (message.shard() != view.shard || push.replica != view.replica || push.step != view.step ||
      !same_bits(push.samples, view.samples) || !same_bits(push.learning_rate, view.learning_rate) ||
      (dense != nullptr ? !same_floats(*dense, scanned) : !scanned.empty())) {
    __builtin_trap();
  }
  const std::string shard(view.shard);
  std::string again(cps::dense_push_size(shard, view.replica, view.step, view.samples, scanned.size(),
                                         view.learning_rate),
                    '\0');
  cps::encode_dense_push(again.data(), shard, view.replica, view.step, view.samples, scanned.data(), scanned.size(),
                         view.learning_rate);
  cps::DensePushView back;
  if (!cps::scan_dense_push(again, back) || back.shard != view.shard || back.replica != view.replica ||
      back.step != view.step || back.gradient.count != view.gradient.count) {
    __builtin_trap();
  }
}

/// Whether every shard name (field 1) in a message's top-level fields is UTF-8.
bool shard_names_utf8(std::string_view bytes) {
  apiary::core::ProtoReader r{bytes.data(), bytes.data() + bytes.size()};
  while (r.p < r.end) {
    std::uint32_t number = 0, wire = 0;
    std::string_view field;
    std::uint64_t value = 0;
    if (!r.field(number, wire, field, value)) return true;
    if (number == 1 && wire == apiary::core::k_wire_len &&
        !google::protobuf::internal::IsStructurallyValidUTF8(field.data(), static_cast<int>(field.size()))) {
      return false;
    }
  }
  return true;
}

/// A pull response two ways, and encoded again.
void fuzz_ps_pull(FuzzInput& in) {
  const std::size_t landed = in.pick(4) * 4;
  const std::string_view bytes = in.rest();
  cps::PullReply landed_reply;
  (void)cps::decode_landed_pull_response(bytes, landed, landed_reply);
  auto reply = cps::decode_pull_response(bytes);
  apiary::pb::PsPullResponse message;
  const bool parsed = message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  // Every encoding protobuf reads is read, and nothing else (but a shard name that is not
  // UTF-8, which protobuf refuses and the decoder does not look at).
  if (parsed && !reply.ok()) __builtin_trap();
  if (!parsed && reply.ok() && shard_names_utf8(bytes)) __builtin_trap();
  if (!parsed || !reply.ok()) return;
  const cps::PullReply from_protobuf = cps::from_pb(message);
  if (from_protobuf.replica != reply->replica || from_protobuf.step != reply->step ||
      from_protobuf.version != reply->version || !same_floats(from_protobuf.values, reply->values)) {
    __builtin_trap();
  }
  cps::PullReply reused;
  reused.values.resize(reply->values.size());
  if (!cps::decode_pull_response_into(bytes, reused).ok() || !same_floats(reused.values, reply->values)) {
    __builtin_trap();
  }
  auto back = cps::decode_pull_response(cps::encode_pull_response(message.shard(), reply->replica, reply->step,
                                                                  reply->version, reply->values.data(),
                                                                  reply->values.size()));
  if (!back.ok() || back->step != reply->step || back->version != reply->version ||
      !same_floats(back->values, reply->values)) {
    __builtin_trap();
  }
}

void fuzz_progress_record(std::string_view bytes) {
  auto progress = apiary::core::optim::unpack_progress(bytes);
  if (!progress.ok()) return;
  auto back = apiary::core::optim::unpack_progress(apiary::core::optim::pack_progress(*progress));
  if (!back.ok() || back->peer_id != progress->peer_id || back->epoch != progress->epoch ||
      back->samples_accumulated != progress->samples_accumulated ||
      !same_bits(back->samples_per_second, progress->samples_per_second) || !same_bits(back->time, progress->time) ||
      back->client_mode != progress->client_mode) {
    __builtin_trap();
  }
}

void fuzz_gather(std::string_view bytes) {
  auto gather = av::unwrap_gather(std::string(bytes));
  if (!gather.ok()) return;
  auto back = av::unwrap_gather(av::wrap_gather(gather->bandwidth, gather->mode, gather->user));
  if (!back.ok() || back->bandwidth.has_value() != gather->bandwidth.has_value() ||
      (gather->bandwidth && !same_bits(*back->bandwidth, *gather->bandwidth)) || back->mode != gather->mode ||
      back->user != gather->user) {
    __builtin_trap();
  }
}

void fuzz_group_key(std::string_view text) {
  auto key = av::parse_group_key(text);
  if (key.ok() != av::is_valid_group_key(text)) __builtin_trap();
  if (!key.ok()) return;
  auto made = av::make_group_key(key->prefix, key->bits);
  if (!made.ok() || *made != text || key->str() != text) __builtin_trap();
}

/// The DHT dictionaries the averaging roles read: state donors and declared averagers.
void fuzz_declarations(FuzzInput& in) {
  auto answer = apiary::fuzz::dht_answer(apiary::core::Ask{}, in);
  const auto& found = answer->as<apiary::core::dht::OpResult>()->found;
  (void)av::declared_averagers(found[0], apiary::fuzz::k_services_dht_now);
  if (found[0]) {
    if (const auto* d = std::get_if<apiary::core::dht::FoundValue::Dictionary>(&found[0]->value)) {
      (void)av::order_state_donors(*d, "self", apiary::fuzz::k_services_dht_now, in.number(1));
    }
  }
}

/// A state stream of up to 8 messages, read as each kind of loader reads it.
void fuzz_state_stream(FuzzInput& in) {
  std::optional<std::vector<apiary::messages::Shape>> shapes;
  if (in.flag()) shapes = std::vector<apiary::messages::Shape>{{2, 2}, {3}};
  const std::uint64_t max_bytes = in.flag() ? 64 : 0;
  av::StateStreamReader reader(shapes, max_bytes, in.flag());
  for (int i = 0; i < 8 && !in.empty(); ++i) {
    if (!reader.push(in.bytes()).ok()) return;
  }
  (void)reader.finish();
}

void fuzz_decoders(FuzzInput& in) {
  switch (in.pick(9)) {
    case 0: fuzz_part_message(in.rest()); break;
    case 1: fuzz_exchange(in); break;
    case 2: fuzz_ps_push(in.rest()); break;
    case 3: fuzz_ps_pull(in); break;
    case 4: fuzz_progress_record(in.rest()); break;
    case 5: fuzz_gather(in.rest()); break;
    case 6: fuzz_group_key(in.rest()); break;
    case 7: fuzz_declarations(in); break;
    default: fuzz_state_stream(in); break;
  }
}

}  // namespace


extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  const std::size_t kind = in.pick(static_cast<std::size_t>(apiary::fuzz::Service::count) + 1);
  if (kind == static_cast<std::size_t>(apiary::fuzz::Service::count)) {
    fuzz_decoders(in);
    return 0;
  }
  auto driven = apiary::fuzz::make_service(static_cast<apiary::fuzz::Service>(kind));
  apiary::fuzz::RoleDriver driver(*driven.role, in);
  driver.answer_ask = driven.answer_ask;
  driver.make_call = driven.make_call;
  driver.run();
  return 0;
}
