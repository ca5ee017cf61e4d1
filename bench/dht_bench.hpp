#pragma once
/// `apiary bench dht`: the workload of the shared OpenDHT harness (BASELINES.md §3) on
/// apiary and on OpenDHT in the same run. Per system and node count N, one child
/// process hosts N DHT nodes on 127.0.0.1, bootstraps them all to node 0, then per
/// concurrency level makes `ops` puts of distinct 64 B values from random nodes and
/// `ops` gets of those keys from a random node other than the storer. The children print
/// "dht_result" lines (bench/dht_bench_report.hpp); the parent prints one table per N:
/// apiary, OpenDHT and their ratio. See bench/README.md.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "messages/result.hpp"

namespace apiary::bench {

/// What `run_dht_bench` measures.
struct DhtBenchOptions {
  std::vector<std::size_t> nodes{32, 128, 256};  ///< node counts, one child per system and N
  std::size_t ops = 1000;                        ///< puts, then as many gets, per concurrency
  std::vector<std::size_t> concs{1, 16};         ///< operations in flight
  std::size_t reps = 1;                          ///< child runs per system and N (median shown)
  std::size_t value_bytes = 64;                  ///< bytes per value
  std::uint64_t seed = 1;                        ///< seeds keys, values, node picks (rep r: seed + r)
  int op_timeout_s = 90;                         ///< per phase inside a child
  bool latest = false;                           ///< apiary gets with latest=true (ask every replica)
  bool authorized = false;                       ///< apiary nodes authorize every call (a swarm authority)
  std::string mode = "tcp";                      ///< apiary's UCX lanes: "tcp" or "shm"
  std::size_t per_gateway = 64;                  ///< apiary nodes sharing one gateway (transport)
  std::string host = "transport";                ///< apiary nodes' role host: "actor" or "transport" (thread)
  std::vector<std::string> systems{"apiary", "opendht"};  ///< which children to run
  std::string self_exe;      ///< runs the apiary child (`<self_exe> bench dht-child ...`); empty: this one
  std::string opendht_path;  ///< apiary_dht_opendht_peer; empty: $APIARY_DHT_OPENDHT_PEER, next to self, PATH
};

/// Runs every child, prints the load, the tables and notes. Returns 0 when every
/// apiary figure was measured, 1 when one was not (or the options are bad).
int run_dht_bench(const DhtBenchOptions& options);

/// The apiary child (`apiary bench dht-child FLAGS`): hosts the nodes in this process
/// on one shared actor system and prints its result lines. `argv` holds the flags of
/// dht_report::ChildArgs (argv[0] is skipped). Returns 0 ok, 1 failure, 2 bad flags.
int run_dht_bench_apiary_child(int argc, char** argv);

/// One parsed "dht_result" line: phase, system, and every key=value as text.
struct DhtResultLine {
  std::string phase;
  std::map<std::string, std::string> fields;
  /// The field as a number; `fallback` when absent or not numeric.
  [[nodiscard]] double number(const std::string& key, double fallback = -1) const;
};

/// Every "dht_result" line of a child's output, in order (other lines are skipped).
std::vector<DhtResultLine> parse_dht_results(std::string_view output);

}  // namespace apiary::bench
