#pragma once
// What the expert tests over UCX in one process share: a server runtime and a client
// runtime on one actor system, and the options of an ffn server.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api/expert_server.hpp"
#include "api/runtime.hpp"
#include "tests/support/test_system.hpp"

namespace apiary::testing {

/// A server runtime and a client runtime on one actor system.
struct ExpertPair {
  TestSystem t;
  std::unique_ptr<Runtime> server_rt;
  std::unique_ptr<Runtime> client_rt;
  ExpertPair() {
    RuntimeOptions o;
    o.system = &t.sys;
    auto a = Runtime::start(o);
    REQUIRE(a.ok());
    server_rt = std::move(*a);
    auto b = Runtime::start(o);
    REQUIRE(b.ok());
    client_rt = std::move(*b);
  }
  ~ExpertPair() {
    client_rt->stop();
    server_rt->stop();
  }
  ExpertPair(const ExpertPair&) = delete;
  ExpertPair& operator=(const ExpertPair&) = delete;
  [[nodiscard]] core::PeerAddr server_addr() const { return core::PeerAddr(server_rt->address()); }
};

/// Built-in ffn experts of hidden size `hidden` under `uids`, expert i from seed + i.
inline ExpertServerOptions ffn_options(std::vector<std::string> uids, std::uint64_t seed, std::uint32_t hidden) {
  ExpertServerOptions o;
  o.expert_cls = "ffn";
  o.hidden_dim = hidden;
  o.expert_uids = std::move(uids);
  o.seed = seed;
  return o;
}

}  // namespace apiary::testing
