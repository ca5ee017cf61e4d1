// `apiary experts`' flags (api/expert_server_args.hpp): hivemind-server's flags read into
// options, list flags, and each bad flag refused naming it.
#include <catch2/catch.hpp>

#include "api/expert_server_args.hpp"

using namespace apiary;

TEST_CASE("hivemind-server's flags set the expert server's options", "[api][moe]") {
  auto c = parse_expert_server_args({"--expert-cls", "nop", "--num-experts", "16", "--expert-pattern",
                                     "expert.[0:4].[0:4]", "--hidden-dim", "1024", "--max-batch-size", "4096",
                                     "--initial-peers", "/ip4/127.0.0.1/tcp/4100/p2p/a", "/ip4/127.0.0.1/tcp/4101/p2p/b",
                                     "--listen", "/ip4/127.0.0.1/tcp/0", "--timeout-ms", "50", "--host", "transport",
                                     "--update-period", "5", "--expiration", "12.5", "--stats-every", "0"});
  REQUIRE(c.ok());
  CHECK(c->server.expert_cls == "nop");
  CHECK(c->server.num_experts == 16);
  CHECK(c->server.expert_pattern == "expert.[0:4].[0:4]");
  CHECK(c->server.hidden_dim == 1024);
  CHECK(c->server.max_batch_size == 4096);
  CHECK(c->initial_peers.size() == 2);
  CHECK(c->runtime.listen == "/ip4/127.0.0.1/tcp/0");
  CHECK(c->server.timeout == std::chrono::milliseconds(50));
  CHECK(c->server.host == core::HostKind::transport_thread);
  CHECK(c->server.update_period == 5.0);
  CHECK(c->server.expiration == 12.5);
  CHECK(c->stats_every == 0.0);

  auto uids = parse_expert_server_args({"--expert-uids", "ffn.0", "ffn.1", "--seed", "3"});
  REQUIRE(uids.ok());
  CHECK(uids->server.expert_uids == std::vector<std::string>{"ffn.0", "ffn.1"});
  CHECK(uids->server.seed == 3);
  CHECK(expert_server_usage().find("--expert-pattern") != std::string::npos);
}

TEST_CASE("a bad flag is refused naming it", "[api][moe]") {
  auto refused = [](std::vector<std::string> args, const std::string& needle) {
    auto c = parse_expert_server_args(args);
    REQUIRE(!c.ok());
    CHECK(c.error().code == errc::invalid_argument);
    INFO(c.error().message);
    CHECK(c.error().message.find(needle) != std::string::npos);
  };
  refused({"--num-expert", "3"}, "--num-expert'");
  refused({"--hidden-dim", "big"}, "--hidden-dim");
  refused({"--hidden-dim", "-4"}, "--hidden-dim");
  refused({"--hidden-dim"}, "--hidden-dim");
  refused({"--seed", "1", "2"}, "--seed");
  refused({"--host", "gpu"}, "--host");
  refused({"--update-period", "1s"}, "--update-period");
}
