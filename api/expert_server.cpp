#include "api/expert_server.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "actors/role_host.hpp"
#include "api/dht.hpp"
#include "api/expert_files.hpp"
#include "api/runtime.hpp"
#include "api/startup.hpp"
#include "core/addressing.hpp"
#include "core/moe/dht_layout.hpp"
#include "core/moe/expert_backend.hpp"
#include "core/moe/expert_uid.hpp"
#include "core/rng.hpp"

namespace apiary {
namespace {

namespace moe = core::moe;

/// How long a checkpoint waits for the role's states (a batch may be running).
constexpr auto k_state_wait = std::chrono::seconds(60);

/// The options every server uses (its pools and declarations).
Status check_serving(const ExpertServerOptions& o) {
  if (!(o.update_period > 0)) {
    return make_error(errc::invalid_argument, "--update-period must be positive seconds, got {}", o.update_period);
  }
  if (o.checkpoint_period && !(*o.checkpoint_period > 0)) {
    return make_error(errc::invalid_argument, "--checkpoint-period must be positive seconds, got {}",
                      *o.checkpoint_period);
  }
  if (o.expiration && !(*o.expiration > 0)) {
    return make_error(errc::invalid_argument, "--expiration must be positive seconds, got {}", *o.expiration);
  }
  moe::PoolConfig pool{o.max_batch_size, o.min_batch_size, std::nullopt};
  if (Status valid = pool.validate(); !valid) {
    return make_error(errc::invalid_argument, "--max-batch-size / --min-batch-size: {}", valid.error().message);
  }
  return ok_status();
}

}  // namespace

/// The identities (multiaddrs with /p2p/) that serve experts in this process: one server
/// each, as its handles are the same. Held while a server runs.
class ServingClaim {
 public:
  ServingClaim() = default;
  ServingClaim(ServingClaim&& other) noexcept : address_(std::exchange(other.address_, {})) {}
  ServingClaim& operator=(ServingClaim&& other) noexcept {
    release();
    address_ = std::exchange(other.address_, {});
    return *this;
  }
  ServingClaim(const ServingClaim&) = delete;
  ServingClaim& operator=(const ServingClaim&) = delete;
  ~ServingClaim() { release(); }

  static Result<ServingClaim> take(const std::string& address) {
    std::lock_guard<std::mutex> lock(mutex());
    if (!taken().insert(address).second) {
      return make_error(errc::invalid_argument,
                        "{} serves experts already; serve all of them from one server, or start another on its own "
                        "runtime (another DHT node in Python)",
                        address);
    }
    ServingClaim out;
    out.address_ = address;
    return out;
  }
  void release() {
    if (address_.empty()) return;
    std::lock_guard<std::mutex> lock(mutex());
    taken().erase(address_);
    address_.clear();
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::set<std::string>& taken() {
    static std::set<std::string> s;
    return s;
  }
  std::string address_;
};

struct ExpertServer::Impl {
  Runtime* runtime = nullptr;
  std::string address;  ///< where clients call: the runtime's multiaddr with /p2p/
  ServingClaim claim;
  Dht* dht = nullptr;
  std::vector<std::string> uids;
  std::vector<std::string> handles;
  actors::RoleHost host;
  double update_period = 30;
  double expiration = 60;

  /// The role's counters, published from its host's thread (which may outlive this).
  struct Board {
    std::mutex mutex;
    moe::ExpertServerStats stats;
  };
  std::shared_ptr<Board> board = std::make_shared<Board>();

  mutable std::mutex mutex;  ///< guards the fields below
  std::condition_variable wake;
  bool stopping = false;
  ExpertServerCounters counters;
  std::thread declarer;
  std::string checkpoint_dir;
  double checkpoint_period = 30;
  std::thread checkpointer;
  std::mutex save_mutex;  ///< one checkpoint at a time

  /// Saves every expert's state (asked of the role) under checkpoint_dir.
  Status save() {
    if (checkpoint_dir.empty() || !host) return ok_status();
    std::lock_guard<std::mutex> one_at_a_time(save_mutex);
    auto states = actors::call_role(host, "", moe::k_state_method, core::Value{});
    if (states.wait_for(k_state_wait) != std::future_status::ready) {
      return make_error(errc::deadline_exceeded, "the expert server did not give its experts' states within {} s",
                        k_state_wait.count());
    }
    auto got = states.get();
    if (!got) return got.error();
    const auto* map = got->as<moe::ExpertStates>();
    if (map == nullptr) return make_error(errc::internal, "the expert server gave no states");
    Status saved = save_checkpoints(checkpoint_dir, *map);
    std::lock_guard<std::mutex> lock(mutex);
    if (saved) ++counters.checkpoints;
    counters.checkpoint_error = saved ? std::string() : saved.error().message;
    return saved;
  }

  /// Saves a checkpoint every checkpoint_period until stopped.
  void checkpoint_loop() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      const auto next = std::chrono::steady_clock::now() + std::chrono::duration<double>(checkpoint_period);
      if (wake.wait_until(lock, next, [this] { return stopping; })) break;
      lock.unlock();
      (void)save();  // its error is kept in the counters
      lock.lock();
    }
  }

  /// Declares the experts now and every update_period until stopped. Waits in short
  /// slices, so that stopping never waits for a store to a dead peer.
  void declare_loop() {
    auto entries = moe::declaration_entries(uids, address);
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping && entries) {
      lock.unlock();
      auto stored = dht->store_records(moe::store_items(*entries, runtime->dht_time() + expiration));
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(update_period);
      bool ready = false;
      while (!ready && std::chrono::steady_clock::now() < give_up) {
        ready = stored.wait_for(std::chrono::milliseconds(50)) == std::future_status::ready;
        std::lock_guard<std::mutex> check(mutex);
        if (stopping) break;
      }
      bool ok = false;
      if (ready) {
        auto result = stored.get();
        ok = result && std::any_of(result->begin(), result->end(), [](const DhtStored& s) { return s.ok; });
      }
      lock.lock();
      (ok ? counters.declarations : counters.failed_declarations) += 1;
      wake.wait_until(lock, give_up, [this] { return stopping; });
    }
  }
};

ExpertServer::ExpertServer() : impl_(std::make_unique<Impl>()) {}

Result<std::unique_ptr<ExpertServer>> ExpertServer::start(Runtime& runtime, const ExpertServerOptions& options,
                                                          Dht* dht) {
  if (options.hidden_dim == 0) return make_error(errc::invalid_argument, "--hidden-dim must be at least 1, got 0");
  if (Status ok = check_serving(options); !ok) return ok.error();
  Result<std::vector<std::string>> uids = make_error(errc::internal, "no uids");
  {
    const api::CafThreadRelease released;
    uids = expert_uids_of(options, dht);
  }
  if (!uids) return uids.error();
  std::vector<ExpertSlot> experts;
  for (std::size_t i = 0; i < uids->size(); ++i) {
    moe::FfnConfig config;
    config.hidden_dim = options.hidden_dim;
    config.learning_rate = options.learning_rate;
    config.seed = options.seed + i;
    auto expert = make_builtin_expert(options.expert_cls, config, options.nop_delay);
    if (!expert) return make_error(errc::invalid_argument, "--expert-cls: {}", expert.error().message);
    experts.push_back(ExpertSlot{(*uids)[i], std::move(*expert)});
  }
  return start(runtime, std::move(experts), options, dht);
}

Result<std::unique_ptr<ExpertServer>> ExpertServer::start(Runtime& runtime, std::vector<ExpertSlot> experts,
                                                          const ExpertServerOptions& options, Dht* dht) {
  const api::CafThreadRelease released;
  if (Status ok = check_serving(options); !ok) return ok.error();
  if (experts.empty()) return make_error(errc::invalid_argument, "an expert server needs at least one expert");

  // Addressed by PeerID: other servers may share this gateway.
  auto role = std::make_unique<moe::ExpertServerRole>(
      core::Addressing(runtime.peer_id(), runtime.shares_gateway()));
  auto claim = ServingClaim::take(runtime.address().to_string());
  if (!claim) return claim.error();
  moe::PoolConfig pool{options.max_batch_size, options.min_batch_size, std::nullopt};
  if (options.timeout) pool.timeout = std::chrono::duration_cast<core::Duration>(*options.timeout);
  std::vector<std::string> uids;
  for (auto& slot : experts) {
    if (!moe::is_valid_uid(slot.uid)) {
      return make_error(errc::invalid_argument,
                        "expert uid '{}' is not a uid: a prefix without dots, then numeric coordinates ('ffn.3.14')",
                        slot.uid);
    }
    uids.push_back(slot.uid);
    if (!options.checkpoint_dir.empty() && slot.backend) {
      if (Status loaded = load_checkpoint(options.checkpoint_dir, slot.uid, *slot.backend); !loaded) {
        return loaded.error();
      }
    }
    if (Status added = role->add_expert(slot.uid, std::move(slot.backend), pool); !added) {
      return make_error(errc::invalid_argument, "{}", added.error().message);
    }
  }

  std::unique_ptr<ExpertServer> server(new ExpertServer());
  Impl& impl = *server->impl_;
  impl.runtime = &runtime;
  impl.dht = dht;
  impl.uids = std::move(uids);
  impl.address = runtime.address().to_string();
  impl.claim = std::move(*claim);
  impl.handles = role->handles();
  impl.update_period = options.update_period;
  impl.expiration = options.expiration.value_or(std::max(2 * options.update_period, 3.0));
  impl.checkpoint_dir = options.checkpoint_dir;
  impl.checkpoint_period = options.checkpoint_period.value_or(options.update_period);
  auto watched = actors::watched<moe::ExpertServerRole>(
      std::move(role), [board = impl.board](const moe::ExpertServerRole& r) {
        std::lock_guard<std::mutex> lock(board->mutex);
        board->stats = r.stats();
      });
  impl.host = actors::spawn_role(runtime.system(), runtime.gateway(), std::move(watched), options.host);
  if (dht != nullptr) impl.declarer = std::thread([self = &impl] { self->declare_loop(); });
  if (!impl.checkpoint_dir.empty()) impl.checkpointer = std::thread([self = &impl] { self->checkpoint_loop(); });
  return server;
}

ExpertServer::~ExpertServer() { stop(); }

const std::vector<std::string>& ExpertServer::uids() const { return impl_->uids; }

std::string ExpertServer::address() const { return impl_->address; }

ExpertServerCounters ExpertServer::counters() const {
  ExpertServerCounters out;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    out = impl_->counters;
  }
  std::lock_guard<std::mutex> lock(impl_->board->mutex);
  out.server = impl_->board->stats;
  return out;
}

Status ExpertServer::checkpoint() { return impl_->save(); }

void ExpertServer::stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  if (impl_->declarer.joinable()) impl_->declarer.join();
  if (impl_->checkpointer.joinable()) impl_->checkpointer.join();
  if (impl_->host) {
    (void)impl_->save();  // the last checkpoint; its error is kept in the counters
    actors::stop_role(*impl_->runtime->gateway(), impl_->host, impl_->handles);
    impl_->host = actors::RoleHost{};
    impl_->claim.release();
  }
}

}  // namespace apiary
