#include "api/expert_files.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>
#include <utility>

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

}  // namespace

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
