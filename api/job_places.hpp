#pragma once
/// The processes of a job and where each runs, derived from its strategy alone, so that
/// a launcher (`apiary launch`), every process it starts, and processes started by
/// another launcher (torchrun, mpirun, Slurm) agree without exchanging anything.
///
/// Ranks: replica r of the strategy (graph_config.replicas order) is rank r ("chief" for
/// 0, "worker" for the others); with PS processes, the k-th PS device of the strategy
/// (core::ps::ps_devices order) is rank R + k ("ps", R replicas). Addresses follow
/// AutoDist's fixed port range, as apiary::AutoDistJob's do: on the host of its device,
/// rank i listens at `port + i`. A node proxy (local_replication) lives on its node's
/// first replica's gateway.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "messages/result.hpp"
#include "strategy.pb.h"

namespace apiary {

/// One process of a job.
struct JobPlace {
  std::int32_t rank = 0;
  std::string role;           ///< "chief", "worker" or "ps"
  std::string device;         ///< its replica device, or the PS device it serves
  std::int32_t replica = -1;  ///< its replica id; -1 for a PS process
  std::string node;           ///< the device's host as the strategy writes it (a launcher reaches it by this)
  std::string host;           ///< the IP address it listens on (a loopback name as 127.0.0.1)
  std::uint16_t port = 0;

  /// "HOST:PORT" ("[V6]:PORT").
  [[nodiscard]] std::string listen() const;
};

/// Every process of a job, by rank.
struct JobPlaces {
  std::vector<JobPlace> places;
  std::size_t replicas = 0;             ///< ranks 0..replicas-1 are the replicas
  std::vector<std::string> ps_devices;  ///< the strategy's PS devices, whether or not they have processes

  /// What `apiary ps --peers` takes to find every other process: "DEVICE=HOST:PORT" of
  /// every PS device, with PS devices "proxy:NODE=HOST:PORT" of every node (its proxy,
  /// when a strategy replicates variables locally), and every replica's "PREFIX DEVICE=HOST:PORT" (`replica_prefix`:
  /// "" for an all-reduce strategy, "replica:" for a mixed one; nullopt: none).
  [[nodiscard]] std::vector<std::string> peers(const std::optional<std::string>& replica_prefix) const;
};

/// Where a device's host listens: a loopback name ("localhost", 127.x, ::1) as
/// 127.0.0.1, an IP address as written, a host name resolved (its first IPv4 address,
/// else IPv6). Errors: invalid_argument naming the device when it is not a device name
/// or its host does not resolve.
[[nodiscard]] Result<std::string> listen_host_of(const std::string& device);

/// The places of `strategy`'s job: its replicas, then (`ps_processes`) one process per
/// PS device. Errors: invalid_argument (no replicas, a device that is not a device name
/// or does not resolve, a port past 65535).
[[nodiscard]] Result<JobPlaces> job_places(const pb::autodist::Strategy& strategy, bool ps_processes,
                                           std::uint32_t first_port);

/// A process's rank as its launcher gave it.
struct LauncherRank {
  std::int32_t rank = 0;
  std::optional<std::int32_t> world_size;  ///< when the launcher said
  std::string source;                      ///< the variable read, e.g. "RANK"
};

/// Reads an environment variable (nullptr: unset); std::getenv in processes.
using EnvLookup = std::function<const char*(const char*)>;

/// The rank a launcher set: `RANK` / `WORLD_SIZE` (apiary launch, torchrun),
/// `OMPI_COMM_WORLD_RANK` / `_SIZE` (Open MPI's mpirun), `SLURM_PROCID` / `SLURM_NTASKS`
/// (srun), `PMI_RANK` / `PMI_SIZE` (other MPIs), the first set; nullopt when none is.
/// Errors: invalid_argument naming the variable when it is not a number in range (or
/// the rank is not below the size).
[[nodiscard]] Result<std::optional<LauncherRank>> launcher_rank(const EnvLookup& env);

/// The first port of the job's range: `APIARY_PORT`, else `MASTER_PORT` + 1 (torchrun's
/// rendezvous port is taken), else 15000. Errors: invalid_argument naming the variable.
[[nodiscard]] Result<std::uint32_t> job_port(const EnvLookup& env);

}  // namespace apiary
