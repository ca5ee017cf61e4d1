// Two apiary ranks of `apiary bench allreduce` in one process (each with its own actor
// system and gateway), over real UCX on loopback: every op must reach the exact mean,
// including parts that travel by rendezvous and spans of one part.
#include <stdlib.h>

#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "bench/allreduce_bench_apiary.hpp"
#include "bench/child_process.hpp"

namespace apiary::bench {
namespace {

/// Runs ranks 0 and 1 with `flags` (besides rank, ports, barrier) and returns their exit codes.
std::vector<int> run_two_ranks(const std::vector<std::string>& flags) {
  std::string dir = (std::filesystem::temp_directory_path() / "apiary_ar_test.XXXXXX").string();
  REQUIRE(::mkdtemp(dir.data()) != nullptr);
  auto p0 = free_port();
  auto p1 = free_port();
  REQUIRE(p0);
  REQUIRE(p1);
  REQUIRE(*p0 != *p1);
  const std::string ports = std::to_string(*p0) + "," + std::to_string(*p1);
  std::vector<std::future<int>> ranks;
  for (const char* rank : {"0", "1"}) {
    ranks.push_back(std::async(std::launch::async, [=] {
      std::vector<std::string> args = {"allreduce-rank", "--rank", rank, "--ports", ports, "--barrier", dir,
                                       "--timeout-s", "120"};
      args.insert(args.end(), flags.begin(), flags.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      return run_allreduce_rank(static_cast<int>(argv.size()), argv.data());
    }));
  }
  std::vector<int> codes;
  for (auto& r : ranks) codes.push_back(r.get());
  std::filesystem::remove_all(dir);
  return codes;
}

}  // namespace

TEST_CASE("two apiary ranks average exactly over tcp and shm, one part and many per span") {
  const std::string mode = GENERATE(std::string("tcp"), std::string("shm"));
  SECTION("one part per span (1 MiB, 512 KiB parts: rendezvous, then the end)") {
    CHECK(run_two_ranks({"--mode", mode, "--sizes", "4096,1048576", "--quick"}) == std::vector<int>{0, 0});
  }
  SECTION("several parts per span, one timer per actor") {
    CHECK(run_two_ranks({"--mode", mode, "--sizes", "2097152", "--part-size", "262144", "--quick", "--one-timer"}) ==
          std::vector<int>{0, 0});
  }
}

TEST_CASE("rank flags that do not make a rank are refused") {
  std::vector<std::string> args = {"allreduce-rank", "--rank", "3", "--ports", "1,2", "--sizes", "4096", "--barrier", "/tmp"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  AllReduceRankOptions o;
  CHECK_FALSE(parse_allreduce_rank_options(static_cast<int>(argv.size()), argv.data(), o));
}

}  // namespace apiary::bench
