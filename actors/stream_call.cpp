// stream_call: a streaming call from non-actor code, its answer collected on the
// transport thread.
#include <atomic>
#include <utility>

#include "actors/rpc.hpp"

namespace apiary::actors {

namespace {

/// Where a stream_call's deliveries go: every callee message, kept in order, until the
/// callee ends its stream (the promise gets them) or the call fails (it gets the
/// error); dropped unset (the gateway stopped), it says so.
class StreamAnswer final : public DirectSink {
 public:
  StreamAnswer(std::string handle, PeerKey peer) : handle_(std::move(handle)), peer_(std::move(peer)) {}
  ~StreamAnswer() override {
    set(make_error(errc::cancelled, "the gateway stopped before '{}' at {} answered", handle_, peer_));
  }
  StreamAnswer(const StreamAnswer&) = delete;
  StreamAnswer& operator=(const StreamAnswer&) = delete;

  std::future<Result<std::vector<Buffer>>> future() { return promise_.get_future(); }

  void deliver(Delivery d) override {
    if (d.kind == DeliveryKind::error) {
      set(std::move(d.error));
      return;
    }
    if (d.has_message) messages_.push_back(std::move(d.data));
    if (d.end_of_stream || d.final) set(std::move(messages_));
  }
  std::optional<core::TimePoint> next_wakeup() override { return std::nullopt; }
  void on_tick(core::TimePoint /*now*/) override {}

 private:
  void set(Result<std::vector<Buffer>> result) {
    if (done_.exchange(true)) return;
    promise_.set_value(std::move(result));
  }

  std::string handle_;
  PeerKey peer_;
  std::vector<Buffer> messages_;
  std::promise<Result<std::vector<Buffer>>> promise_;
  std::atomic<bool> done_{false};
};

}  // namespace

PendingStream stream_call(Gateway& gw, const CallTo& peer, const std::string& handle, std::vector<Payload> messages,
                          std::chrono::milliseconds timeout, std::string caller) {
  auto answer = std::make_shared<StreamAnswer>(handle, peer.key);
  PendingStream out;
  out.answer = answer->future();
  if (messages.empty()) messages.emplace_back();  // a stream opens with a message, even an empty one
  const std::size_t n = messages.size();
  // The gateway runs these in order on its thread: the call opens before its later messages.
  out.id = gw.open(std::shared_ptr<DirectSink>(std::move(answer)), peer.key, handle, pb::BIDI_STREAM, timeout,
                   std::move(messages.front()), n == 1, std::move(caller), {}, peer.callee);
  for (std::size_t i = 1; i < n; ++i) gw.send(out.id, std::move(messages[i]), i + 1 == n);
  return out;
}

}  // namespace apiary::actors
