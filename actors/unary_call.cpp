#include "actors/rpc.hpp"

#include <atomic>
#include <optional>

namespace apiary::actors {

namespace {

/// Where a unary call's deliveries go: the first message, then the final delivery hands
/// the answer to `done`; dropped before that (the gateway stopped), it says so.
class UnaryAnswer final : public DirectSink {
 public:
  UnaryAnswer(std::string handle, PeerKey peer, UnaryDone done)
      : handle_(std::move(handle)), peer_(std::move(peer)), done_fn_(std::move(done)) {}
  ~UnaryAnswer() override {
    set(make_error(errc::cancelled, "the gateway stopped before '{}' at {} answered", handle_, peer_));
  }
  UnaryAnswer(const UnaryAnswer&) = delete;
  UnaryAnswer& operator=(const UnaryAnswer&) = delete;

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
    done_fn_(std::move(result));
  }

  std::string handle_;
  PeerKey peer_;
  std::optional<Buffer> response_;
  UnaryDone done_fn_;
  std::atomic<bool> done_{false};
};

}  // namespace

PendingUnary unary_call(Gateway& gw, const CallTo& peer, const std::string& handle, Payload request,
                        std::chrono::milliseconds timeout, std::string caller) {
  auto promise = std::make_shared<std::promise<Result<Buffer>>>();
  PendingUnary out;
  out.answer = promise->get_future();
  out.id = unary_call_then(gw, peer, handle, std::move(request), timeout, std::move(caller),
                           [promise](Result<Buffer> answer) { promise->set_value(std::move(answer)); });
  return out;
}

CallId unary_call_then(Gateway& gw, const CallTo& peer, const std::string& handle, Payload request,
                       std::chrono::milliseconds timeout, std::string caller, UnaryDone done) {
  auto answer = std::make_shared<UnaryAnswer>(handle, peer.key, std::move(done));
  return gw.unary(std::shared_ptr<DirectSink>(std::move(answer)), peer.key, handle, std::move(request), timeout,
                  std::move(caller), peer.callee);
}

}  // namespace apiary::actors
