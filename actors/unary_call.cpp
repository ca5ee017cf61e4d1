#include "actors/rpc.hpp"

#include <atomic>
#include <optional>

namespace apiary::actors {

namespace {

/// Where a unary_call's deliveries go: the first message, then the final delivery sets
/// the promise; dropped unset (the gateway stopped), it says so.
class UnaryAnswer final : public DirectSink {
 public:
  UnaryAnswer(std::string handle, PeerKey peer) : handle_(std::move(handle)), peer_(std::move(peer)) {}
  ~UnaryAnswer() override {
    set(make_error(errc::cancelled, "the gateway stopped before '{}' at {} answered", handle_, peer_));
  }
  UnaryAnswer(const UnaryAnswer&) = delete;
  UnaryAnswer& operator=(const UnaryAnswer&) = delete;

  std::future<Result<Buffer>> future() { return promise_.get_future(); }

  void deliver(Delivery d) override {
    if (d.kind == DeliveryKind::error) {
      set(std::move(d.error));
      return;
    }
    if (d.has_message && !response_) response_ = std::move(d.data);
    if (!d.final) return;
    if (response_) {
      set(std::move(*response_));
    } else {
      set(make_error(errc::protocol, "'{}' at {} ended without a response", handle_, peer_));
    }
  }
  std::optional<core::TimePoint> next_wakeup() override { return std::nullopt; }
  void on_tick(core::TimePoint /*now*/) override {}

 private:
  void set(Result<Buffer> result) {
    if (done_.exchange(true)) return;
    promise_.set_value(std::move(result));
  }

  std::string handle_;
  PeerKey peer_;
  std::optional<Buffer> response_;
  std::promise<Result<Buffer>> promise_;
  std::atomic<bool> done_{false};
};

}  // namespace

PendingUnary unary_call(Gateway& gw, const PeerKey& peer, const std::string& handle, Payload request,
                        std::chrono::milliseconds timeout, std::string caller) {
  auto answer = std::make_shared<UnaryAnswer>(handle, peer);
  PendingUnary out;
  out.answer = answer->future();
  out.id = gw.unary(std::shared_ptr<DirectSink>(std::move(answer)), peer, handle, std::move(request), timeout,
                    std::move(caller));
  return out;
}

}  // namespace apiary::actors
