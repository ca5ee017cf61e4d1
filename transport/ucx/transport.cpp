#include "transport/ucx/transport.hpp"

#include <thread>

#include <sched.h>

#include <algorithm>
#include <cstring>

namespace apiary::transport::ucx {

Transport::Transport(Config config) : config_(std::move(config)) {}

Transport::~Transport() { stop(); }

Result<std::string> Transport::start(Handler* handler, const std::string& host, std::uint16_t port) {
  if (running_.exchange(true)) return make_error(errc::invalid_argument, "transport already started");
  handler_ = handler;
  std::promise<Result<std::string>> started;
  auto fut = started.get_future();
  thread_ = std::thread([this, host, port, &started] { run(host, port, &started); });
  auto result = fut.get();
  if (!result) {
    thread_.join();
    running_ = false;
  }
  return result;
}

void Transport::run(std::string host, std::uint16_t port, std::promise<Result<std::string>>* started) {
  if (auto st = setup(host, port); !st) {
    listener_.reset();
    worker_.reset();
    context_.reset();
    started->set_value(st.error());
    return;
  }
  wake_target_ = worker_->get();
  started->set_value(bound_);
  loop();
  shutdown();
}

Status Transport::setup(const std::string& host, std::uint16_t port) {
  if (config_.relay_service) relay_book_.emplace(*config_.relay_service);
  if (!config_.insecure) {
    if (config_.identity) {
      identity_ = config_.identity;
    } else {
      auto key = messages::Ed25519PrivateKey::generate();
      if (!key) return key.error();
      identity_ = *key;
    }
    const std::string proven = messages::PeerId::from_public_key(identity_->public_key()).bytes();
    if (!config_.peer_id.empty() && config_.peer_id != proven) {
      return make_error(errc::invalid_argument,
                        "the transport's PeerID is not that of its identity key, so no handshake could prove "
                        "it: pass the node's key as Config::identity (or run --insecure)");
    }
    config_.peer_id = proven;
    crypto_ = std::make_unique<CryptoPool>(CryptoPool::default_threads());
  }
  auto dev = interface_of(host);
  if (!dev) return dev.error();
  auto ctx = Context::create(config_.mode, *dev);
  if (!ctx) return ctx.error();
  context_.emplace(std::move(*ctx));
  auto w = Worker::create(context_->get());
  if (!w) return w.error();
  worker_.emplace(std::move(*w));
  if (auto st = worker_->register_handlers(&on_frame_am, &on_stray_am, this); !st) return st.error();
  max_header_ = std::min(worker_->max_am_header(), k_max_envelope_bytes);
  auto l = Listener::create(worker_->get(), host, port, &on_conn_request, this);
  if (!l) return l.error();
  listener_.emplace(std::move(*l));
  bound_ = listener_->bound();
  advertised_ = bound_;
  return ok_status();
}

void Transport::post(std::function<void()> fn) {
  bool was_empty = false;
  {
    std::lock_guard<std::mutex> lock(posted_mu_);
    was_empty = posted_.empty();
    posted_.push_back(std::move(fn));
  }
  // Wake the thread only if it may be asleep, and once per batch: it drains everything
  // posted before it sleeps again. A spinning or working thread sees the queue itself.
  if (was_empty && !awake_.load()) {
    if (ucp_worker_h w = wake_target_.load()) ucp_worker_signal(w);
  }
}

void Transport::stop() {
  if (!running_.load() || stopping_.exchange(true)) {
    if (thread_.joinable()) thread_.join();
    return;
  }
  if (ucp_worker_h w = wake_target_.load()) ucp_worker_signal(w);
  if (thread_.joinable()) thread_.join();
}

Stats Transport::stats() const {
  Stats s;
  s.frames_sent = counters_.sent;
  s.frames_received = counters_.received;
  s.bytes_sent = counters_.bytes_sent;
  s.bytes_received = counters_.bytes_received;
  s.malformed_frames = counters_.malformed;
  s.oversized_frames = counters_.oversized;
  s.stray_messages = counters_.stray;
  s.peers_down = counters_.down;
  s.frames_landed = counters_.landed;
  s.handshakes = counters_.handshakes;
  s.refused_connections = counters_.refused;
  s.refused_calls = counters_.refused_calls;
  s.frames_relayed = counters_.relayed;
  s.circuits = counters_.circuits;
  return s;
}

void Transport::loop() {
  using namespace std::chrono;
  while (!stopping_.load()) {
    run_posted();
    accept_pending();
    start_rndv_receives();
    while (ucp_worker_progress(worker_->get()) != 0) {
    }
    dispatch_inbox();
    reap_failed();
    const auto now = Clock::now();
    if (!lingering_.empty()) close_lingering(now, false);
    check_keepalives(now);
    handler_->on_tick(now);
    {
      std::lock_guard<std::mutex> lock(posted_mu_);
      if (!posted_.empty()) continue;
    }
    if (!conn_requests_.empty() || !rndv_pending_.empty() || !inbox_.empty() || !replies_.empty()) continue;
    if (config_.busy_poll.count() > 0) {
      // Spin on the network a while before paying for a sleep and a wakeup.
      const auto until = Clock::now() + config_.busy_poll;
      bool busy = false;
      while (!busy && Clock::now() < until && !stopping_.load()) {
        busy = ucp_worker_progress(worker_->get()) != 0 || !inbox_.empty();
        {
          std::lock_guard<std::mutex> lock(posted_mu_);
          busy = busy || !posted_.empty();
        }
        // Let a just-woken actor thread on this CPU run now rather than at the next
        // preemption (milliseconds away); costs nothing when no one else is runnable.
        if (!busy) sched_yield();
      }
      if (busy) continue;
    }
    // From here posters must signal. A post that lands after this check sees awake_
    // false (the lock orders the two), signals, and the wait below returns at once.
    awake_.store(false);
    {
      std::lock_guard<std::mutex> lock(posted_mu_);
      if (!posted_.empty()) {
        awake_.store(true);
        continue;
      }
    }
    worker_->wait(sleep_budget_ms(Clock::now()));
    awake_.store(true);
  }
}

int Transport::sleep_budget_ms(Clock::time_point now) {
  using namespace std::chrono;
  // Wake at least every keepalive_interval/4 while connections exist, to probe them.
  auto wake = now + hours(1);
  if (!endpoints_.empty()) wake = now + config_.keepalive_interval / 4;
  for (const auto& [slot, r] : reservations_) {
    if (!r.asked) wake = std::min(wake, std::max(r.ask_at, now));
  }
  if (auto w = handler_->next_wakeup()) wake = std::min(wake, *w);
  if (!closing_.empty()) wake = std::min(wake, now + milliseconds(10));
  for (const auto& l : lingering_) wake = std::min(wake, l.second);
  if (wake <= now) return 0;
  return static_cast<int>(duration_cast<milliseconds>(wake - now).count()) + 1;
}

void Transport::run_posted() {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(posted_mu_);
    batch.swap(posted_);
  }
  for (auto& fn : batch) fn();
}

void Transport::finish_sends() {
  auto outstanding = [this] {
    std::size_t n = rndv_sends_;
    for (auto& [h, e] : endpoints_) {
      if (!e->failed) n += e->tx_queue.size();
    }
    return n;
  };
  const auto start = Clock::now();
  auto last_progress = start;
  std::size_t left = outstanding();
  while (left > 0) {
    run_posted();  // a sealed payload's crypto worker posts drain_tx, which sends it
    bool moved = false;
    while (ucp_worker_progress(worker_->get()) != 0) moved = true;
    const std::size_t now_left = outstanding();
    const auto now = Clock::now();
    if (moved || now_left != left) last_progress = now;
    left = now_left;
    if (now - last_progress >= k_stop_idle || now - start >= k_stop_max) break;
    if (!moved) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void Transport::shutdown() {
  run_posted();  // deliver what was queued before stop()
  finish_sends();
  std::vector<void*> reqs;
  for (auto& [h, e] : endpoints_) {
    if (e->ep == nullptr) continue;  // relayed: goes with its relay's connection
    // A connection that never heard from its peer may still be wiring up (a dial through
    // NAT, a slow peer): its queued handshake cannot be flushed, and UCX 1.13 asserts when
    // the worker is destroyed with it pending ("pending request ... should have been
    // flushed"). Over tcp (error mode PEER) it is closed by force, its sends cancelled.
    const bool force = e->failed || (!e->heard && config_.mode == Mode::tcp);
    if (void* r = close_endpoint(e->ep, force)) reqs.push_back(r);
  }
  endpoints_.clear();
  circuits_.clear();
  by_key_.clear();
  close_lingering(Clock::now(), true);
  reqs.insert(reqs.end(), closing_.begin(), closing_.end());
  closing_.clear();
  // Flush closes for a bounded time; a frozen peer must not hold up shutdown.
  const auto give_up = Clock::now() + std::chrono::milliseconds(500);
  while (!reqs.empty() && Clock::now() < give_up) {
    ucp_worker_progress(worker_->get());
    release_completed(reqs);
  }
  // Closes a peer never flushed (it stopped reading: frozen, or not progressing) are
  // given back to UCX, which frees them when their endpoints go with the worker; held
  // unreleased, UCX 1.13 aborts destroying those endpoints ("Assertion `req->flags &
  // UCP_REQUEST_FLAG_RELEASED' failed").
  for (void* r : reqs) {
    ucp_request_cancel(worker_->get(), r);
    ucp_request_free(r);
  }
  // Refuse connections for a quiet spell before the listener goes. UCX 1.13's async thread
  // hands a connection whose handshake began before ucp_listener_destroy to the freed
  // listener (a crash in ucp_cm_server_conn_request_cb when a peer dials a node that is
  // stopping while other nodes of the process run), so the listener is destroyed only once
  // no request came for a while, and the worker, which closes such handshakes, right after.
  const auto quiet = std::chrono::milliseconds(20);
  auto last = Clock::now();
  const auto bound = last + std::chrono::milliseconds(250);
  for (;;) {
    ucp_worker_progress(worker_->get());
    if (!conn_requests_.empty()) {
      for (auto* req : conn_requests_) ucp_listener_reject(listener_->get(), req);
      conn_requests_.clear();
      last = Clock::now();
    }
    const auto now = Clock::now();
    if (now - last >= quiet || now >= bound) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  crypto_.reset();  // its jobs finish first; what they post is never run
  wake_target_ = nullptr;
  rndv_pending_.clear();
  control_out_.clear();
  listener_.reset();
  worker_.reset();
  context_.reset();
}

}  // namespace apiary::transport::ucx
