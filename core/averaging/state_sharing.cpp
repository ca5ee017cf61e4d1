// State sharing: the DHT declaration, the donors' order and the serving side's stream.
#include "core/averaging/state_sharing.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

#include "core/dht/msgpack_value.hpp"
#include "core/dht/node.hpp"
#include "messages/tensor/codec.hpp"

namespace apiary::core::averaging {

static_assert(std::is_same_v<SharingDictionary, dht::FoundValue::Dictionary>,
              "SharingDictionary must be what the DHT returns for a dictionary value");

namespace {

// The priority a declared value carries: a number other than NaN; nil (not sharing),
// bool, str and anything else carry none.
std::optional<double> priority_of(const std::string& packed) {
  auto handle = dht::unpack_one(packed);
  if (!handle.ok()) return std::nullopt;
  const msgpack::object& o = handle->get();
  double value = 0;
  switch (o.type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: value = o.via.f64; break;
    case msgpack::type::POSITIVE_INTEGER: value = static_cast<double>(o.via.u64); break;
    case msgpack::type::NEGATIVE_INTEGER: value = static_cast<double>(o.via.i64); break;
    default: return std::nullopt;
  }
  if (std::isnan(value)) return std::nullopt;
  return value;
}

// The PeerID bytes a subkey names: a msgpack bin (hivemind's bytes) or str.
std::optional<PeerIdBytes> peer_of(const std::string& packed) {
  auto handle = dht::unpack_one(packed);
  if (!handle.ok()) return std::nullopt;
  const msgpack::object& o = handle->get();
  if (o.type == msgpack::type::BIN) return PeerIdBytes(o.via.bin.ptr, o.via.bin.size);
  if (o.type == msgpack::type::STR) return PeerIdBytes(o.via.str.ptr, o.via.str.size);
  return std::nullopt;
}

// splitmix64's finalizer over FNV-1a of the bytes, seeded: a fixed, portable mix.
std::uint64_t tie_rank(std::uint64_t seed, const PeerIdBytes& peer) {
  std::uint64_t h = 0xcbf29ce484222325ULL ^ seed;
  for (unsigned char c : peer) h = (h ^ c) * 0x100000001b3ULL;
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

}  // namespace

std::string state_sharing_key(std::string_view prefix) {
  return std::string(prefix) + ".all_averagers";
}

std::string state_sharing_subkey(const PeerIdBytes& peer) { return dht::pack_bin(peer); }

Result<std::string> encode_sharing_priority(std::optional<double> priority) {
  if (!priority) return std::string("\xc0", 1);  // msgpack nil: not sharing
  if (std::isnan(*priority)) {
    return make_error(errc::invalid_argument,
                      "state sharing priority: expected a number, got NaN; declare a finite "
                      "priority (e.g. the local epoch) or none to stop sharing");
  }
  return dht::pack_float(*priority);
}

std::vector<StateDonor> order_state_donors(const SharingDictionary& entries,
                                           const PeerIdBytes& self, dht::DhtTime now,
                                           std::uint64_t tie_seed) {
  std::vector<StateDonor> donors;
  for (const auto& [subkey, entry] : entries) {
    if (entry.expiration_time < now) continue;
    auto peer = peer_of(subkey);
    if (!peer || *peer == self) continue;
    auto priority = priority_of(entry.value);
    if (!priority) continue;
    donors.push_back(StateDonor{std::move(*peer), *priority, entry.expiration_time});
  }
  auto key = [tie_seed](const StateDonor& d) {
    return tie_seed == 0 ? std::uint64_t{0} : tie_rank(tie_seed, d.peer);
  };
  std::sort(donors.begin(), donors.end(), [&](const StateDonor& a, const StateDonor& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    const std::uint64_t ka = key(a), kb = key(b);
    if (ka != kb) return ka < kb;
    return a.peer < b.peer;
  });
  return donors;
}

namespace {

/// The stream's messages, built tensor by tensor: each tensor's chunks, the very first
/// message also carrying the metadata.
class StreamWriter {
 public:
  static Result<StreamWriter> create(const std::string& metadata, std::size_t chunk_size_bytes) {
    if (metadata.empty()) {
      return make_error(errc::invalid_argument,
                        "state stream: expected non-empty metadata, got 0 bytes; pass the "
                        "msgpack of the state's metadata (at least an empty map, 0x80)");
    }
    if (chunk_size_bytes == 0) {
      return make_error(errc::invalid_argument,
                        "state stream: expected chunk_size_bytes > 0, got 0; hivemind uses "
                        "65536 (messages::default_chunk_bytes)");
    }
    return StreamWriter(metadata, chunk_size_bytes);
  }
  void add(const pb::Tensor& encoded) {
    for (pb::Tensor& chunk : messages::split_for_streaming(encoded, chunk_size_)) {
      *data_.mutable_tensor_part() = std::move(chunk);
      out_.push_back(data_.SerializeAsString());
      data_.Clear();
    }
  }
  std::vector<std::string> finish() {
    if (out_.empty()) out_.push_back(data_.SerializeAsString());  // metadata only
    return std::move(out_);
  }

 private:
  StreamWriter(const std::string& metadata, std::size_t chunk_size) : chunk_size_(chunk_size) {
    data_.set_metadata(metadata);
  }
  std::size_t chunk_size_;
  pb::DownloadData data_;
  std::vector<std::string> out_;
};

}  // namespace

Result<std::vector<std::string>> make_state_stream(const std::string& metadata,
                                                   const std::vector<std::vector<float>>& tensors,
                                                   const std::vector<messages::Shape>& shapes,
                                                   pb::CompressionType codec,
                                                   std::size_t chunk_size_bytes) {
  auto writer = StreamWriter::create(metadata, chunk_size_bytes);
  if (!writer) return writer.error();
  if (shapes.size() != tensors.size()) {
    return make_error(errc::invalid_argument,
                      "state stream: expected one shape per tensor, got {} shapes for {} "
                      "tensors; pass shapes aligned with the tensors",
                      shapes.size(), tensors.size());
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    // Check the tensor against its shape, then encode it with the codec.
    auto count = messages::element_count(shapes[i], sizeof(float));
    if (!count) return count.error();
    if (*count != tensors[i].size()) {
      return make_error(errc::invalid_argument,
                        "state stream: tensor {} has {} elements but its shape {} holds {}; "
                        "pass each tensor's flattened values with its shape",
                        i, tensors[i].size(), messages::format_shape(shapes[i]), *count);
    }
    auto tensor = messages::Tensor::copy_of(messages::dtype::float32, shapes[i],
                                            tensors[i].data(), tensors[i].size() * sizeof(float));
    if (!tensor) return tensor.error();
    auto encoded = messages::encode(*tensor, codec);
    if (!encoded) return encoded.error();
    writer->add(*encoded);
  }
  return writer->finish();
}

Result<std::vector<std::string>> make_state_stream(const std::string& metadata,
                                                   const std::vector<pb::Tensor>& encoded,
                                                   std::size_t chunk_size_bytes) {
  auto writer = StreamWriter::create(metadata, chunk_size_bytes);
  if (!writer) return writer.error();
  for (const pb::Tensor& tensor : encoded) writer->add(tensor);
  return writer->finish();
}

Effects serve_state_stream(RequestId request, Result<std::vector<std::string>> stream) {
  Effects fx;
  if (!stream) {
    fx.push_back(Reply{request, stream.error(), true});
    return fx;
  }
  fx.reserve(stream->size() + 1);
  for (std::string& message : *stream) fx.push_back(Reply{request, std::move(message), false});
  fx.push_back(Reply{request, std::string{}, true});
  return fx;
}

}  // namespace apiary::core::averaging
