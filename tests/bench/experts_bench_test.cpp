// `apiary bench experts`: the presets, the expert each batch goes to (which
// bench/python/bench_experts.py draws too), and a smoke run of the tiny preset on
// apiary alone (server and clients as processes over UCX on loopback). No timing is
// asserted: the benchmark only prints.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include "bench/experts_bench.hpp"
#include "tests/support/apiary_command.hpp"

using namespace apiary;
using namespace std::chrono_literals;

TEST_CASE("experts presets keep upstream's shapes and refuse unknown names", "[bench]") {
  const auto presets = bench::experts_presets({"minimalistic", "ffn_small_batch", "default"});
  REQUIRE(presets.size() == 3);
  CHECK(presets[0].experts == 1);
  CHECK(presets[0].batch_size == 2048);
  CHECK(presets[0].server_batch_limit() == 8192);
  CHECK(presets[1].batch_size == 32);
  CHECK(!presets[1].backward);
  CHECK(presets[2].experts == 16);
  CHECK(presets[2].hidden == 1024);
  CHECK(bench::experts_presets({"default", "nope"}).empty());
}

TEST_CASE("batches go to the experts bench_experts.py picks", "[bench]") {
  // bench_experts.py's expert_of_batch(1, c, b, 16) for c in 0..1, b in 0..3.
  const std::vector<std::size_t> want = {4, 3, 13, 0, 12, 3, 8, 12};
  std::vector<std::size_t> got;
  for (std::size_t c = 0; c < 2; ++c)
    for (std::size_t b = 0; b < 4; ++b) got.push_back(bench::expert_of_batch(1, c, b, 16));
  CHECK(got == want);
  CHECK(bench::expert_of_batch(7, 3, 2, 1000) == 336);
}

TEST_CASE("apiary bench experts runs the tiny preset on apiary, and says how to get a missing peer",
          "[integration][bench]") {
  ::setenv("APIARY_HIVEMIND_PYTHON", "/nonexistent/python", 1);  // the peer is missing: apiary's figures only
  auto r = testing::run_apiary("bench experts --presets tiny", 120s);
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK_THAT(r.out, Catch::Contains("hivemind peer: missing: no hivemind interpreter at /nonexistent/python"));
  CHECK_THAT(r.out, Catch::Contains("setup_hivemind.sh"));
  // 16 requests (2 clients x 4 batches, forward and backward) of 256 rows in all; those
  // that queue while a batch computes join the next batch, so 1 to 16 batches.
  CHECK_THAT(r.out, Catch::Matches("[\\s\\S]*apiary server: ([1-9]|1[0-6]) batches, 256 rows, 0 failed[\\s\\S]*"));
  CHECK_THAT(r.out, Catch::Contains("== samples/s (tiny) =="));
  CHECK_THAT(r.out, Catch::Contains("goal: RemoteExpert forward at batch 1"));
}
