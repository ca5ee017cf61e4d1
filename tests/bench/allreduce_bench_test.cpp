// bench/allreduce_*: what the driver does to the runner's effects, the deadline set behind
// --one-timer, and how the parent folds the ranks' result lines.
#include <catch2/catch.hpp>

#include "actors/effects_executor.hpp"
#include "bench/allreduce_bench.hpp"
#include "bench/allreduce_bench_apiary.hpp"
#include "bench/allreduce_bench_timers.hpp"
#include "bench/allreduce_workload.hpp"
#include "tests/support/peer_addr.hpp"

namespace apiary::bench {
namespace {
using apiary::test::operator""_addr;

core::Call stream_call(core::CallId id, std::string first) {
  core::Call c;
  c.id = id;
  c.peer = "/ip4/127.0.0.1/tcp/1"_addr;
  c.handle = "h";
  c.request = std::move(first);
  c.stream = true;
  c.last = false;
  return c;
}

}  // namespace

TEST_CASE("fold_stream_ends folds an empty end into the call it ends") {
  core::Effects fx{stream_call(7, "part"), core::SetTimer{3, core::TimePoint{}}, core::Send{7, "", true}};
  actors::fold_stream_ends(fx);
  REQUIRE(fx.size() == 2);
  const auto& call = std::get<core::Call>(fx[0]);
  CHECK(call.last);
  CHECK(call.request == "part");
  CHECK(std::holds_alternative<core::SetTimer>(fx[1]));
}

TEST_CASE("fold_stream_ends folds a reducer's empty last reply into its last answer, past other streams") {
  core::Effects fx{core::Reply{1, std::string("d1"), false}, core::Reply{2, std::string("d2"), false},
                   core::CancelTimer{9}, core::Reply{1, std::string(), true}};
  actors::fold_stream_ends(fx);
  REQUIRE(fx.size() == 3);
  const auto& first = std::get<core::Reply>(fx[0]);
  CHECK(first.request == 1);
  CHECK(first.last);
  CHECK(*first.response == "d1");
  CHECK_FALSE(std::get<core::Reply>(fx[1]).last);
}

TEST_CASE("fold_stream_ends leaves an end alone when there is nothing to fold it into") {
  // A refusal (an error reply), an end of another stream, and a Send after a closed call stay.
  core::Effects fx{core::Reply{1, make_error(errc::cancelled, "x"), true}, core::Reply{1, std::string(), true},
                   core::Reply{2, std::string(), true}};
  actors::fold_stream_ends(fx);
  CHECK(fx.size() == 3);
  core::Effects unary{core::unary_call(4, "/ip4/127.0.0.1/tcp/1"_addr, "h", "r", std::chrono::seconds(1)),
                      core::Send{4, "", true}};
  actors::fold_stream_ends(unary);
  CHECK(unary.size() == 2);
}

TEST_CASE("DeadlineSet asks for a wake-up only when a deadline comes earlier than the pending one") {
  using std::chrono::seconds;
  DeadlineSet d;
  const auto first = d.arm(1, core::TimePoint{seconds(30)});
  REQUIRE(first.has_value());
  const auto gen = d.generation();
  CHECK_FALSE(d.arm(1, core::TimePoint{seconds(31)}).has_value());  // re-armed later: no new wake-up
  CHECK_FALSE(d.arm(2, core::TimePoint{seconds(40)}).has_value());
  // The wake-up at 30 s finds nothing due (timer 1 moved to 31 s) and asks for 31 s.
  CHECK(d.fired(gen, core::TimePoint{seconds(30)}).empty());
  const auto next = d.next_wake();
  REQUIRE(next.has_value());
  CHECK(*next == core::TimePoint{seconds(31)});
  CHECK(d.fired(gen, core::TimePoint{seconds(35)}).empty());  // superseded generation
  auto due = d.fired(d.generation(), core::TimePoint{seconds(35)});
  REQUIRE(due.size() == 1);
  CHECK(due[0] == 1);
  d.disarm(2);
  CHECK_FALSE(d.next_wake().has_value());
}

TEST_CASE("parse_allreduce_results takes the slowest rank and sums the counters") {
  const std::string out =
      "noise\n"
      "allreduce_result system=x rank=0 ranks=2 bytes=4096 iters=10 us_per_op=10.0 vcsw_per_op=2 nivcsw_per_op=1 "
      "cpu_us_per_op=5 check=ok\n"
      "allreduce_result system=x rank=1 ranks=2 bytes=4096 iters=10 us_per_op=12.0 vcsw_per_op=3 nivcsw_per_op=0 "
      "cpu_us_per_op=6 check=ok\n"
      "allreduce_result system=x rank=0 ranks=2 bytes=8192 iters=10 us_per_op=20.0 vcsw_per_op=1 nivcsw_per_op=0 "
      "cpu_us_per_op=1 check=FAIL\n";
  const auto figures = parse_allreduce_results(out);
  REQUIRE(figures.size() == 2);
  const auto& small = figures.at(4096);
  CHECK(small.ok);
  CHECK(small.us_per_op == Approx(12.0));
  CHECK(small.vcsw_per_op == Approx(5.0));
  CHECK(small.cpu_us_per_op == Approx(11.0));
  CHECK(small.algbw() == Approx(4096.0 / 12.0 / 1e3));
  CHECK(small.busbw() == Approx(small.algbw()));  // 2(n-1)/n = 1 for two ranks
  CHECK_FALSE(figures.at(8192).ok);  // a failed check, and one rank silent
}

TEST_CASE("the workload's expected sums and means are exact") {
  namespace wl = allreduce_workload;
  for (std::size_t n : {2u, 4u}) {
    for (std::size_t j = 0; j < 16; ++j) {
      double sum = 0;
      for (std::size_t r = 0; r < n; ++r) sum += wl::input_value(r, j);
      CHECK(wl::expected_sum(n, j) == static_cast<float>(sum));
      CHECK(wl::expected_mean(n, j) == static_cast<float>(sum / static_cast<double>(n)));
    }
  }
  CHECK(wl::iters_for(4096, false) == 2000);
  CHECK(wl::iters_for(std::size_t{64} << 20, true) == 2);
}

}  // namespace apiary::bench
