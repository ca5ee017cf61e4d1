#include "apps/ps_checkpoint.hpp"

#include <cstdio>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

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
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(errc::not_found, "cannot open the checkpoint file {}; check the path", path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto checkpoint = cps::decode_checkpoint(bytes);
  if (!checkpoint) return make_error(checkpoint.error().code, "--restore {}: {}", path, checkpoint.error().message);
  if (auto fits = cps::check_checkpoint(*checkpoint, variables); !fits) {
    return make_error(fits.error().code, "--restore {}: {}", path, fits.error().message);
  }
  return std::make_shared<const cps::Checkpoint>(std::move(*checkpoint));
}

Status save_checkpoint(const std::string& path, std::int64_t step, const std::vector<cps::VariablePlan>& variables,
                       const std::map<std::string, std::vector<float>>& params) {
  auto bytes = cps::encode_checkpoint(step, variables, params);
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

}  // namespace apiary::apps
