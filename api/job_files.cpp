#include "api/job_files.hpp"

#include <cctype>
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

Result<std::optional<std::string>> latest_checkpoint(const std::string& pattern) {
  namespace fs = std::filesystem;
  const std::string mark = "{step}";
  const fs::path path(pattern);
  const std::string name = path.filename().string();
  if (path.parent_path().string().find(mark) != std::string::npos) {
    return make_error(errc::invalid_argument, "--save {}: expected {} in the file's name only, not in its folder's",
                      pattern, mark);
  }
  std::error_code ec;
  if (name.find(mark) == std::string::npos) {
    if (fs::is_regular_file(path, ec)) return std::optional<std::string>(pattern);
    return std::optional<std::string>();
  }
  const fs::path folder = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const std::string prefix = name.substr(0, name.find(mark));
  std::optional<std::int64_t> best;
  fs::directory_iterator it(folder, ec);
  if (ec) {
    if (!fs::exists(folder)) return std::optional<std::string>();
    return make_error(errc::io, "--save {}: cannot read the folder {}: {}", pattern, folder.string(), ec.message());
  }
  for (const auto& entry : it) {
    const std::string file = entry.path().filename().string();
    if (file.size() <= prefix.size() || file.compare(0, prefix.size(), prefix) != 0) continue;
    std::size_t digits = prefix.size();
    while (digits < file.size() && digits - prefix.size() < 18 && std::isdigit(static_cast<unsigned char>(file[digits]))) {
      ++digits;
    }
    if (digits == prefix.size()) continue;
    const std::int64_t step = std::stoll(file.substr(prefix.size(), digits - prefix.size()));
    // The whole name must be the pattern's for that step (a file being written is not).
    if (fs::path(checkpoint_path(pattern, step)).filename().string() != file || !entry.is_regular_file(ec)) continue;
    if (!best || step > *best) best = step;
  }
  if (!best) return std::optional<std::string>();
  return std::optional<std::string>(checkpoint_path(pattern, *best));
}

bool restores_optimizer(const cps::Checkpoint& checkpoint, cps::OptimizerKind kind) {
  return checkpoint.optimizer == cps::optimizer_name(kind);
}

}  // namespace apiary
