#include "core/moe/expert_schema.hpp"

#include <utility>

#include <msgpack.hpp>

#include "core/dht/msgpack_value.hpp"

namespace apiary::core::moe {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;
using Object = msgpack::object;

constexpr std::string_view k_torch_prefix = "torch.";

void pack_ext(msgpack::sbuffer& out, std::int8_t code, const msgpack::sbuffer& payload) {
  Packer(out).pack_ext(payload.size(), code).pack_ext_body(payload.data(), static_cast<std::uint32_t>(payload.size()));
}

void pack_str(Packer& p, std::string_view s) {
  p.pack_str(static_cast<std::uint32_t>(s.size()));
  p.pack_str_body(s.data(), static_cast<std::uint32_t>(s.size()));
}

/// One BatchTensorDescriptor as ext 0x51, its fields in hivemind's order.
void pack_descriptor(msgpack::sbuffer& out, const TensorSchema& t) {
  msgpack::sbuffer size;  // the tuple (None, *instance_shape)
  Packer(size).pack_array(static_cast<std::uint32_t>(t.instance_shape.size() + 1)).pack_nil();
  for (std::uint32_t extent : t.instance_shape) Packer(size).pack_uint32(extent);
  msgpack::sbuffer payload;
  Packer p(payload);
  p.pack_map(t.device_type.empty() ? 6 : 8);
  pack_str(p, "size");
  pack_ext(payload, dht::k_ext_tuple, size);
  pack_str(p, "dtype");
  pack_str(p, std::string(k_torch_prefix) + std::string(messages::to_string(t.type)));
  pack_str(p, "layout");
  pack_str(p, "torch.strided");
  pack_str(p, "requires_grad");
  p.pack(t.requires_grad);
  pack_str(p, "pin_memory");
  p.pack(false);
  pack_str(p, "compression");
  p.pack_int(static_cast<int>(t.compression));
  if (!t.device_type.empty()) {
    pack_str(p, "device_type");
    pack_str(p, t.device_type);
    pack_str(p, "device_index");
    p.pack_nil();
  }
  pack_ext(out, k_ext_batch_tensor_descriptor, payload);
}

void pack_descriptor_tuple(msgpack::sbuffer& out, const std::vector<TensorSchema>& tensors) {
  msgpack::sbuffer items;
  Packer(items).pack_array(static_cast<std::uint32_t>(tensors.size()));
  for (const TensorSchema& t : tensors) pack_descriptor(items, t);
  pack_ext(out, dht::k_ext_tuple, items);
}

Error malformed_info(std::string_view detail) {
  return make_error(errc::malformed,
                    "expert info: {}; expected hivemind's get_info msgpack {{forward_schema: (args, kwargs), "
                    "outputs_schema, keyword_names}}",
                    detail);
}

/// The payload of ext `code` in `o`, unpacked (the handle owns its memory).
Result<msgpack::object_handle> ext_payload(const Object& o, std::int8_t code, std::string_view what) {
  if (o.type != msgpack::type::EXT || o.via.ext.type() != code) {
    return malformed_info(fmt::format("{} is not msgpack ext 0x{:02x}", what, code));
  }
  return dht::unpack_one(std::string_view(o.via.ext.data(), o.via.ext.size));
}

/// The value of str key `key` in map `map`, or null.
const Object* field(const Object& map, std::string_view key) {
  for (std::uint32_t i = 0; i < map.via.map.size; ++i) {
    const Object& k = map.via.map.ptr[i].key;
    if (k.type == msgpack::type::STR && std::string_view(k.via.str.ptr, k.via.str.size) == key) {
      return &map.via.map.ptr[i].val;
    }
  }
  return nullptr;
}

std::string_view str_of(const Object& o) { return {o.via.str.ptr, o.via.str.size}; }

Result<TensorSchema> unpack_descriptor(const Object& o) {
  auto payload = ext_payload(o, k_ext_batch_tensor_descriptor, "a tensor descriptor");
  if (!payload) return payload.error();
  const Object& map = payload->get();
  if (map.type != msgpack::type::MAP) return malformed_info("a tensor descriptor's payload is not a map");
  TensorSchema t;
  const Object* size = field(map, "size");
  if (size == nullptr) return malformed_info("a tensor descriptor has no size");
  auto extents = ext_payload(*size, dht::k_ext_tuple, "a descriptor's size");
  if (!extents) return extents.error();
  const Object& dims = extents->get();
  if (dims.type != msgpack::type::ARRAY || dims.via.array.size == 0 || !dims.via.array.ptr[0].is_nil()) {
    return malformed_info("a descriptor's size is not (None, d1, ...)");
  }
  for (std::uint32_t i = 1; i < dims.via.array.size; ++i) {
    const Object& d = dims.via.array.ptr[i];
    if (d.type != msgpack::type::POSITIVE_INTEGER || d.via.u64 > UINT32_MAX) {
      return malformed_info("a descriptor's extent is not an integer in 0 .. 2^32 - 1");
    }
    t.instance_shape.push_back(static_cast<std::uint32_t>(d.via.u64));
  }
  const Object* type = field(map, "dtype");
  if (type == nullptr || type->type != msgpack::type::STR) return malformed_info("a descriptor has no dtype str");
  std::string_view name = str_of(*type);
  if (name.substr(0, k_torch_prefix.size()) == k_torch_prefix) name.remove_prefix(k_torch_prefix.size());
  auto parsed = messages::parse_dtype(name);
  if (!parsed) return parsed.error();
  t.type = *parsed;
  if (const Object* g = field(map, "requires_grad"); g != nullptr && g->type == msgpack::type::BOOLEAN) {
    t.requires_grad = g->via.boolean;
  }
  if (const Object* c = field(map, "compression"); c != nullptr) {
    if (c->type != msgpack::type::POSITIVE_INTEGER || !pb::CompressionType_IsValid(static_cast<int>(c->via.u64))) {
      return malformed_info("a descriptor's compression is not a CompressionType number");
    }
    t.compression = static_cast<pb::CompressionType>(c->via.u64);
  }
  const Object* device = field(map, "device_type");
  t.device_type = device != nullptr && device->type == msgpack::type::STR ? std::string(str_of(*device)) : "";
  return t;
}

Result<std::vector<TensorSchema>> unpack_descriptor_tuple(const Object& o, std::string_view what) {
  auto items = ext_payload(o, dht::k_ext_tuple, what);
  if (!items) return items.error();
  const Object& array = items->get();
  if (array.type != msgpack::type::ARRAY) return malformed_info(fmt::format("{} is not a tuple", what));
  std::vector<TensorSchema> out;
  for (std::uint32_t i = 0; i < array.via.array.size; ++i) {
    auto t = unpack_descriptor(array.via.array.ptr[i]);
    if (!t) return t.error();
    out.push_back(std::move(*t));
  }
  return out;
}

}  // namespace

std::vector<TensorSchema> ExpertSchema::forward_inputs() const {
  std::vector<TensorSchema> out = args;
  for (const auto& entry : kwargs) out.push_back(entry.second);
  return out;
}

std::vector<TensorSchema> ExpertSchema::backward_inputs() const {
  std::vector<TensorSchema> out = forward_inputs();
  out.insert(out.end(), outputs.begin(), outputs.end());
  return out;
}

std::string pack_info(const ExpertSchema& schema) {
  msgpack::sbuffer out;
  Packer p(out);
  p.pack_map(3);
  pack_str(p, "forward_schema");
  msgpack::sbuffer forward;  // (args, kwargs)
  Packer(forward).pack_array(2);
  pack_descriptor_tuple(forward, schema.args);
  Packer(forward).pack_map(static_cast<std::uint32_t>(schema.kwargs.size()));
  for (const auto& [name, t] : schema.kwargs) {
    Packer kp(forward);
    pack_str(kp, name);
    pack_descriptor(forward, t);
  }
  pack_ext(out, dht::k_ext_tuple, forward);
  pack_str(p, "outputs_schema");
  if (schema.single_output && schema.outputs.size() == 1) {
    pack_descriptor(out, schema.outputs.front());
  } else {
    pack_descriptor_tuple(out, schema.outputs);
  }
  pack_str(p, "keyword_names");
  std::vector<std::string> names;
  for (const auto& entry : schema.kwargs) names.push_back(dht::pack_str(entry.first));
  const std::string tuple = dht::pack_tuple(names);
  out.write(tuple.data(), tuple.size());
  return std::string(out.data(), out.size());
}

Result<ExpertSchema> unpack_info(std::string_view packed) {
  auto handle = dht::unpack_one(packed);
  if (!handle) return handle.error();
  const Object& info = handle->get();
  if (info.type != msgpack::type::MAP) return malformed_info("the info is not a map");
  const Object* forward = field(info, "forward_schema");
  const Object* outputs = field(info, "outputs_schema");
  if (forward == nullptr || outputs == nullptr) return malformed_info("forward_schema or outputs_schema is missing");
  auto pair = ext_payload(*forward, dht::k_ext_tuple, "forward_schema");
  if (!pair) return pair.error();
  const Object& parts = pair->get();
  if (parts.type != msgpack::type::ARRAY || parts.via.array.size != 2 ||
      parts.via.array.ptr[1].type != msgpack::type::MAP) {
    return malformed_info("forward_schema is not a tuple (args, kwargs)");
  }
  ExpertSchema schema;
  auto args = unpack_descriptor_tuple(parts.via.array.ptr[0], "forward_schema's args");
  if (!args) return args.error();
  schema.args = std::move(*args);
  const Object& kwargs = parts.via.array.ptr[1];
  for (std::uint32_t i = 0; i < kwargs.via.map.size; ++i) {
    const Object& key = kwargs.via.map.ptr[i].key;
    if (key.type != msgpack::type::STR) return malformed_info("a kwargs name is not a str");
    auto t = unpack_descriptor(kwargs.via.map.ptr[i].val);
    if (!t) return t.error();
    schema.kwargs.emplace(std::string(str_of(key)), std::move(*t));
  }
  schema.single_output =
      outputs->type == msgpack::type::EXT && outputs->via.ext.type() == k_ext_batch_tensor_descriptor;
  if (schema.single_output) {
    auto t = unpack_descriptor(*outputs);
    if (!t) return t.error();
    schema.outputs.push_back(std::move(*t));
  } else {
    auto many = unpack_descriptor_tuple(*outputs, "outputs_schema");
    if (!many) return many.error();
    schema.outputs = std::move(*many);
  }
  return schema;
}

}  // namespace apiary::core::moe
