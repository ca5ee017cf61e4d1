// `apiary dht`: a long-running DHT node; `apiary dht store|get`: one-shot clients that
// store or read one value through a node.
#include <cstdio>
#include <ctime>

#include "api/dht.hpp"
#include "apps/commands.hpp"
#include "core/dht/msgpack_value.hpp"

namespace apiary::apps {
namespace {

/// "2026-11-30 15:41:00 UTC" for a Unix time in seconds.
std::string format_time(double unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

/// The client options shared by store and get.
struct ClientArgs {
  std::string peer;
  std::string mode = "tcp";
  std::string authority;
  bool insecure = false;
};

/// Starts a client-mode node bootstrapped from `args.peer`; prints the error and sets
/// `rc` if it cannot.
std::unique_ptr<Dht> start_client(const char* what, const ClientArgs& args, int& rc) {
  DhtOptions o;
  o.client_mode = true;
  o.mode = transport_mode(args.mode);
  o.insecure = args.insecure;
  o.initial_peers = {args.peer};
  o.authorization.authority_file = args.authority;
  if (auto peer = messages::Multiaddr::parse(args.peer)) {
    // Listen (ephemerally) on the interface the peer is reached through.
    o.listen = messages::Multiaddr::from_ip(peer->host, 0)->to_string();
  }
  auto dht = Dht::start(o);
  if (!dht) {
    std::fprintf(stderr, "apiary dht %s: %s\n", what, dht.error().what().c_str());
    rc = dht.error().code == errc::invalid_argument ? 2 : 1;
    return nullptr;
  }
  return std::move(*dht);
}

int run_store(const ClientArgs& args, const std::string& key, const std::string& value,
              const std::optional<std::string>& subkey, double ttl) {
  int rc = 1;
  auto dht = start_client("store", args, rc);
  if (!dht) return rc;
  const double expiration = Dht::now() + ttl;
  std::vector<DhtStoreItem> items{DhtStoreItem{DhtKey::str(key), core::dht::pack_str(value), expiration,
                                               subkey ? std::optional<DhtKey>(DhtKey::str(*subkey)) : std::nullopt}};
  auto r = dht->store_many(std::move(items)).get();
  const std::string what = subkey ? fmt::format("{} (subkey {})", key, *subkey) : key;
  if (!r) {
    std::fprintf(stderr, "apiary dht store: %s: %s\n", what.c_str(), r.error().what().c_str());
    return 1;
  }
  const auto& s = r->front();
  if (!s.ok) {
    std::printf("store %s until %s: rejected by every replica (they hold a newer value, or a validator refused it)\n",
                what.c_str(), format_time(expiration).c_str());
    return 1;
  }
  std::printf("stored %s until %s: ok (%zu replica%s)\n", what.c_str(), format_time(expiration).c_str(), s.replicas,
              s.replicas == 1 ? "" : "s");
  return 0;
}

int run_get(const ClientArgs& args, const std::string& key, bool latest) {
  int rc = 1;
  auto dht = start_client("get", args, rc);
  if (!dht) return rc;
  auto r = dht->get(DhtKey::str(key), latest).get();
  if (!r) {
    std::fprintf(stderr, "apiary dht get: %s: %s\n", key.c_str(), r.error().what().c_str());
    return 1;
  }
  if (!*r) {
    std::printf("%s: not found\n", key.c_str());
    return 1;
  }
  const double now = Dht::now();
  const auto& found = **r;
  if (const auto* regular = std::get_if<std::string>(&found.value)) {
    std::printf("%s = %s expires in %.1f s\n", key.c_str(), core::dht::describe_packed(*regular).c_str(), found.expiration - now);
    return 0;
  }
  const auto& dict = std::get<core::dht::FoundValue::Dictionary>(found.value);
  if (dict.empty()) {
    std::printf("%s: not found (an empty dictionary)\n", key.c_str());
    return 1;
  }
  for (const auto& [sub, entry] : dict) {
    std::printf("%s[%s] = %s expires in %.1f s\n", key.c_str(), core::dht::describe_packed(sub).c_str(),
                core::dht::describe_packed(entry.value).c_str(), entry.expiration_time - now);
  }
  return 0;
}

}  // namespace

Command add_dht_commands(CLI::App& app) {
  auto* cmd = app.add_subcommand("dht", "Run a Kademlia DHT node until SIGINT/SIGTERM, or store/get through one");
  cmd->require_subcommand(0, 1);
  auto opts = std::make_shared<DhtOptions>();
  auto mode = std::make_shared<std::string>("tcp");
  cmd->add_option("--listen", opts->listen, "Listen multiaddr, e.g. /ip4/127.0.0.1/tcp/0")->capture_default_str();
  cmd->add_option("--initial-peers", opts->initial_peers,
                  "Multiaddrs (with /p2p/) of nodes to bootstrap from, comma-separated")
      ->delimiter(',')
      ->expected(0, -1);
  cmd->add_flag("--client-mode", opts->client_mode, "Serve nothing; never enter routing tables");
  add_relay_flags(*cmd, opts->relay_service, opts->auto_relay, opts->relay_limits);
  cmd->add_option("--identity", opts->identity_file,
                  "Ed25519 key file (see `apiary identity create`); default: a fresh key for this run");
  cmd->add_option("--mode", *mode, "Same-host lanes: tcp or shm")->check(CLI::IsMember({"tcp", "shm"}))->capture_default_str();
  add_insecure_flag(*cmd, opts->insecure);
  add_host_option(*cmd, opts->host);
  auto authority = std::make_shared<std::string>();
  const char* authority_help =
      "Turn on request authorization: an Ed25519 key file (see `apiary identity create`) shared by the "
      "swarm's members, which each mint their own token with it; requests without one are refused";
  cmd->add_option("--authority", *authority, authority_help);

  auto client = std::make_shared<ClientArgs>();
  auto key = std::make_shared<std::string>();
  auto value = std::make_shared<std::string>();
  auto subkey = std::make_shared<std::string>();
  auto ttl = std::make_shared<double>(60.0);
  auto latest = std::make_shared<bool>(false);
  auto* store = cmd->add_subcommand("store", "Store a string VALUE under a string KEY through the node at --peer");
  store->add_option("--peer", client->peer, "Multiaddr of a DHT node")->required();
  store->add_option("key", *key, "The key (a string)")->required();
  store->add_option("value", *value, "The value (a string)")->required();
  auto* subkey_opt = store->add_option("--subkey", *subkey, "Store one entry of a dictionary value under this subkey");
  store->add_option("--ttl", *ttl, "Seconds the value lives")->check(CLI::Range(0.001, 1e9))->capture_default_str();
  store->add_option("--mode", client->mode, "tcp or shm (must match the node's)")->check(CLI::IsMember({"tcp", "shm"}));
  store->add_option("--authority", client->authority, authority_help);
  add_insecure_flag(*store, client->insecure);
  auto* get = cmd->add_subcommand("get", "Print the value of a string KEY found through the node at --peer");
  get->add_option("--peer", client->peer, "Multiaddr of a DHT node")->required();
  get->add_option("key", *key, "The key (a string)")->required();
  get->add_flag("--latest", *latest, "Ask every replica and merge dictionary subkeys");
  get->add_option("--mode", client->mode, "tcp or shm (must match the node's)")->check(CLI::IsMember({"tcp", "shm"}));
  get->add_option("--authority", client->authority, authority_help);
  add_insecure_flag(*get, client->insecure);

  return [=]() {
    if (store->parsed()) {
      return run_store(*client, *key, *value, subkey_opt->count() > 0 ? std::optional<std::string>(*subkey) : std::nullopt,
                       *ttl);
    }
    if (get->parsed()) return run_get(*client, *key, *latest);
    block_shutdown_signals();
    opts->mode = transport_mode(*mode);
    opts->authorization.authority_file = *authority;
    auto dht = Dht::start(*opts);
    if (!dht) return fail("dht", dht.error());
    std::printf("listening %s\n", (*dht)->address().to_string().c_str());
    std::fflush(stdout);
    std::printf("stopping on %s\n", wait_for_shutdown_signal());
    std::fflush(stdout);
    (*dht)->stop();
    return 0;
  };
}

}  // namespace apiary::apps
