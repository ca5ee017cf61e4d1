// libFuzzer target: the readers of apiary's files and of the small text forms they hold,
// by the input's first byte: strategies (binary and text protobuf), graph items (JSON),
// resource specs (YAML), the JSON and YAML readers themselves, identity key files and
// RSA private keys (DER), PS checkpoints, and names read from files and flags (device
// names, expert uids and patterns, shapes, dtypes, log levels). A strategy, key or
// checkpoint that reads must write and read again to the same thing.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "core/moe/expert_uid.hpp"
#include "core/ps/checkpoint.hpp"
#include "core/strategy/graph_item.hpp"
#include "core/strategy/json_reader.hpp"
#include "core/strategy/resource_spec.hpp"
#include "core/strategy/slurm.hpp"
#include "core/strategy/strategy_io.hpp"
#include "core/strategy/yaml_reader.hpp"
#include "fuzz/fuzz_input.hpp"
#include "messages/identity/key_file.hpp"
#include "messages/identity/rsa.hpp"
#include "messages/log/log.hpp"
#include "messages/tensor/dtype.hpp"
#include "messages/tensor/tensor.hpp"
#include <google/protobuf/util/message_differencer.h>
#include "fuzz/quiet_protobuf.hpp"

namespace cs = apiary::core::strategy;
namespace cps = apiary::core::ps;
using apiary::fuzz::FuzzInput;

namespace {

void fuzz_strategy(FuzzInput& in) {
  const auto format = in.flag() ? cs::StrategyFormat::text : cs::StrategyFormat::binary;
  auto strategy = cs::parse_strategy(in.rest(), format, "fuzz");
  if (!strategy.ok()) return;
  (void)cs::to_text(*strategy);
  auto bytes = cs::serialize_strategy(*strategy, "/tmp/autodist/strategies/fuzz", format);
  if (!bytes.ok()) __builtin_trap();
  auto back = cs::parse_strategy(*bytes, format, "fuzz again");
  if (!back.ok() || !google::protobuf::util::MessageDifferencer::Equals(*back, *strategy)) __builtin_trap();
}

void fuzz_documents(FuzzInput& in) {
  const std::size_t which = in.pick(4);
  const std::string_view text = in.rest();
  switch (which) {
    case 0:
      if (auto doc = cs::parse_json(text, "fuzz.json"); doc.ok()) (void)cs::describe(*doc);
      break;
    case 1:
      if (auto doc = cs::parse_yaml(text, "fuzz.yml"); doc.ok()) (void)cs::describe(*doc);
      break;
    case 2:
      if (auto item = cs::parse_graph_item_json(text, "graph_item.json"); item.ok()) {
        if (!cs::check_graph_item(*item).ok()) __builtin_trap();  // a parsed item passed the checks
        (void)cs::to_pb(*item);
      }
      break;
    default:
      if (auto spec = cs::parse_resource_spec(text, "resource_spec.yml"); spec.ok()) (void)spec->replicas();
      break;
  }
}

/// A path of this process's own for key files, removed when it exits.
const std::string& key_path() {
  static const std::string path = "/tmp/apiary-fuzz-key-" + std::to_string(::getpid());
  static const bool cleanup = std::atexit([] { std::remove(key_path().c_str()); }) == 0;
  (void)cleanup;
  return path;
}

/// An RSA private key's DER bytes (the keys of hivemind-style record owners).
void fuzz_rsa_der(std::string_view der) {
  auto key = apiary::messages::RsaPrivateKey::from_der(der);
  if (!key.ok()) return;
  auto again = key->to_der();
  if (!again.ok()) __builtin_trap();
  auto back = apiary::messages::RsaPrivateKey::from_der(*again);
  if (!back.ok() || back->public_key().openssh() != key->public_key().openssh()) __builtin_trap();
}

void fuzz_key_file(std::string_view bytes) {
  const std::string& path = key_path();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return;
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  std::fclose(f);
  if (!written) return;
  auto key = apiary::messages::load_key_file(path);
  if (!key.ok()) return;
  if (!apiary::messages::save_key_file(path, *key).ok()) __builtin_trap();
  auto back = apiary::messages::load_key_file(path);
  if (!back.ok() || back->seed() != key->seed() || back->public_key().bytes() != key->public_key().bytes()) {
    __builtin_trap();
  }
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void fuzz_checkpoint(std::string_view bytes) {
  auto checkpoint = cps::decode_checkpoint(bytes);
  if (!checkpoint.ok()) return;
  std::vector<cps::VariablePlan> variables;
  for (const auto& [name, shape] : checkpoint->shapes) {
    cps::VariablePlan v;
    v.name = name;
    v.shape = shape;
    variables.push_back(v);
  }
  if (!cps::check_checkpoint(*checkpoint, variables).ok()) __builtin_trap();
  cps::OptimizerKind kind = cps::OptimizerKind::sgd;
  if (checkpoint->optimizer == "momentum") kind = cps::OptimizerKind::momentum;
  if (checkpoint->optimizer == "adam") kind = cps::OptimizerKind::adam;
  auto again = cps::encode_checkpoint(checkpoint->step, variables, checkpoint->values, kind, checkpoint->states);
  if (!again.ok()) __builtin_trap();
  auto back = cps::decode_checkpoint(*again);
  if (!back.ok() || back->step != checkpoint->step || back->optimizer != checkpoint->optimizer ||
      back->shapes != checkpoint->shapes || back->values.size() != checkpoint->values.size() ||
      back->states.size() != checkpoint->states.size()) {
    __builtin_trap();
  }
  for (const auto& [name, values] : checkpoint->values) {
    const auto& state = checkpoint->states.at(name);
    const auto& state_back = back->states.at(name);
    if (!same_floats(back->values.at(name), values) || state_back.updates != state.updates ||
        !same_floats(state_back.m, state.m) || !same_floats(state_back.v, state.v)) {
      __builtin_trap();
    }
  }
}

void fuzz_names(FuzzInput& in) {
  const std::size_t which = in.pick(6);
  const std::string_view text = in.rest();
  switch (which) {
    case 0:
      (void)cs::parse_device_name(text);
      (void)cs::is_loopback_address(text);
      break;
    case 1:
      (void)apiary::core::moe::parse_uid(text);
      break;
    case 2:
      (void)apiary::core::moe::UidPattern::parse(text);
      break;
    case 3:
      if (auto shape = apiary::messages::parse_shape(text); shape.ok()) {
        (void)apiary::messages::format_shape(*shape);
        std::string extents;  // the shape written back as parse_shape reads it
        for (std::size_t i = 0; i < shape->size(); ++i) extents += (i > 0 ? "," : "") + std::to_string((*shape)[i]);
        auto back = apiary::messages::parse_shape(extents);
        if (!back.ok() || *back != *shape) __builtin_trap();
      }
      break;
    case 4:
      (void)apiary::messages::parse_dtype(text);
      break;
    default:
      (void)apiary::log::parse_level(text);
      // Slurm's host lists and task counts (apiary strategy resource-spec --from-slurm).
      (void)cs::expand_hostlist(text);
      (void)cs::expand_tasks_per_node(text);
      break;
  }
}

}  // namespace


extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  switch (in.pick(5)) {
    case 0: fuzz_strategy(in); break;
    case 1: fuzz_documents(in); break;
    case 2:
      if (in.flag()) {
        fuzz_rsa_der(in.rest());
      } else {
        fuzz_key_file(in.rest());
      }
      break;
    case 3: fuzz_checkpoint(in.rest()); break;
    default: fuzz_names(in); break;
  }
  return 0;
}
