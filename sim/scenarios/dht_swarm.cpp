#include "sim/scenarios/dht_swarm.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "messages/identity/base58.hpp"
#include "sim/scenarios/swarm_size.hpp"

namespace apiary::sim::scenarios {

void run_dht_op(World& world, const core::PeerAddr& addr, DhtHost& host, core::dht::OpId op, core::dht::NodeOp run,
                const DhtOpSink& sink) {
  if (!world.running(addr)) return;
  auto fx = host.call(world.now(), "", core::dht::k_run_method, core::Value::of(std::move(run)),
                      [addr, op, sink](Result<core::Value> r) {
                        core::dht::OpResult result;
                        if (r.ok() && r->as<core::dht::OpResult>() != nullptr) {
                          result = std::move(*r->as<core::dht::OpResult>());
                        } else {
                          result.status = r.ok() ? make_error(errc::internal, "the node answered with a {}", r->type_name())
                                                 : r.error();
                        }
                        result.op = op;
                        if (sink) sink(addr, std::move(result));
                      });
  (void)world.submit(addr, std::move(fx));
}

core::PeerAddr dht_addr(std::size_t i, const core::dht::NodeId& id) {
  // An identity-multihash PeerID (00 24, then the protobuf PublicKey 08 01 12 20 <32
  // bytes>) whose "Ed25519 key" is the node id plus the index: unique and printable.
  std::string multihash("\x00\x24\x08\x01\x12\x20", 6);
  multihash += id.to_bytes();
  for (int b = 0; b < 12; ++b) {
    multihash.push_back(b < 8 ? static_cast<char>((static_cast<std::uint64_t>(i) >> (8 * b)) & 0xff)
                              : '\0');
  }
  return swarm_address(i, 4000, messages::PeerId::from_bytes(multihash).value());
}

namespace {

/// FNV-1a 64 of a seed and two strings, then a splitmix64 finish so nearby inputs
/// spread over the whole range.
std::uint64_t link_hash(std::uint64_t seed, const std::string& a, const std::string& b) {
  TraceHash h;
  h.add_u64(seed);
  h.add_string(a);
  h.add_string(b);
  std::uint64_t z = h.value() + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

Result<LinkRule> dht_link_rule(std::uint64_t seed, core::Duration min_latency,
                               core::Duration max_latency, double loss) {
  if (min_latency < core::Duration::zero() || max_latency < min_latency) {
    return make_error(errc::invalid_argument,
                      "expected latencies 0 <= min <= max, got min={} ns max={} ns; pass a "
                      "range such as 1-50 ms", min_latency.count(), max_latency.count());
  }
  if (!(loss >= 0.0 && loss <= 1.0)) {
    return make_error(errc::invalid_argument,
                      "expected a loss probability in [0, 1], got {}; pass e.g. 0.01", loss);
  }
  const auto span = static_cast<std::uint64_t>((max_latency - min_latency).count()) + 1;
  return LinkRule([=](const core::PeerAddr& from, const core::PeerAddr& to) {
    // Both directions of a pair hash the same way round, so a link is symmetric.
    const bool ordered = from < to;
    const std::uint64_t h = link_hash(seed, (ordered ? from : to).multiaddr(), (ordered ? to : from).multiaddr());
    LinkModel model;
    model.latency = min_latency + core::Duration(static_cast<core::Duration::rep>(h % span));
    model.jitter = core::Duration::zero();
    model.loss = loss;
    return model;
  });
}

Result<DhtSwarm> DhtSwarm::create(World& world, const DhtSwarmOptions& options, DhtOpSink sink) {
  if (auto st = check_swarm_size(options.nodes, "DhtSwarmOptions", "dht_addr"); !st) return st.error();
  if (options.bootstrap_peers == 0) {
    return make_error(errc::invalid_argument,
                      "expected bootstrap_peers >= 1, got 0; set DhtSwarmOptions::bootstrap_peers");
  }
  if (options.start_interval < core::Duration::zero()) {
    return make_error(errc::invalid_argument,
                      "expected start_interval >= 0 ns, got {} ns; set "
                      "DhtSwarmOptions::start_interval", options.start_interval.count());
  }
  if (auto st = core::dht::validate(options.node); !st) return st.error();

  DhtSwarm swarm;
  swarm.options_ = options;
  // One thread runs every node: they share one address book, each address parsed once.
  if (!swarm.options_.node.address_book) {
    swarm.options_.node.address_book = std::make_shared<messages::AddressBook>(std::size_t{1} << 24);
  }
  swarm.sink_ = std::move(sink);
  swarm.addrs_.reserve(options.nodes);
  swarm.hosts_.reserve(options.nodes);
  for (std::size_t i = 0; i < options.nodes; ++i) {
    // Node i knows up to bootstrap_peers distinct random nodes started before it.
    std::vector<core::PeerAddr> bootstrap;
    const std::size_t want = std::min(options.bootstrap_peers, i);
    while (bootstrap.size() < want) {
      const core::PeerAddr& pick = swarm.addrs_[world.rng().uniform(i)];
      if (std::find(bootstrap.begin(), bootstrap.end(), pick) == bootstrap.end()) {
        bootstrap.push_back(pick);
      }
    }
    const core::TimePoint at =
        options.start_at + options.start_interval * static_cast<core::Duration::rep>(i);
    if (auto added = swarm.add(world, std::move(bootstrap), at); !added) return added.error();
  }
  return swarm;
}

Result<std::size_t> DhtSwarm::add(World& world, std::vector<core::PeerAddr> bootstrap,
                                  core::TimePoint at) {
  const std::size_t index = addrs_.size();
  const core::dht::NodeId id = core::dht::NodeId::random([&] { return world.rng().next_u64(); });
  core::dht::NodeConfig config = options_.node;
  config.seed = world.rng().next_u64();
  core::PeerAddr addr = dht_addr(index, id);
  options_.node.address_book->add(addr);
  core::dht::NodeRoleConfig role;
  role.addressed = false;  // every simulated address is one node
  auto host = std::make_unique<DhtHost>(
      std::make_unique<core::dht::Node>(id, addr, std::move(config), nullptr, options_.dht_epoch), role);
  DhtHost* typed = host.get();
  if (auto added = world.add_node(addr, std::move(host)); !added) return added.error();
  if (auto st = world.start_node(addr, at); !st) return st.error();
  // Right after it starts, the node bootstraps: a local operation, as a process's Dht does.
  world.schedule(at, [addr, typed, bootstrap = std::move(bootstrap), sink = sink_](World& w) {
    run_dht_op(w, addr, *typed, k_bootstrap_op,
               [bootstrap](core::dht::Node& n, core::TimePoint now, core::dht::OpId op) {
                 return n.start(now, op, bootstrap);
               },
               sink);
  });
  addrs_.push_back(std::move(addr));
  hosts_.push_back(typed);
  return index;
}

Result<std::size_t> DhtSwarm::add_joiner(World& world, core::TimePoint at) {
  // The joiner's bootstrap peers are drawn now among the running nodes.
  std::vector<core::PeerAddr> bootstrap;
  for (std::size_t tries = 0; bootstrap.size() < options_.bootstrap_peers && tries < 64; ++tries) {
    auto pick = random_running(world);
    if (!pick) break;
    const core::PeerAddr& addr = addrs_[*pick];
    if (std::find(bootstrap.begin(), bootstrap.end(), addr) == bootstrap.end()) {
      bootstrap.push_back(addr);
    }
  }
  if (bootstrap.empty()) {
    return make_error(errc::unavailable,
                      "expected a running node for a joiner to bootstrap from, got none of {}; "
                      "add joiners while the swarm is up", addrs_.size());
  }
  return add(world, std::move(bootstrap), at);
}

Result<std::size_t> DhtSwarm::random_running(World& world) const {
  // Rejection sampling stays O(1) while most nodes run; a scan settles the rest.
  for (int tries = 0; tries < 64 && !addrs_.empty(); ++tries) {
    const auto pick = static_cast<std::size_t>(world.rng().uniform(addrs_.size()));
    if (world.running(addrs_[pick])) return pick;
  }
  std::vector<std::size_t> running;
  for (std::size_t i = 0; i < addrs_.size(); ++i) {
    if (world.running(addrs_[i])) running.push_back(i);
  }
  if (running.empty()) {
    return make_error(errc::unavailable,
                      "expected a running node in a swarm of {}, got none; run the world past "
                      "the start times or kill fewer", addrs_.size());
  }
  return running[world.rng().uniform(running.size())];
}

}  // namespace apiary::sim::scenarios
