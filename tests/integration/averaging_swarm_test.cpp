// Decentralized averaging between real `apiary average` processes over UCX on loopback
// (hivemind's test_averaging): node/client/aux mixes reach the exact mean of the
// senders, weights give the weighted mean, FLOAT16 parts stay close, a lone peer fails
// its step, and a killed peer is skipped or, once in the group, excluded as sender and
// reducer (hivemind's test_allreduce_fault_tolerance).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <csignal>
#include <fstream>
#include <sstream>

#include "tests/support/apiary_command.hpp"

using namespace apiary;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t k_size = 1000;  ///< elements of every generated vector

/// Options of a peer: 512-byte parts (many parts per reducer), `matchmaking` seconds of
/// matchmaking (a full group starts at once; the window only lets late starters on a
/// loaded machine join before a leader settles for fewer), a step timeout generous for
/// a loaded machine, `linger` seconds of serving after the last step.
std::string common(double matchmaking = 5, double timeout = 30, double linger = 2) {
  return "--size 1000 --part-size 512 --min-matchmaking-time " + std::to_string(matchmaking) + " --timeout " +
         std::to_string(timeout) + " --linger " + std::to_string(linger);
}

/// What `apiary average --size 1000 --value-seed SEED` starts from.
std::vector<double> generated(int seed) {
  std::vector<double> out(k_size);
  for (std::size_t i = 0; i < k_size; ++i) {
    out[i] = static_cast<float>(std::sin(1.7 * seed + 0.37 * static_cast<double>(i)));
  }
  return out;
}

/// A running `apiary average` process: its address, and once finished its output.
struct Peer {
  std::unique_ptr<testing::Process> proc;
  std::string err_path;  ///< the file its stderr goes to
  std::string addr;      ///< from its "listening" line
  std::string out;       ///< stdout after the "listening" line
  std::string err;
  int rc = -1;
  std::vector<double> values;  ///< from its "values" line
};

Peer spawn(const std::string& args, const std::string& tag) {
  Peer p;
  p.err_path = "/tmp/apiary_averaging_swarm_" + std::to_string(getpid()) + "_" + tag + ".err";
  p.proc = testing::spawn_apiary("average " + args + " 2>" + p.err_path);
  return p;
}

void await_listening(Peer& p) {
  p.addr = testing::await_listening(*p.proc);
}

/// Reads the rest of `p`'s stdout, waits for its exit and parses its "values" line.
void finish(Peer& p) {
  while (auto line = p.proc->read_line(90s)) {
    if (line->rfind("values", 0) == 0) {
      std::istringstream in(line->substr(6));
      for (double v; in >> v;) p.values.push_back(v);
      p.out += "values (" + std::to_string(p.values.size()) + " numbers)\n";
    } else {
      p.out += *line + "\n";
    }
  }
  p.rc = p.proc->wait(30s);
  std::ifstream in(p.err_path);
  p.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::remove(p.err_path.c_str());
}

/// Starts peer 0 with `args[0]`, then the others bootstrapping from it, and finishes all.
std::vector<Peer> run_swarm(const std::vector<std::string>& args, const std::string& tag) {
  std::vector<Peer> peers;
  peers.push_back(spawn(args[0], tag + "0"));
  await_listening(peers[0]);
  for (std::size_t i = 1; i < args.size(); ++i) {
    peers.push_back(spawn(args[i] + " --initial-peers " + peers[0].addr, tag + std::to_string(i)));
  }
  for (std::size_t i = 1; i < peers.size(); ++i) await_listening(peers[i]);
  for (auto& p : peers) finish(p);
  return peers;
}

/// The largest |a[i] - b[i]|; infinity when the sizes differ.
double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

/// sum_k w_k x_k / sum_k w_k over the vectors of `seeds`.
std::vector<double> weighted_mean(const std::vector<int>& seeds, const std::vector<double>& weights) {
  std::vector<double> out(k_size, 0.0);
  double total = 0;
  for (std::size_t k = 0; k < seeds.size(); ++k) {
    const auto x = generated(seeds[k]);
    for (std::size_t i = 0; i < k_size; ++i) out[i] += weights[k] * x[i];
    total += weights[k];
  }
  for (auto& v : out) v /= total;
  return out;
}

/// Checks that `p` exited 0 after one step in a group of `n` listing every address of `members`.
void check_step(const Peer& p, std::size_t n, const std::vector<Peer>& members) {
  INFO("output:\n" << p.out << "stderr:\n" << p.err);
  CHECK(p.rc == 0);
  CHECK_THAT(p.out, Catch::Contains("step 1: group of " + std::to_string(n) + ","));
  for (const auto& m : members) CHECK_THAT(p.out, Catch::Contains(": " + m.addr + " (reduces "));
}

/// The members of `p`'s step 1 as (address, elements it reduces) pairs, in the group's order.
std::vector<std::pair<std::string, long>> members(const Peer& p) {
  std::vector<std::pair<std::string, long>> out;
  std::istringstream in(p.out);
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(": /ip4/");
    const auto reduces = line.find(" (reduces ");
    if (line.rfind("  member ", 0) != 0 || colon == std::string::npos || reduces == std::string::npos) continue;
    out.emplace_back(line.substr(colon + 2, reduces - colon - 2), std::stol(line.substr(reduces + 10)));
  }
  return out;
}

}  // namespace

TEST_CASE("node, client and aux peers average to the exact mean of the senders", "[integration]") {
  // n: node, c: client (sends, never reduces), a: aux (reduces, sends nothing).
  const std::string modes = GENERATE(as<std::string>{}, "nnnn", "nnnc", "nncc", "nnna", "nnaa", "nnca");
  INFO("modes " << modes);
  std::vector<std::string> args;
  std::vector<int> senders;
  for (int i = 0; i < 4; ++i) {
    const std::string mode = modes[i] == 'n' ? "node" : modes[i] == 'c' ? "client" : "aux";
    args.push_back(common() + " --target-group-size 4 --mode " + mode + " --value-seed " + std::to_string(i + 1));
    if (modes[i] != 'a') senders.push_back(i + 1);
  }
  auto peers = run_swarm(args, "modes" + modes);
  const auto mean = weighted_mean(senders, std::vector<double>(senders.size(), 1.0));
  for (int i = 0; i < 4; ++i) {
    INFO("peer " << i << " (" << modes[i] << ")");
    check_step(peers[i], 4, peers);
    CHECK(max_diff(peers[i].values, modes[i] == 'a' ? generated(i + 1) : mean) < 1e-6);
  }
}

TEST_CASE("weights 1, 2, 3, 4 (two of them client-mode) give the weighted mean", "[integration]") {
  const std::vector<std::string> modes = {"node", "node", "client", "client"};
  std::vector<std::string> args;
  for (int i = 0; i < 4; ++i) {
    args.push_back(common() + " --target-group-size 4 --mode " + modes[i] + " --weight " + std::to_string(i + 1) +
                   " --value-seed " + std::to_string(i + 1));
  }
  auto peers = run_swarm(args, "weighted");
  const auto expected = weighted_mean({1, 2, 3, 4}, {1, 2, 3, 4});
  CHECK(max_diff(expected, weighted_mean({1, 2, 3, 4}, {1, 1, 1, 1})) > 1e-2);  // the weights matter
  for (int i = 0; i < 4; ++i) {
    INFO("peer " << i);
    check_step(peers[i], 4, peers);
    CHECK(max_diff(peers[i].values, expected) < 1e-6);
  }
}

TEST_CASE("a peer alone fails its step for want of a group and keeps its values", "[integration]") {
  auto peers = run_swarm({common(1, 4, 0) + " --value-seed 1 --min-group-size 2"}, "alone");
  const Peer& p = peers[0];
  INFO("output:\n" << p.out << "stderr:\n" << p.err);
  CHECK(p.rc == 1);
  CHECK_THAT(p.out, Catch::Contains("step 1 failed"));
  CHECK_THAT(p.err, Catch::Contains("step 1: ") && Catch::Contains("group"));
  CHECK(max_diff(p.values, generated(1)) < 1e-7);
}

TEST_CASE("FLOAT16 parts average 4 nodes to within fp16 precision", "[integration]") {
  std::vector<std::string> args;
  for (int i = 0; i < 4; ++i) {
    args.push_back(common() + " --target-group-size 4 --codec FLOAT16 --value-seed " + std::to_string(i + 1));
  }
  auto peers = run_swarm(args, "fp16");
  const auto mean = weighted_mean({1, 2, 3, 4}, {1, 1, 1, 1});
  for (int i = 0; i < 4; ++i) {
    INFO("peer " << i);
    check_step(peers[i], 4, peers);
    const double err = max_diff(peers[i].values, mean);
    CHECK(err < 2e-3);
    CHECK(err > 0);  // the parts really went through fp16
  }
}

TEST_CASE("a killed peer is left out, or excluded as sender and reducer once in the group", "[integration]") {
  // Peer 0 starts first and so leads; the victim bootstraps from it, is SIGKILLed, then
  // three more peers join. Target 5 is never reached without the victim, so the leader
  // assembles at the end of its 5 s matchmaking window with everyone present.
  const std::string group = common(5) + " --target-group-size 5 --min-group-size 2";
  const bool joined_first = GENERATE(false, true);
  INFO((joined_first ? "victim killed 1.5 s after it started, in matchmaking" : "victim killed as it started"));
  std::vector<Peer> peers;
  peers.push_back(spawn(group + " --value-seed 1", "killed0"));
  await_listening(peers[0]);
  Peer victim = spawn(group + " --value-seed 9 --initial-peers " + peers[0].addr, "killed_victim");
  await_listening(victim);
  if (joined_first) usleep(1500 * 1000);
  victim.proc->kill(SIGKILL);
  CHECK(victim.proc->wait(10s) == 128 + SIGKILL);
  std::remove(victim.err_path.c_str());
  for (int i = 1; i < 4; ++i) {
    peers.push_back(spawn(group + " --value-seed " + std::to_string(i + 1) + " --initial-peers " + peers[0].addr,
                          "killed" + std::to_string(i)));
  }
  for (int i = 1; i < 4; ++i) await_listening(peers[i]);
  for (auto& p : peers) finish(p);
  const auto mean = weighted_mean({1, 2, 3, 4}, {1, 1, 1, 1});
  for (int i = 0; i < 4; ++i) {
    INFO("peer " << i << " output:\n" << peers[i].out << "stderr:\n" << peers[i].err);
    REQUIRE(peers[i].rc == 0);
    REQUIRE(peers[i].values.size() == k_size);
    const auto group_members = members(peers[i]);
    if (group_members.size() == 4) {
      // The victim never made it into the group: the exact mean of the four.
      check_step(peers[i], 4, peers);
      CHECK_THAT(peers[i].out, !Catch::Contains(victim.addr));
      CHECK(max_diff(peers[i].values, mean) < 1e-6);
      continue;
    }
    // The victim is in the group: banned as a sender, its slice keeps local values.
    REQUIRE(group_members.size() == 5);
    check_step(peers[i], 5, peers);
    CHECK_THAT(peers[i].out, Catch::Contains("failed sender: " + victim.addr) &&
                                 Catch::Contains("failed reducer: " + victim.addr));
    // Its nominal slice starts after the shares of the members before it; the parts
    // (128 values) it was to reduce keep this peer's values, all others hold the mean.
    long victim_start = 0;
    long victim_share = -1;
    for (const auto& [addr, share] : group_members) {
      if (addr == victim.addr) victim_share = share;
      if (victim_share < 0) victim_start += share;
    }
    REQUIRE(victim_share > 0);
    const auto local = generated(i + 1);
    std::vector<std::size_t> kept;
    std::size_t averaged = 0;
    for (std::size_t e = 0; e < k_size; ++e) {
      if (std::abs(peers[i].values[e] - local[e]) < 1e-6) kept.push_back(e);
      averaged += std::abs(peers[i].values[e] - mean[e]) < 1e-6 ? 1 : 0;
    }
    REQUIRE(!kept.empty());
    CHECK(kept.size() + averaged == k_size);
    CHECK(kept.back() - kept.front() + 1 == kept.size());  // one contiguous run
    CHECK(kept.front() % 128 == 0);
    CHECK(((kept.back() + 1) % 128 == 0 || kept.back() + 1 == k_size));
    CHECK(static_cast<long>(kept.front()) < victim_start + victim_share);
    CHECK(static_cast<long>(kept.back()) >= victim_start);
  }
  // Which of the two happened depends on timing; hivemind's fault test expects the group.
  if (joined_first) WARN("victim in the group: " << (members(peers[0]).size() == 5 ? "yes" : "no"));
}
