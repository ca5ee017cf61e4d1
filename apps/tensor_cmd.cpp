// `apiary tensor encode|decode`: trade tensors with other tools as raw little-endian
// values and serialized hivemind `Tensor` messages (runtime.proto).
#include <cctype>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "apps/commands.hpp"
#include "messages/tensor/codec.hpp"

namespace apiary::apps {
namespace {

constexpr const char* codec_names = "NONE, FLOAT16, MEANSTD_16BIT, QUANTILE_8BIT, UNIFORM_8BIT, BLOCKWISE_8BIT";

struct EncodeArgs {
  std::string codec = "NONE";
  std::string dtype = "float32";
  std::string shape;
  std::string in;
  std::string out;
  bool raw_bfloat16 = false;
};

struct DecodeArgs {
  std::string in;
  std::string out;
};

bool read_file(const std::string& path, std::string& bytes, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "apiary tensor: cannot open %s %s; check the path and permissions\n", what, path.c_str());
    return false;
  }
  bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) {
    std::fprintf(stderr, "apiary tensor: reading %s %s failed\n", what, path.c_str());
    return false;
  }
  return true;
}

bool write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "apiary tensor: cannot write %s; check the directory and free space\n", path.c_str());
    return false;
  }
  return true;
}

std::string shape_arg(const messages::Shape& shape) {
  std::string out;
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i > 0 ? "," : "") + std::to_string(shape[i]);
  return out;
}

int run_encode(const EncodeArgs& a) {
  std::string upper = a.codec;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  pb::CompressionType codec{};
  if (!pb::CompressionType_Parse(upper, &codec)) {
    std::fprintf(stderr, "apiary tensor encode: unknown codec \"%s\"; expected one of %s\n", a.codec.c_str(), codec_names);
    return 2;
  }
  auto type = messages::parse_dtype(a.dtype);
  if (!type) {
    std::fprintf(stderr, "apiary tensor encode: --dtype: %s\n", type.error().what().c_str());
    return 2;
  }
  auto shape = messages::parse_shape(a.shape);
  if (!shape) {
    std::fprintf(stderr, "apiary tensor encode: --shape \"%s\" is not a list of extents; expected e.g. 128,64 (or \"\" for a scalar)\n", a.shape.c_str());
    return 2;
  }
  std::string raw;
  if (!read_file(a.in, raw, "input")) return 1;
  auto tensor = messages::Tensor::copy_of(*type, *shape, raw.data(), raw.size());
  if (!tensor) {
    std::fprintf(stderr, "apiary tensor encode: %s has %zu bytes, which does not fit --dtype %s --shape %s: %s\n",
                 a.in.c_str(), raw.size(), a.dtype.c_str(), a.shape.c_str(), tensor.error().what().c_str());
    return 1;
  }
  messages::EncodeOptions options;
  options.legacy_bfloat16 = !a.raw_bfloat16;
  auto message = messages::encode(*tensor, codec, options);
  if (!message) {
    std::fprintf(stderr, "apiary tensor encode: %s\n", message.error().what().c_str());
    return 1;
  }
  std::string bytes;
  if (!message->SerializeToString(&bytes)) {
    std::fprintf(stderr, "apiary tensor encode: serializing the Tensor message failed\n");
    return 1;
  }
  if (!write_file(a.out, bytes)) return 1;
  std::printf("dtype=%s shape=%s compression=%s raw_bytes=%zu message_bytes=%zu\n", a.dtype.c_str(),
              shape_arg(*shape).c_str(), messages::compression_name(codec).c_str(), raw.size(), bytes.size());
  return 0;
}

int run_decode(const DecodeArgs& a) {
  std::string bytes;
  if (!read_file(a.in, bytes, "input")) return 1;
  pb::Tensor message;
  if (!message.ParseFromString(bytes)) {
    std::fprintf(stderr, "apiary tensor decode: %s (%zu bytes) is not a serialized Tensor message; expected the output of `apiary tensor encode` or hivemind's serialize_torch_tensor\n",
                 a.in.c_str(), bytes.size());
    return 1;
  }
  auto tensor = messages::decode(message);
  if (!tensor) {
    std::fprintf(stderr, "apiary tensor decode: %s: %s\n", a.in.c_str(), tensor.error().what().c_str());
    return 1;
  }
  if (!write_file(a.out, std::string(tensor->bytes().chars(), tensor->byte_size()))) return 1;
  std::printf("dtype=%s shape=%s compression=%s raw_bytes=%zu\n", std::string(messages::to_string(tensor->type())).c_str(),
              shape_arg(tensor->shape()).c_str(), messages::compression_name(message.compression()).c_str(),
              tensor->byte_size());
  return 0;
}

}  // namespace

Command add_tensor_commands(CLI::App& app) {
  auto* cmd = app.add_subcommand("tensor", "Encode raw little-endian tensors as hivemind Tensor messages, and decode them");
  cmd->require_subcommand(1);
  auto enc = std::make_shared<EncodeArgs>();
  auto* encode = cmd->add_subcommand("encode", "Raw values (IN.raw) -> serialized Tensor message (OUT.pb)");
  encode->add_option("--codec", enc->codec, std::string("Compression: ") + codec_names)->capture_default_str();
  encode->add_option("--dtype", enc->dtype, "Element type: float32, float16, bfloat16, float64, int64, int32, int16, int8, uint8, bool, complex64, complex128")->capture_default_str();
  encode->add_option("--shape", enc->shape, "Extents, comma-separated (e.g. 128,64); empty for a scalar")->required();
  encode->add_flag("--raw-bfloat16", enc->raw_bfloat16, "NONE codec: send bfloat16 as 2 bytes per element instead of hivemind's legacy float32");
  encode->add_option("in", enc->in, "Raw little-endian values, C order")->required();
  encode->add_option("out", enc->out, "Serialized Tensor message to write")->required();
  auto dec = std::make_shared<DecodeArgs>();
  auto* decode = cmd->add_subcommand("decode", "Serialized Tensor message (IN.pb) -> raw values (OUT.raw); prints dtype and shape");
  decode->add_option("in", dec->in, "Serialized Tensor message (complete, not one stream chunk)")->required();
  decode->add_option("out", dec->out, "Raw little-endian values to write, in the message's dtype")->required();
  return [=]() { return encode->parsed() ? run_encode(*enc) : run_decode(*dec); };
}

}  // namespace apiary::apps
