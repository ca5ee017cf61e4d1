#include "api/expert_files.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "api/dht.hpp"
#include "api/expert_server.hpp"
#include "core/moe/dht_layout.hpp"
#include "core/moe/expert_uid.hpp"
#include "core/rng.hpp"

namespace apiary {
namespace {

namespace fs = std::filesystem;
namespace moe = core::moe;

/// hivemind's nop_delay: a nop whose every batch takes `delay`.
class DelayedNop final : public moe::ExpertBackend {
 public:
  DelayedNop(std::uint32_t hidden_dim, std::chrono::milliseconds delay) : nop_(hidden_dim), delay_(delay) {}
  [[nodiscard]] const moe::ExpertSchema& info() const override { return nop_.info(); }
  [[nodiscard]] Result<std::vector<moe::Tensor>> forward(const std::vector<moe::Tensor>& inputs) override {
    std::this_thread::sleep_for(delay_);
    return nop_.forward(inputs);
  }
  [[nodiscard]] Result<std::vector<moe::Tensor>> backward(const std::vector<moe::Tensor>& inputs,
                                                          const std::vector<moe::Tensor>& grad_outputs) override {
    std::this_thread::sleep_for(delay_);
    return nop_.backward(inputs, grad_outputs);
  }

 private:
  moe::NopExpert nop_;
  std::chrono::milliseconds delay_;
};

/// How long a get of candidate uids may take before they count as free.
constexpr auto k_taken_check = std::chrono::seconds(10);

/// The candidates of `candidates` that `dht` finds declared (errors and silence: none).
std::set<std::string> taken_uids(Dht& dht, const std::vector<std::string>& candidates) {
  std::vector<DhtKey> keys;
  keys.reserve(candidates.size());
  for (const auto& uid : candidates) keys.push_back(DhtKey::str(uid));
  auto got = dht.get_many(keys);
  std::set<std::string> taken;
  if (got.wait_for(k_taken_check) != std::future_status::ready) return taken;
  auto found = got.get();
  if (!found) return taken;
  for (std::size_t i = 0; i < candidates.size() && i < found->size(); ++i) {
    if (moe::expert_of(candidates[i], (*found)[i])) taken.insert(candidates[i]);
  }
  return taken;
}

}  // namespace

Result<std::vector<std::string>> expert_uids_of(const ExpertServerOptions& options, Dht* dht) {
  if (!options.expert_uids.empty()) {
    if (!options.expert_pattern.empty()) {
      return make_error(errc::invalid_argument, "give expert uids or --expert-pattern '{}', not both",
                        options.expert_pattern);
    }
    if (options.num_experts != 0 && options.num_experts != options.expert_uids.size()) {
      return make_error(errc::invalid_argument, "--num-experts {} does not match the {} expert uids given",
                        options.num_experts, options.expert_uids.size());
    }
    std::set<std::string> seen;
    for (const auto& uid : options.expert_uids) {
      if (!moe::is_valid_uid(uid)) {
        return make_error(errc::invalid_argument,
                          "expert uid '{}' is not a uid: a prefix without dots, then numeric coordinates "
                          "('ffn.3.14')",
                          uid);
      }
      if (!seen.insert(uid).second) return make_error(errc::invalid_argument, "expert uid '{}' is given twice", uid);
    }
    return options.expert_uids;
  }
  if (options.num_experts == 0) {
    return make_error(errc::invalid_argument, "--num-experts must be at least 1 when no expert uids are given");
  }
  std::optional<moe::UidPattern> pattern;
  if (!options.expert_pattern.empty()) {
    auto parsed = moe::UidPattern::parse(options.expert_pattern);
    if (!parsed) return make_error(errc::invalid_argument, "--expert-pattern: {}", parsed.error().message);
    pattern = std::move(*parsed);
  }
  moe::UidSampler sampler(pattern, options.num_experts);
  core::Rng rng(options.seed);
  while (!sampler.done()) {
    auto candidates = sampler.next_candidates(rng);
    if (candidates.empty()) break;
    sampler.accept(candidates, dht != nullptr ? taken_uids(*dht, candidates) : std::set<std::string>{});
  }
  if (sampler.found().size() < options.num_experts) {
    return make_error(errc::invalid_argument,
                      "--expert-pattern '{}' gave {} free uids of the {} wanted (--num-experts); widen the pattern "
                      "or ask for fewer",
                      options.expert_pattern, sampler.found().size(), options.num_experts);
  }
  return sampler.found();
}

Result<std::unique_ptr<moe::ExpertBackend>> make_builtin_expert(const std::string& expert_cls,
                                                                const moe::FfnConfig& config,
                                                                std::chrono::milliseconds delay) {
  if (expert_cls == "nop_delay") {
    return std::unique_ptr<moe::ExpertBackend>(std::make_unique<DelayedNop>(config.hidden_dim, delay));
  }
  auto expert = moe::make_expert(expert_cls, config);
  if (!expert && expert.error().code == errc::not_found) {
    return make_error(errc::not_found, "{}; and 'nop_delay'", expert.error().message);
  }
  return expert;
}

std::string checkpoint_path(const std::string& dir, const std::string& uid) {
  return (fs::path(dir) / uid / "checkpoint_last.bin").string();
}

Status load_checkpoint(const std::string& dir, const std::string& uid, moe::ExpertBackend& expert) {
  const std::string path = checkpoint_path(dir, uid);
  std::error_code ec;
  if (!fs::exists(path, ec)) return ok_status();
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in.good() && !in.eof()) return make_error(errc::io, "cannot read checkpoint {}", path);
  if (Status loaded = expert.load_state(bytes.str()); !loaded) {
    return make_error(loaded.error().code, "checkpoint {} of expert '{}': {}", path, uid, loaded.error().message);
  }
  return ok_status();
}

Status save_checkpoints(const std::string& dir, const std::map<std::string, std::string>& states) {
  Status first = ok_status();
  for (const auto& [uid, state] : states) {
    const fs::path path = checkpoint_path(dir, uid);
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    const fs::path partial = path.parent_path() / fmt::format(".checkpoint_last.bin.{}.partial", ::getpid());
    bool written = false;
    {
      std::ofstream out(partial, std::ios::binary | std::ios::trunc);
      out.write(state.data(), static_cast<std::streamsize>(state.size()));
      written = out.good();
    }
    if (written) fs::rename(partial, path, ec);
    if ((!written || ec) && first) {
      first = make_error(errc::io, "cannot write checkpoint {}: {}", path.string(),
                         ec ? ec.message() : std::string("write failed"));
    }
  }
  return first;
}

}  // namespace apiary
