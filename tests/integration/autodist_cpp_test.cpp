// The C++ trainer example (examples/cpp/autodist_trainer.cpp: softmax regression with a
// sparse embedding, its own gradients, apiary::AutoDistJob): four trainer processes per
// builder over UCX on loopback end with the parameters of one process training on the
// concatenated batches (SGD, bulk-synchronous: equal within float rounding).
#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/process.hpp"

using namespace std::chrono_literals;

namespace {

std::map<std::string, std::vector<double>> read_params(const std::string& path) {
  std::map<std::string, std::vector<double>> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string name;
    words >> name;
    double v = 0;
    while (words >> v) out[name].push_back(v);
  }
  return out;
}

std::string temp_path(const std::string& name) {
  return "/tmp/apiary_autodist_cpp_" + std::to_string(::getpid()) + "_" + name;
}

}  // namespace

TEST_CASE("C++ trainers of their own model through AutoDistJob equal single-process SGD", "[autodist][integration]") {
  const std::string exe = apiary::testing::sibling_executable("apiary_autodist_trainer");
  const std::string spec = temp_path("spec.yml");
  {
    std::ofstream f(spec);
    f << "nodes:\n  - address: localhost\n    cpus: [0, 1, 2, 3]\n";
  }
  const std::string steps = "12";
  const std::string ref = temp_path("reference.txt");
  {
    apiary::testing::Process p({exe, "--reference", "--replicas", "4", "--steps", steps, "--out", ref});
    REQUIRE(p.wait(60s) == 0);
  }
  const auto expected = read_params(ref);
  REQUIRE(expected.size() == 3);
  for (const char* builder : {"PSLoadBalancing", "AllReduce", "Parallax", "PartitionedPS"}) {
    DYNAMIC_SECTION(builder) {
      const int port = apiary::testing::free_loopback_port();
      std::vector<std::unique_ptr<apiary::testing::Process>> trainers;
      for (int r = 0; r < 4; ++r) {
        trainers.push_back(std::make_unique<apiary::testing::Process>(std::vector<std::string>{
            exe, "--spec", spec, "--builder", builder, "--rank", std::to_string(r), "--port", std::to_string(port),
            "--steps", steps, "--out", temp_path(std::string(builder) + std::to_string(r))}));
      }
      for (auto& t : trainers) CHECK(t->wait(180s) == 0);
      for (int r = 0; r < 4; ++r) {
        const auto got = read_params(temp_path(std::string(builder) + std::to_string(r)));
        REQUIRE(got.size() == expected.size());
        double worst = 0;
        for (const auto& [name, values] : expected) {
          REQUIRE(got.at(name).size() == values.size());
          for (std::size_t i = 0; i < values.size(); ++i) worst = std::max(worst, std::abs(got.at(name)[i] - values[i]));
        }
        INFO(builder << " replica " << r << ": largest difference " << worst);
        CHECK(worst < 1e-5);
        std::remove(temp_path(std::string(builder) + std::to_string(r)).c_str());
      }
    }
  }
  std::remove(spec.c_str());
  std::remove(ref.c_str());
}
