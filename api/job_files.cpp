#include "api/job_files.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/strategy/strategy_io.hpp"

namespace apiary {

namespace cps = core::ps;
namespace cs = core::strategy;

Result<std::string> read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(errc::not_found, "cannot open the {} file {}; check the path", what, path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Result<pb::autodist::Strategy> load_strategy(const std::string& path, bool text) {
  auto bytes = read_file(path, "strategy");
  if (!bytes) return bytes.error();
  return cs::parse_strategy(*bytes, text ? cs::StrategyFormat::text : cs::StrategyFormat::binary, path);
}

Result<cs::ResourceSpec> load_resource_spec(const std::string& path) {
  auto text = read_file(path, "resource spec");
  if (!text) return text.error();
  return cs::parse_resource_spec(*text, path);
}

Status save_strategy(pb::autodist::Strategy& strategy, const std::string& path, bool text) {
  std::error_code ec;
  const std::string absolute = std::filesystem::absolute(path, ec).string();
  auto bytes = cs::serialize_strategy(strategy, ec ? path : absolute,
                                      text ? cs::StrategyFormat::text : cs::StrategyFormat::binary);
  if (!bytes) return bytes.error();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  out.close();
  if (!out) return make_error(errc::io, "cannot write {}; check the directory and free space", path);
  return ok_status();
}

Result<std::shared_ptr<const cps::Checkpoint>> read_checkpoint(const std::string& path,
                                                               const std::vector<cps::VariablePlan>& variables) {
  auto bytes = read_file(path, "checkpoint");
  if (!bytes) return bytes.error();
  auto checkpoint = cps::decode_checkpoint(*bytes);
  if (!checkpoint) return make_error(checkpoint.error().code, "--restore {}: {}", path, checkpoint.error().message);
  if (auto fits = cps::check_checkpoint(*checkpoint, variables); !fits) {
    return make_error(fits.error().code, "--restore {}: {}", path, fits.error().message);
  }
  return std::make_shared<const cps::Checkpoint>(std::move(*checkpoint));
}

Status save_checkpoint(const std::string& path, std::int64_t step, const std::vector<cps::VariablePlan>& variables,
                       const std::map<std::string, std::vector<float>>& params, cps::OptimizerKind kind,
                       const std::map<std::string, cps::Optimizer::State>& states) {
  auto bytes = cps::encode_checkpoint(step, variables, params, kind, states);
  if (!bytes) return bytes.error();
  const std::string temporary = path + ".partial";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out || !out.write(bytes->data(), static_cast<std::streamsize>(bytes->size())) || !out.flush()) {
      std::remove(temporary.c_str());
      return make_error(errc::io, "--save: cannot write {}; is its directory there and writable?", temporary);
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    return make_error(errc::io, "--save: cannot rename {} to {}", temporary, path);
  }
  return ok_status();
}

std::string checkpoint_path(const std::string& pattern, std::int64_t step) {
  std::string path = pattern;
  const std::string mark = "{step}";
  for (auto at = path.find(mark); at != std::string::npos; at = path.find(mark, at)) {
    path.replace(at, mark.size(), std::to_string(step));
  }
  return path;
}

bool restores_optimizer(const cps::Checkpoint& checkpoint, cps::OptimizerKind kind) {
  return checkpoint.optimizer == cps::optimizer_name(kind);
}

}  // namespace apiary
