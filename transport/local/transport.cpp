#include "transport/local/transport.hpp"

namespace apiary::transport::local {

Result<std::string> Fabric::attach(Transport* t, const std::string& host, std::uint16_t port) {
  std::lock_guard<std::mutex> lock(mu_);
  if (port == 0) {
    while (nodes_.count(fmt::format("{}:{}", host, next_port_)) != 0) ++next_port_;
    port = next_port_++;
  }
  auto key = fmt::format("{}:{}", host, port);
  if (!nodes_.emplace(key, t).second) {
    return make_error(errc::unavailable, "cannot listen on {}: address in use", key);
  }
  return key;
}

void Fabric::detach(const std::string& key) {
  std::vector<Transport*> others;
  {
    std::lock_guard<std::mutex> lock(mu_);
    nodes_.erase(key);
    for (auto& [k, t] : nodes_) others.push_back(t);
  }
  for (Transport* t : others) t->post([t, key] { t->peer_gone(key); });
}

bool Fabric::deliver(const std::string& key, std::function<void(Transport&)> fn) {
  std::lock_guard<std::mutex> lock(mu_);  // held so the target cannot detach meanwhile
  auto it = nodes_.find(key);
  if (it == nodes_.end()) return false;
  Transport* t = it->second;
  t->post([t, fn = std::move(fn)] { fn(*t); });
  return true;
}

Transport::Transport(std::shared_ptr<Fabric> fabric, Config config)
    : fabric_(std::move(fabric)), config_(std::move(config)) {}

Transport::~Transport() { stop(); }

Result<std::string> Transport::start(Handler* handler, const std::string& host, std::uint16_t port) {
  if (thread_.joinable()) return make_error(errc::invalid_argument, "transport already started");
  auto key = fabric_->attach(this, host, port);
  if (!key) return key.error();
  key_ = *key;
  handler_ = handler;
  thread_ = std::thread([this] { loop(); });
  return key_;
}

void Transport::post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Stopped: it would never run. Dropped on return (unlocked), with what it holds.
    if (stopping_) return;
    posted_.push_back(std::move(fn));
  }
  cv_.notify_one();
}

void Transport::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    {
      auto batch = std::move(posted_);
      posted_.clear();
      lock.unlock();
      for (auto& fn : batch) fn();
    }  // what the functions held goes now, unlocked: a destructor may post again
    handler_->on_tick(Clock::now());
    auto wake = handler_->next_wakeup();
    lock.lock();
    if (!posted_.empty() || stopping_) continue;
    if (wake) {
      cv_.wait_until(lock, *wake);
    } else {
      cv_.wait(lock);
    }
  }
}

void Transport::send(const PeerKey& to, Frame frame) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.frames_sent;
  }
  contacts_.insert(to);
  const bool ok = fabric_->deliver(to, [from = key_, f = std::move(frame)](Transport& t) mutable {
    t.receive(from, std::move(f));
  });
  if (!ok) {
    handler_->on_peer_down(to, make_error(errc::peer_down, "no local transport listens on {}", to));
  }
}

void Transport::receive(const PeerKey& from, Frame frame) {
  const pb::Envelope& env = frame.envelope;
  const std::size_t total = env.payload_head().size() + frame.payload.size() + env.payload_tail().size();
  const bool oversized = total > config_.max_frame_bytes;
  if (oversized) {
    frame.payload = join_spliced(frame.envelope, std::move(frame.payload));
  } else {
    land_or_join(*handler_, from, frame);  // a spliced body lands in posted memory if it matches
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.frames_received;
    if (oversized) ++stats_.oversized_frames;
    if (frame.landed > 0) ++stats_.frames_landed;
  }
  contacts_.insert(from);
  if (frame.envelope.kind() == pb::OPEN) {
    frame.envelope.set_listen_addr(from);  // in-process keys are listen addresses
  }
  if (oversized) {
    frame.payload_error = make_error(errc::too_large,
                                     "frame payload of {} bytes exceeds the limit of {} bytes",
                                     total, config_.max_frame_bytes);
    frame.payload = Buffer{};
  }
  handler_->on_frame(from, std::move(frame));
}

void Transport::peer_gone(const PeerKey& peer) {
  if (contacts_.erase(peer) == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.peers_down;
  }
  handler_->on_peer_down(peer, make_error(errc::peer_down, "local peer {} stopped", peer));
}

void Transport::disconnect(const PeerKey& peer) { contacts_.erase(peer); }

void Transport::stop() {
  if (!thread_.joinable()) return;
  fabric_->detach(key_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
  // What was posted and never ran is dropped now: it may hold the handler's owners (a
  // host holding its gateway, which holds this transport), which would keep each other
  // alive. Destroyed unlocked: a destructor may post (dropped at once).
  std::vector<std::function<void()>> never_run;
  {
    std::lock_guard<std::mutex> lock(mu_);
    never_run.swap(posted_);
  }
  never_run.clear();
}

Stats Transport::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::string Transport::describe(const PeerKey& peer) { return fmt::format("local in-process link to {}", peer); }

}  // namespace apiary::transport::local
