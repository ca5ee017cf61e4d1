// libFuzzer target: what an expert server and its clients parse from the network, by
// the input's first byte: a streamed request's messages (ExpertRequest chunks, each
// prefixed here by a 2-byte length) joined by RequestJoiner, a streamed response joined
// by join_response, rpc_info's msgpack (unpack_info), a unary ExpertRequest checked
// against an expert's schema, and a C++ expert's saved state. Errors are fine; crashes,
// leaks and undefined behaviour are not.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/moe/batch_rows.hpp"
#include "core/moe/expert_backend.hpp"
#include "core/moe/expert_schema.hpp"
#include "core/moe/stream_chunks.hpp"
#include "messages/tensor/codec.hpp"
#include "runtime.pb.h"
#include "fuzz/quiet_protobuf.hpp"

namespace moe = apiary::core::moe;
using apiary::Buffer;

namespace {

/// The messages of `input`: each a 2-byte little-endian length, then that many bytes.
std::vector<Buffer> messages_of(std::string_view input) {
  std::vector<Buffer> out;
  while (input.size() >= 2) {
    const std::size_t n = static_cast<std::uint8_t>(input[0]) | (static_cast<std::size_t>(
                              static_cast<std::uint8_t>(input[1])) << 8);
    input.remove_prefix(2);
    const std::string_view part = input.substr(0, n);
    out.push_back(Buffer::copy_of(part));
    input.remove_prefix(part.size());
  }
  return out;
}

}  // namespace


extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  constexpr std::size_t k_limit = 1 << 20;  // the joiners' byte limit, kept small here
  switch (data[0] % 5) {
    case 0: {
      moe::RequestJoiner joiner(k_limit);
      bool ok = true;
      for (const Buffer& message : messages_of(input)) ok = ok && joiner.add(message).ok();
      if (ok) (void)joiner.finish();
      break;
    }
    case 1:
      (void)moe::join_response(messages_of(input), k_limit);
      break;
    case 2:
      (void)moe::unpack_info(input);
      break;
    case 3: {
      apiary::pb::ExpertRequest request;
      if (!request.ParseFromArray(input.data(), static_cast<int>(input.size()))) break;
      std::vector<apiary::messages::Tensor> tensors;
      for (const auto& t : request.tensors()) {
        auto decoded = apiary::messages::decode(t);
        if (!decoded.ok()) return 0;
        tensors.push_back(std::move(*decoded));
      }
      moe::FfnConfig config;
      config.hidden_dim = 4;
      for (const char* cls : {"ffn", "det_dropout", "transformer"}) {
        auto expert = moe::make_expert(cls, config);
        if (!expert.ok()) __builtin_trap();
        auto rows = moe::check_batch((*expert)->info().forward_inputs(), tensors, "fuzz");
        if (rows.ok() && *rows <= 64) (void)(*expert)->forward(tensors);
      }
      break;
    }
    default: {
      moe::FfnConfig config;
      config.hidden_dim = 4;
      for (const char* cls : {"ffn", "det_dropout", "transformer"}) {
        auto expert = moe::make_expert(cls, config);
        if (!expert.ok()) __builtin_trap();
        (void)(*expert)->load_state(input);
      }
      break;
    }
  }
  return 0;
}
