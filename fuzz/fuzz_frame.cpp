// libFuzzer target: what a connection delivers, from the envelope bytes up. Each input is
// a script of steps on one RPC engine that serves two handles and has three calls of its
// own open: a frame from one of two peers (envelope bytes and payload, checked and joined
// as the UCX transport does: decode_envelope, the announced payload size, the frame size
// limit, the spliced head and tail), a clock tick, a peer going down, or a local command on
// a call (send, end, fail, cancel). No input may crash, leak or trip the sanitizers, every
// delivery must name a call the engine had, and the engine must end every call once its
// peers are down.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "core/rpc/engine.hpp"
#include "transport/transport.hpp"

namespace {

using namespace apiary;
namespace rpc = apiary::core::rpc;

/// Reads the script: bytes, integers and strings, zeros once the input runs out.
class Script {
 public:
  Script(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  [[nodiscard]] bool done() const { return at_ >= size_; }
  std::uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  std::uint32_t u16() { return static_cast<std::uint32_t>(byte()) | static_cast<std::uint32_t>(byte()) << 8; }
  std::string bytes(std::size_t n) {
    n = std::min(n, size_ - std::min(at_, size_));
    std::string out(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

constexpr std::size_t k_frame_limit = 1 << 16;  // the transport's max_frame_bytes, scaled down
const PeerKey k_peers[2] = {"127.0.0.1:4001", "127.0.0.1:4002"};

/// A frame as the UCX transport receives it (Transport::on_frame_am): the envelope decoded
/// and checked, the payload held against what the envelope announces and the size limit,
/// the spliced pieces joined.
rpc::Effects receive(rpc::Engine& engine, core::TimePoint now, const PeerKey& peer, const std::string& header,
                     const std::string& body) {
  Result<pb::Envelope> decoded = transport::decode_envelope(header.data(), header.size());
  if (!decoded.ok()) return {};
  pb::Envelope env = std::move(*decoded);
  const auto kind = env.kind();
  if (kind == pb::HELLO || kind == pb::KEEPALIVE || kind == pb::KEEPALIVE_ACK) return {};
  if (kind == pb::OPEN) {
    env.set_listen_addr(peer);
    if (env.peer_id().empty()) env.set_peer_id("fuzzed");
  }
  std::optional<Error> refused;
  Buffer payload = Buffer::copy_of(body);
  if (env.payload_size() != body.size()) {
    refused = make_error(errc::malformed, "payload of {} bytes, {} announced", body.size(), env.payload_size());
  } else if (env.payload_head().size() + body.size() + env.payload_tail().size() > k_frame_limit) {
    refused = make_error(errc::too_large, "frame over {} bytes", k_frame_limit);
  } else {
    payload = transport::join_spliced(env, std::move(payload));
  }
  return engine.on_frame(now, peer, env, std::move(payload), refused);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Script script(data, size);
  rpc::Engine engine;
  engine.serve("apiary.test.unary", 1);
  engine.serve("apiary.test.stream", 2);
  core::TimePoint now{};
  std::set<rpc::CallId> known;  // every call the engine opened or was opened
  const auto take = [&](const rpc::Effects& fx) {
    for (const auto& d : fx.deliveries) {
      if (d.kind == rpc::DeliveryKind::open) known.insert(d.call);
      if (known.count(d.call) == 0) __builtin_trap();  // a delivery for a call that never was
    }
  };
  for (rpc::CallId id = 1; id <= 3; ++id) {
    const auto kind = id == 1 ? pb::UNARY : id == 2 ? pb::SERVER_STREAM : pb::BIDI_STREAM;
    known.insert(id);
    take(engine.open(now, id, 3, k_peers[id % 2], "apiary.test.remote", kind, std::chrono::seconds(5),
                     id == 3 ? std::nullopt : std::optional<Payload>(Buffer::copy_of("first")), id == 1));
  }
  for (int steps = 0; !script.done() && steps < 64; ++steps) {
    const std::uint8_t op = script.byte();
    const PeerKey& peer = k_peers[op & 1];
    switch ((op >> 1) % 8) {
      case 0:
      case 1:
      case 2: {  // a frame
        const std::string header = script.bytes(script.u16() % 512);
        const std::string body = script.bytes(script.u16());
        take(receive(engine, now, peer, header, body));
        break;
      }
      case 3:
        now += std::chrono::milliseconds(script.u16() * 10);
        take(engine.on_tick(now));
        break;
      case 4:
        take(engine.on_peer_down(now, peer, make_error(errc::peer_down, "gone")));
        break;
      default: {  // a local command on a call of ours or one we serve
        const std::uint8_t pick = script.byte();
        const rpc::CallId id = (pick & 0x80) ? rpc::k_first_served_call + (pick & 7) : 1 + (pick & 3);
        if (!engine.has_call(id)) break;
        switch (pick >> 4 & 3) {
          case 0: take(engine.send(now, id, Payload(Buffer::copy_of(script.bytes(8))), pick & 8)); break;
          case 1: take(engine.end(now, id)); break;
          case 2: take(engine.fail(now, id, make_error(errc::internal, "failed"))); break;
          default: take(engine.cancel(now, id, "cancelled")); break;
        }
      }
    }
  }
  take(engine.on_peer_down(now, k_peers[0], make_error(errc::peer_down, "gone")));
  take(engine.on_peer_down(now, k_peers[1], make_error(errc::peer_down, "gone")));
  if (engine.open_calls() != 0) __builtin_trap();  // a call outlived both its peers
  return 0;
}
