#include "apps/ps_checkpoint.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include <fmt/format.h>

#include "apps/commands.hpp"
#include "core/ps/logistic_regression.hpp"

namespace apiary::apps {

namespace cps = core::ps;

std::vector<cps::VariablePlan> model_variables(std::size_t features) {
  std::vector<cps::VariablePlan> out;
  for (const auto& v : cps::logistic_graph_item(features).variables) out.push_back({v.name, v.shape, "", false, {}});
  return out;
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
  std::fputs(fmt::format("checkpoint {} step {}\n", path, step).c_str(), stdout);
  std::fflush(stdout);
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

void note_optimizer_change(const cps::Checkpoint& checkpoint, cps::OptimizerKind kind) {
  if (restores_optimizer(checkpoint, kind)) return;
  std::fputs(fmt::format("restore: the checkpoint's optimizer state is for {}, this job runs {}: its optimizer "
                         "starts afresh\n",
                         checkpoint.optimizer, cps::optimizer_name(kind))
                 .c_str(),
             stdout);
  std::fflush(stdout);
}

}  // namespace apiary::apps
