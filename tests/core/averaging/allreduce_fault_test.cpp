// AllReduceRunner under faults, as hivemind's test_allreduce_fault_tolerance: 5 peers
// (peer 1 a client), one faulty peer; the healthy ones finish, and each of their elements
// is the mean over the senders (with or without the faulty one) or the local value; the
// spans of healthy reducers are always averaged.
#include <catch2/catch.hpp>

#include <string>

#include "tests/core/averaging/allreduce_group.hpp"

namespace apiary::core::averaging {
namespace {

using namespace testing;

enum class Fault { fail_before, fail_sending, fail_silently, slow_sending, fail_reducing,
                   slow_reducing, cancel };

const char* name_of(Fault f) {
  switch (f) {
    case Fault::fail_before: return "fail before";
    case Fault::fail_sending: return "fail while sending";
    case Fault::fail_silently: return "fail while sending, partners not told";
    case Fault::slow_sending: return "slow sending";
    case Fault::fail_reducing: return "fail while reducing";
    case Fault::slow_reducing: return "slow reducing";
    case Fault::cancel: return "cancel";
  }
  return "?";
}

PeerFaults faults_for(Fault f) {
  PeerFaults x;
  switch (f) {
    case Fault::fail_before: x.kill_at = 0ms; x.notify_partners = false; break;
    case Fault::fail_sending: x.kill_at = 7ms; break;
    case Fault::fail_silently: x.kill_at = 7ms; x.notify_partners = false; break;
    case Fault::slow_sending: x.slow_sends_after = 10; break;
    case Fault::fail_reducing: x.kill_at = 12ms; break;
    case Fault::slow_reducing: x.slow_replies_after = 10; break;
    case Fault::cancel: x.cancel_at = 8ms; break;
  }
  return x;
}

/// Which peer reduces each element of tensor t.
std::vector<std::size_t> owners(const Partition& partition, std::size_t t, std::size_t size) {
  std::vector<std::size_t> out(size, SIZE_MAX);
  for (const Part& part : partition.parts) {
    if (part.tensor_index != t) continue;
    for (std::int64_t k = 0; k < part.length; ++k) out[part.offset + k] = part.peer;
  }
  return out;
}

void run_fault(Fault fault, std::size_t faulty, bool deferred = false, bool in_place = false) {
  GroupSpec spec;
  spec.deferred = deferred;
  spec.in_place = in_place;
  spec.modes = {AveragingMode::node, AveragingMode::client, AveragingMode::node,
                AveragingMode::node, AveragingMode::node};
  spec.sizes = {1024, 1536, 64, 2048};
  spec.part_size_bytes = 256;
  spec.seed = 100 + static_cast<std::uint64_t>(fault) * 10 + faulty;
  Group g = make_group(spec);
  const std::vector<std::size_t> all = senders_of(spec);
  std::vector<std::size_t> without;
  for (std::size_t s : all) {
    if (s != faulty) without.push_back(s);
  }
  const Tensors full = weighted_mean(g, all);
  const Tensors partial = weighted_mean(g, without);
  const Partition partition = g.runners[0].partition();

  std::vector<PeerFaults> faults(spec.modes.size());
  faults[faulty] = faults_for(fault);
  Net net(std::move(g.runners), faults);
  net.run();

  bool reported = false;
  for (std::size_t p = 0; p < spec.modes.size(); ++p) {
    if (p == faulty) continue;
    INFO(name_of(fault) << " at peer " << faulty << "; healthy peer " << p);
    const AllReduceRunner& r = net.runner(p);
    REQUIRE(r.finished());
    REQUIRE(r.outcome().status);
    for (const auto* list : {&r.outcome().failed_senders, &r.outcome().failed_reducers}) {
      for (const PeerAddr& a : *list) {
        CHECK(a == test_addr(faulty));  // nobody healthy is blamed
        reported = true;
      }
    }
    const Tensors result = result_of(net, g, p);
    std::size_t averaged = 0, total = 0;
    for (std::size_t t = 0; t < result.size(); ++t) {
      const auto owner = owners(partition, t, result[t].size());
      for (std::size_t k = 0; k < result[t].size(); ++k, ++total) {
        const float x = result[t][k];
        const bool is_mean = std::fabs(x - full[t][k]) <= 1e-5 || std::fabs(x - partial[t][k]) <= 1e-5;
        const bool is_local = std::fabs(x - g.inputs[p][t][k]) <= 1e-6;
        INFO("tensor " << t << " element " << k << " reduced by " << owner[k]);
        if (!is_mean && !is_local) FAIL_CHECK("neither a mean nor the local value: " << x);
        if (owner[k] != faulty && !is_mean) FAIL_CHECK("a healthy reducer's element is not averaged");
        averaged += is_mean ? 1 : 0;
      }
    }
    CHECK(averaged * 2 >= total);
  }
  // The fault is visible in some healthy peer's report.
  CHECK(reported);
  if (fault == Fault::cancel) {
    REQUIRE(net.runner(faulty).finished());
    CHECK(net.runner(faulty).outcome().status.error().code == errc::cancelled);
  }
  if (fault == Fault::slow_sending || fault == Fault::slow_reducing) {
    CHECK(net.runner(faulty).finished());  // a slow peer also ends its round
  }
}

TEST_CASE("allreduce faults: a faulty node among five", "[allreduce][faults]") {
  for (Fault f : {Fault::fail_before, Fault::fail_sending, Fault::fail_silently,
                  Fault::slow_sending, Fault::fail_reducing, Fault::slow_reducing,
                  Fault::cancel}) {
    SECTION(name_of(f)) { run_fault(f, 0); }
  }
}

TEST_CASE("allreduce faults: a faulty client among five", "[allreduce][faults]") {
  for (Fault f : {Fault::fail_before, Fault::fail_sending, Fault::fail_silently,
                  Fault::slow_sending, Fault::cancel}) {
    SECTION(name_of(f)) { run_fault(f, 1); }
  }
}

TEST_CASE("allreduce faults: a faulty node among five, reductions as deferred jobs", "[allreduce][faults]") {
  for (Fault f : {Fault::fail_before, Fault::fail_sending, Fault::slow_sending, Fault::fail_reducing,
                  Fault::slow_reducing, Fault::cancel}) {
    SECTION(name_of(f)) { run_fault(f, 0, true); }
  }
}

TEST_CASE("allreduce faults: a faulty node among five, averages in place", "[allreduce][faults]") {
  for (Fault f : {Fault::fail_before, Fault::fail_sending, Fault::fail_silently, Fault::slow_sending,
                  Fault::fail_reducing, Fault::slow_reducing, Fault::cancel}) {
    SECTION(name_of(f)) { run_fault(f, 0, false, true); }
  }
  SECTION("fail while reducing, deferred") { run_fault(Fault::fail_reducing, 0, true, true); }
}

TEST_CASE("allreduce faults: a reducer whose device fails keeps local values for its span only",
          "[allreduce][faults]") {
  GroupSpec spec;
  spec.modes.assign(4, AveragingMode::node);
  spec.sizes = {1024, 64};
  spec.deferred = true;
  Group g = make_group(spec);
  const Tensors mean = weighted_mean(g, senders_of(spec));
  const Partition partition = g.runners[0].partition();
  std::vector<PeerFaults> faults(4);
  faults[2].reduce_fails = true;
  Net net(std::move(g.runners), faults);
  net.run();
  for (std::size_t p = 0; p < 4; ++p) {
    INFO("peer " << p);
    REQUIRE(net.runner(p).finished());
    REQUIRE(net.runner(p).outcome().status);
    const Tensors result = result_of(net, g, p);
    for (std::size_t t = 0; t < result.size(); ++t) {
      const auto owner = owners(partition, t, result[t].size());
      for (std::size_t k = 0; k < result[t].size(); ++k) {
        const float expected = owner[k] == 2 ? g.inputs[p][t][k] : mean[t][k];
        INFO("tensor " << t << " element " << k << " reduced by " << owner[k]);
        REQUIRE(std::fabs(result[t][k] - expected) <= 1e-6);
      }
    }
  }
}

}  // namespace
}  // namespace apiary::core::averaging
