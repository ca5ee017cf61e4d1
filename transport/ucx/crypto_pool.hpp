#pragma once
/// Worker threads that seal and open large payloads of encrypted connections, so the
/// transport's thread keeps driving UCX while AES-GCM runs: a payload is sealed while
/// the one before it is on the wire, and opened while the next one arrives.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace apiary::transport::ucx {

class CryptoPool {
 public:
  /// Starts `threads` workers (at least one).
  explicit CryptoPool(std::size_t threads);
  /// Runs the jobs already submitted, then joins the workers.
  ~CryptoPool();
  CryptoPool(const CryptoPool&) = delete;
  CryptoPool& operator=(const CryptoPool&) = delete;

  /// Runs `job` on a worker, in submission order per worker (FIFO overall).
  void submit(std::function<void()> job);

  /// The default worker count for this machine: half its cores, 1 to 4.
  static std::size_t default_threads();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace apiary::transport::ucx
