// The ping core (core/ping) running unchanged under real actors and the real gateway:
// the same Pinger the simulator drives (tests/sim/ping_sim_test.cpp) finds a swarm and
// measures RTTs here, over the in-process transport and over UCX.
#include <catch2/catch.hpp>

#include "actors/ping/ping_actor.hpp"
#include "actors/type_ids.hpp"
#include "api/node.hpp"
#include "tests/support/test_system.hpp"

using namespace apiary;
using namespace std::chrono_literals;

namespace {

/// Asks a ping actor for its table until `done(table)` holds or `patience` passes.
template <class Pred>
std::string wait_for_table(caf::actor_system& sys, const actors::RoleHost& ping, Pred done,
                           std::chrono::seconds patience) {
  (void)sys;
  std::string table;
  const auto give_up = std::chrono::steady_clock::now() + patience;
  while (std::chrono::steady_clock::now() < give_up) {
    if (auto t = actors::ping_report(ping)) table = *t;
    if (done(table)) break;
    std::this_thread::sleep_for(50ms);
  }
  return table;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("ping roles over the in-process transport find each other on either host", "[actor]") {
  const auto kind = GENERATE(actors::HostKind::actor, actors::HostKind::transport_thread);
  INFO("host: " << actors::host_kind_name(kind));
  testing::TestSystem t;
  auto& sys = t.sys;
  std::vector<std::shared_ptr<actors::Gateway>> gws;
  std::vector<actors::RoleHost> pings;
  std::vector<std::string> addrs;
  for (int i = 0; i < 4; ++i) {
    gws.push_back(testing::start_local_gateway(sys));
    const auto& a = gws.back()->address();
    addrs.push_back("/ip4/" + a.substr(0, a.find(':')) + "/tcp/" + a.substr(a.find(':') + 1));
  }
  core::ping::Config pc;
  pc.interval = 50ms;
  for (int i = 0; i < 4; ++i) {
    std::vector<core::PeerAddr> bootstrap;
    if (i > 0) bootstrap.push_back(core::PeerAddr::parse(addrs[0]).value());
    pings.push_back(actors::spawn_ping_actor(sys, gws[i], core::PeerAddr::parse(addrs[i]).value(), pc, bootstrap, kind));
  }
  for (int i = 0; i < 4; ++i) {
    auto table = wait_for_table(sys, pings[i], [&](const std::string& t) {
      for (int j = 0; j < 4; ++j) {
        if (j != i && t.find(addrs[j] + " ") == std::string::npos) return false;
      }
      return count(t, "/0 ") == 0 && count(t, " 0/") == 0;  // every peer answered at least once
    }, 20s);
    INFO(table);
    for (int j = 0; j < 4; ++j) {
      if (j != i) CHECK(table.find(addrs[j] + " ") != std::string::npos);
    }
    CHECK(table.find(addrs[i] + " ") == std::string::npos);  // never itself
  }
  for (int i = 0; i < 4; ++i) actors::stop_role(*gws[i], pings[i], {core::ping::k_handle});
  for (auto& g : gws) g->stop();
}

TEST_CASE("nodes over UCX find each other from one bootstrap address", "[actor][integration]") {
  NodeOptions first;
  first.ping_interval = 100ms;
  auto a = Node::start(first);
  REQUIRE(a.ok());
  NodeOptions rest = first;
  rest.bootstrap = {(*a)->address().to_string()};  // with /p2p/..., as users pass it
  auto b = Node::start(rest);
  auto c = Node::start(rest);
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  const std::string addr_a = (*a)->address().without_peer().to_string();
  const std::string addr_b = (*b)->address().without_peer().to_string();
  const std::string addr_c = (*c)->address().without_peer().to_string();
  std::string table;
  for (int i = 0; i < 200; ++i) {
    table = (*b)->rtt_table();
    if (table.find(addr_c + " ") != std::string::npos && table.find(addr_a + " ") != std::string::npos &&
        count(table, " 0/") == 0) {
      break;
    }
    std::this_thread::sleep_for(50ms);
  }
  INFO(table);
  CHECK(table.find(addr_a + " ") != std::string::npos);
  CHECK(table.find(addr_c + " ") != std::string::npos);
  CHECK(table.find("/p2p/") == std::string::npos);  // one name per peer
  CHECK(count(table, "/ip4/") == 3);                // the header line names b itself, then a and c
}
