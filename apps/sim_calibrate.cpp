// `apiary sim calibrate`: measures this machine's costs for the simulator
// (bench/sim_calibrate.hpp, sim/cost_profile.hpp) and writes them as a profile.
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "apps/commands.hpp"
#include "sim/cost_profile.hpp"
#if APIARY_HAVE_TRANSPORT_BENCH
#include "bench/sim_calibrate.hpp"
#endif

namespace apiary::apps {

std::function<int()> add_calibrate_command(CLI::App& cmd) {
  auto* sub = cmd.add_subcommand("calibrate",
                                 "Measure this machine's costs (transport between two processes, the training step's "
                                 "work) and write them as a profile for `apiary sim ps --profile`");
  auto out = std::make_shared<std::string>("profile.json");
  auto quick = std::make_shared<bool>(false);
  sub->add_option("--out", *out, "Where the profile goes (JSON)")->capture_default_str();
  sub->add_flag("--quick", *quick, "Fewer iterations (a smoke run)");
  auto features = std::make_shared<std::size_t>(0);
  sub->add_option("--features", *features,
                  "Measure the training step's work at this model size (w's values; default 1,048,576, a 4 MB w): "
                  "per value a model far past the caches costs more, so calibrate at the size to be simulated")
      ->check(CLI::Range(std::size_t{1024}, std::size_t{1} << 25));
  auto density = std::make_shared<double>(1.0);
  sub->add_option("--density", *density,
                  "The data's density (apiary ps --density): the sparse gradient, loss and sparse variables' work "
                  "are measured at it (default: at 1 in 1,000, a dense model's)")
      ->check(CLI::Range(1e-9, 1.0));
  return [=]() {
    if (!sub->parsed()) return -1;
#if APIARY_HAVE_TRANSPORT_BENCH
    char self[4096];
    const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
    auto p = bench::calibrate(len > 0 ? std::string(self, static_cast<std::size_t>(len)) : "apiary", *quick, *features,
                              *density);
    if (!p) return fail("sim calibrate", p.error());
    std::ofstream file(*out);
    file << sim::to_json(*p);
    if (!file) return fail("sim calibrate", make_error(errc::io, "cannot write the profile {}", *out));
    std::printf("%s", sim::to_json(*p).c_str());
    std::printf("profile written to %s\n", out->c_str());
    return 0;
#else
    return fail("sim calibrate", make_error(errc::unsupported, "this build has no transport bench to measure with"));
#endif
  };
}

}  // namespace apiary::apps
