#pragma once
/// A transport::Handler for tests that drive a transport directly: it records every frame
/// and peer_down it is handed, and waits for them.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "transport/transport.hpp"

namespace apiary::testing {

struct FrameRecorder final : transport::Handler {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<PeerKey, transport::Frame>> frames;
  std::vector<std::pair<PeerKey, Error>> downs;

  void on_frame(const PeerKey& from, transport::Frame frame) override {
    std::lock_guard<std::mutex> lock(mu);
    frames.emplace_back(from, std::move(frame));
    cv.notify_all();
  }
  void on_peer_down(const PeerKey& peer, const Error& why) override {
    std::lock_guard<std::mutex> lock(mu);
    downs.emplace_back(peer, why);
    cv.notify_all();
  }
  void on_tick(transport::Clock::time_point) override {}
  std::optional<transport::Clock::time_point> next_wakeup() override { return std::nullopt; }

  /// Waits until `n` frames arrived; false on timeout.
  bool wait_frames(std::size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [&] { return frames.size() >= n; });
  }
  /// The n-th frame (from 0) and its sender (a copy), waiting for it.
  std::optional<std::pair<PeerKey, transport::Frame>> frame(std::size_t n,
                                                            std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, timeout, [&] { return frames.size() > n; })) return std::nullopt;
    transport::Frame copy;
    copy.envelope = frames[n].second.envelope;
    copy.payload = frames[n].second.payload;
    return std::make_pair(frames[n].first, std::move(copy));
  }
  /// The first peer_down, waiting for it.
  std::optional<Error> wait_down(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, timeout, [&] { return !downs.empty(); })) return std::nullopt;
    return downs.front().second;
  }
  /// Why `peer` went down (its last report), waiting for it.
  std::optional<Error> down(const PeerKey& peer, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(mu);
    std::optional<Error> found;
    cv.wait_for(lock, timeout, [&] {
      for (const auto& [k, e] : downs) {
        if (k == peer) found = e;
      }
      return found.has_value();
    });
    return found;
  }
  std::size_t frame_count() {
    std::lock_guard<std::mutex> lock(mu);
    return frames.size();
  }
};

}  // namespace apiary::testing
