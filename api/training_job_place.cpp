// `apiary ps` started by a launcher: its role, listen address and peers from the rank
// the launcher gave it and the strategy (api/job_places.hpp).
#include <algorithm>

#include <fmt/format.h>

#include "api/job_files.hpp"
#include "api/training_job.hpp"
#include "core/collective/ar_plan.hpp"

namespace apiary {

Result<std::string> take_place_from_environment(TrainingJobOptions& a, const EnvLookup& env) {
  auto rank = launcher_rank(env);
  if (!rank) return rank.error();
  if (!*rank) {
    return make_error(errc::invalid_argument,
                      "expected --role, --embedded or a launcher's rank in the environment (RANK, "
                      "OMPI_COMM_WORLD_RANK, SLURM_PROCID or PMI_RANK), got none");
  }
  auto port = job_port(env);
  if (!port) return port.error();
  auto strategy = load_strategy(a.strategy, a.text);
  if (!strategy) return strategy.error();
  auto places = job_places(*strategy, true, *port);
  if (!places) return places.error();
  const auto& all = places->places;
  const auto& [r, size, source] = **rank;
  if ((size && static_cast<std::size_t>(*size) != all.size()) || static_cast<std::size_t>(r) >= all.size()) {
    return make_error(errc::invalid_argument,
                      "{}={}{}: the job has {} processes ({} replicas, then one per PS device: {}), so expected ranks "
                      "0..{}{}",
                      source, r, size ? fmt::format(" of {}", *size) : "", all.size(), places->replicas,
                      places->ps_devices.size(), all.size() - 1,
                      places->ps_devices.empty() ? "" : "; `apiary launch --ps-processes` starts the PS processes too");
  }
  const JobPlace& me = all[static_cast<std::size_t>(r)];
  a.role = me.role;
  a.device = me.role == "ps" ? me.device : std::string{};
  a.replica = me.replica;
  a.listen = me.listen();
  a.until_replicas_finish = me.role == "ps";
  // A launcher that starts a PS process again after it went down says so.
  if (const char* resume = env("APIARY_RESUME"); me.role == "ps" && resume != nullptr && std::string(resume) == "1") {
    a.resume = true;
  }
  std::optional<std::string> replica_prefix;
  if (core::collective::uses_allreduce(*strategy)) replica_prefix = places->ps_devices.empty() ? "" : "replica:";
  const auto key = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  std::vector<std::string> given;
  for (const auto& p : a.peers) given.push_back(key(p));
  for (auto& p : places->peers(replica_prefix)) {
    if (std::find(given.begin(), given.end(), key(p)) == given.end()) a.peers.push_back(std::move(p));
  }
  return fmt::format("place rank {} of {} ({}): {} {} at {}\n", r, all.size(), source, me.role, me.device,
                     me.listen());
}

}  // namespace apiary
