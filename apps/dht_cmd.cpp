// `apiary dht`: a long-running DHT node; `apiary dht store|get`: one-shot clients that
// store or read one value through a node.
#include <csignal>
#include <cstdio>
#include <ctime>
#include <sstream>

#include <random>

#include "api/dht.hpp"
#include "apps/commands.hpp"
#include "core/dht/auth.hpp"
#include "core/dht/msgpack_value.hpp"
#include "messages/identity/key_file.hpp"

namespace apiary::apps {
namespace {

transport::Mode parse_mode(const std::string& m) { return m == "shm" ? transport::Mode::shm : transport::Mode::tcp; }

/// "2026-11-30 15:41:00 UTC" for a Unix time in seconds.
std::string format_time(double unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

/// A msgpack value as text: a str quoted, a bin as hex, anything else as msgpack-c prints it.
std::string format_packed(const std::string& packed) {
  auto handle = core::dht::unpack_one(packed);
  if (!handle) {
    std::string hex = "0x";
    for (unsigned char c : packed) hex += fmt::format("{:02x}", c);
    return hex + " (not msgpack)";
  }
  const msgpack::object& o = handle->get();
  if (o.type == msgpack::type::STR) return "\"" + std::string(o.via.str.ptr, o.via.str.size) + "\"";
  if (o.type == msgpack::type::BIN) {
    std::string hex = "0x";
    for (std::uint32_t i = 0; i < o.via.bin.size; ++i) hex += fmt::format("{:02x}", static_cast<unsigned char>(o.via.bin.ptr[i]));
    return hex;
  }
  std::ostringstream out;
  out << o;
  return out.str();
}

/// The client options shared by store and get.
struct ClientArgs {
  std::string peer;
  std::string mode = "tcp";
  std::string authority;
};

/// Request authorization for a swarm whose members share the authority key in
/// `authority_file`: this node mints its own token for `identity_file`'s key (a fresh key
/// when empty). Errors: the key files' (not_found, malformed).
Result<std::shared_ptr<core::dht::Authorizer>> authorizer_from(const std::string& authority_file,
                                                              const std::string& identity_file) {
  auto authority = messages::load_key_file(authority_file);
  if (!authority) return authority.error();
  auto local = identity_file.empty() ? messages::Ed25519PrivateKey::generate() : messages::load_key_file(identity_file);
  if (!local) return local.error();
  auto issuer = core::dht::AuthorityTokenIssuer::create(*authority, "apiary-dht", local->public_key());
  if (!issuer) return issuer.error();
  auto rng = std::make_shared<std::mt19937_64>(std::random_device{}());
  core::dht::NonceSource nonces = [rng] {
    std::string nonce(8, '\0');
    const std::uint64_t bits = (*rng)();
    for (std::size_t i = 0; i < 8; ++i) nonce[i] = static_cast<char>((bits >> (8 * i)) & 0xff);
    return nonce;
  };
  return std::shared_ptr<core::dht::Authorizer>(std::make_shared<core::dht::TokenAuthorizer>(
      *local, std::make_shared<core::dht::AuthorityTokenIssuer>(std::move(*issuer)), std::move(nonces)));
}

/// Starts a client-mode node bootstrapped from `args.peer`; prints the error and sets
/// `rc` if it cannot.
std::unique_ptr<Dht> start_client(const char* what, const ClientArgs& args, int& rc) {
  DhtOptions o;
  o.client_mode = true;
  o.mode = parse_mode(args.mode);
  o.initial_peers = {args.peer};
  if (!args.authority.empty()) {
    auto authorizer = authorizer_from(args.authority, "");
    if (!authorizer) {
      std::fprintf(stderr, "apiary dht %s: --authority %s: %s\n", what, args.authority.c_str(),
                   authorizer.error().what().c_str());
      rc = 1;
      return nullptr;
    }
    o.authorizer = *authorizer;
  }
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
    std::printf("%s = %s expires in %.1f s\n", key.c_str(), format_packed(*regular).c_str(), found.expiration - now);
    return 0;
  }
  const auto& dict = std::get<core::dht::FoundValue::Dictionary>(found.value);
  if (dict.empty()) {
    std::printf("%s: not found (an empty dictionary)\n", key.c_str());
    return 1;
  }
  for (const auto& [sub, entry] : dict) {
    std::printf("%s[%s] = %s expires in %.1f s\n", key.c_str(), format_packed(sub).c_str(),
                format_packed(entry.value).c_str(), entry.expiration_time - now);
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
  cmd->add_option("--identity", opts->identity_file,
                  "Ed25519 key file (see `apiary identity create`); default: a fresh key for this run");
  cmd->add_option("--mode", *mode, "Same-host lanes: tcp or shm")->check(CLI::IsMember({"tcp", "shm"}))->capture_default_str();
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
  auto* get = cmd->add_subcommand("get", "Print the value of a string KEY found through the node at --peer");
  get->add_option("--peer", client->peer, "Multiaddr of a DHT node")->required();
  get->add_option("key", *key, "The key (a string)")->required();
  get->add_flag("--latest", *latest, "Ask every replica and merge dictionary subkeys");
  get->add_option("--mode", client->mode, "tcp or shm (must match the node's)")->check(CLI::IsMember({"tcp", "shm"}));
  get->add_option("--authority", client->authority, authority_help);

  return [=]() {
    if (store->parsed()) {
      return run_store(*client, *key, *value, subkey_opt->count() > 0 ? std::optional<std::string>(*subkey) : std::nullopt,
                       *ttl);
    }
    if (get->parsed()) return run_get(*client, *key, *latest);
    block_shutdown_signals();
    opts->mode = parse_mode(*mode);
    if (!authority->empty()) {
      auto authorizer = authorizer_from(*authority, opts->identity_file);
      if (!authorizer) {
        std::fprintf(stderr, "apiary dht: --authority %s: %s\n", authority->c_str(), authorizer.error().what().c_str());
        return 1;
      }
      opts->authorizer = *authorizer;
    }
    auto dht = Dht::start(*opts);
    if (!dht) {
      std::fprintf(stderr, "apiary dht: %s\n", dht.error().what().c_str());
      return dht.error().code == errc::invalid_argument ? 2 : 1;
    }
    std::printf("listening %s\n", (*dht)->address().to_string().c_str());
    std::fflush(stdout);
    const int sig = wait_for_shutdown_signal();
    std::printf("stopping on %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    std::fflush(stdout);
    (*dht)->stop();
    return 0;
  };
}

}  // namespace apiary::apps
