#pragma once
/// The transport interface: frames (an Envelope plus a payload) between processes,
/// keyed by peer. One implementation per backend: ucx/ (UCP active messages) and
/// local/ (in-process, for unit tests and the simulator's actor mode).
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "envelope.pb.h"
#include "messages/buffer.hpp"
#include "messages/identity/ed25519.hpp"
#include "messages/identity/multiaddr.hpp"
#include "messages/result.hpp"
#include "transport/relay_book.hpp"

namespace apiary::transport {

/// Names the other side of a connection: "host:port" for a connection we dialled,
/// "inbound:N" for one a peer opened to us (answers to its calls go back on it).
using apiary::PeerKey;

/// The transport's clock (monotonic); the gateway passes its readings to core/.
using Clock = std::chrono::steady_clock;

/// A frame: the envelope travels as the active-message header, the payload as data.
struct Frame {
  pb::Envelope envelope;
  Buffer payload;
  /// Set on receipt when the payload was refused (e.g. larger than max_frame_bytes):
  /// the envelope is intact, the payload is empty, and this says why.
  std::optional<Error> payload_error;
  /// Set on receipt when the spliced message's body (this many bytes) was written into a
  /// Landing the handler posted (Handler::landing_for): the payload is then head + tail.
  std::size_t landed = 0;
  /// Sending an OPEN: the callee's PeerID bytes the caller dialled (its multiaddr's /p2p/),
  /// or "" when none was named. On an encrypted connection the frame leaves only if the
  /// peer proved that PeerID (its handshake, or an IDENTITY frame of a node behind its
  /// gateway); otherwise the call is answered at once with an ERROR naming both PeerIDs,
  /// and the call's later frames are dropped. Never on the wire.
  std::string expect_peer;
};

/// How peers on the same host are connected.
enum class Mode {
  tcp,  ///< tcp lanes with UCX's PEER error mode (UCX detects dead peers too)
  shm,  ///< shared-memory lanes (sysv + cma), error mode NONE; apiary's keepalives detect dead peers
};

/// Transport settings. Units are in the names.
struct Config {
  Mode mode = Mode::tcp;
  /// Largest payload accepted from a peer; bigger ones are refused with an error frame.
  std::size_t max_frame_bytes = std::size_t{1} << 30;
  /// A connection silent for this long gets a KEEPALIVE probe.
  std::chrono::milliseconds keepalive_interval{1000};
  /// A connection silent for this long is declared dead (peer_down).
  std::chrono::milliseconds keepalive_timeout{5000};
  /// Spin on the network for this long before sleeping (0 = sleep at once); trades a
  /// core for latency.
  std::chrono::microseconds busy_poll{0};
  /// This node's PeerID bytes. On encrypted connections the handshake proves it with
  /// `identity`, and it must be that key's PeerID (or empty: then it is).
  std::string peer_id;
  /// The identity key that signs this node's handshakes; a fresh one when unset (the
  /// node's PeerID is then new on every start).
  std::optional<messages::Ed25519PrivateKey> identity;
  /// Plaintext connections (`--insecure`: a trusted cluster, or shared memory on one host).
  /// Both sides must choose it: a connection between a secure and an insecure node fails
  /// at once, saying so. By default every connection opens with a Noise XX handshake
  /// (PeerIDs proven by their keys) and every frame, envelope and payload, is encrypted and
  /// authenticated (AES-256-GCM). Only the UCX backend encrypts; local/ is in-process.
  bool insecure = false;
  /// Serve as a relay (transport/README.md "Relays"): keep slots for peers that reserve
  /// one and pass on the relayed connections dialled to them, within these limits.
  /// Unset: reservations are refused, saying this node is not a relay.
  std::optional<RelayLimits> relay_service;
};

/// What a relay granted a reservation (RELAY_RESERVED).
struct RelayGrant {
  std::chrono::milliseconds reservation{0};  ///< the slot lasts this long unless renewed (the transport renews it)
  std::chrono::milliseconds circuit{0};      ///< one relayed connection may last this long
  std::uint64_t circuit_bytes = 0;           ///< and carry this many bytes
};

/// Receives what a transport produces. Every call runs on the transport's own thread.
class Handler {
 public:
  virtual ~Handler() = default;
  /// A frame arrived from `from`.
  virtual void on_frame(const PeerKey& from, Frame frame) = 0;
  /// `peer` is gone (connection error, keepalive timeout, or never reachable).
  virtual void on_peer_down(const PeerKey& peer, const Error& why) = 0;
  /// The loop woke up (after input, or at the time next_wakeup asked for); called on every
  /// turn of the loop, after the functions posted before it ran.
  virtual void on_tick(Clock::time_point now) = 0;
  /// When the handler next needs on_tick, if ever.
  virtual std::optional<Clock::time_point> next_wakeup() = 0;
  /// A frame from `from` (a valid envelope, `body` bytes of payload) is about to be
  /// received; called for every such frame, in arrival order, before its payload is read.
  /// Returns memory posted for the body of a spliced frame (payload_head / payload_tail set;
  /// exactly `body` bytes), or an empty Buffer to receive it as usual. A posted zone is the
  /// handler's to match against the envelope (Landing) and is handed over once.
  virtual Buffer landing_for(const PeerKey& from, const pb::Envelope& envelope, std::size_t body) {
    (void)from;
    (void)envelope;
    (void)body;
    return Buffer{};
  }
};

/// Counters for tests and diagnostics.
struct Stats {
  std::uint64_t frames_sent = 0;
  std::uint64_t frames_received = 0;
  std::uint64_t bytes_sent = 0;       ///< envelope + payload bytes of the frames sent
  std::uint64_t bytes_received = 0;   ///< envelope + payload bytes of the frames received
  std::uint64_t malformed_frames = 0;   ///< unparseable envelopes, dropped with an error reply
  std::uint64_t oversized_frames = 0;   ///< payloads refused for size
  std::uint64_t stray_messages = 0;     ///< active messages to ids apiary does not use
  std::uint64_t peers_down = 0;
  std::uint64_t frames_landed = 0;  ///< spliced frames whose body went into a posted Landing
  std::uint64_t handshakes = 0;     ///< encrypted connections established (both directions)
  std::uint64_t refused_connections = 0;  ///< handshakes failed, mode mismatches, unauthentic frames
  std::uint64_t refused_calls = 0;  ///< calls not sent: the peer did not prove the PeerID dialled
  std::uint64_t frames_relayed = 0;  ///< frames of relayed connections this node passed on as a relay
  std::uint64_t circuits = 0;        ///< relayed connections this node opened or accepted (as an end)
};

/// A transport backend. Lifecycle: start → (post/send)* → stop.
class Transport {
 public:
  virtual ~Transport() = default;
  /// Starts the transport's thread, listening on host:port (port 0 picks one), and
  /// returns the bound "host:port". `handler` must outlive stop().
  virtual Result<std::string> start(Handler* handler, const std::string& host,
                                    std::uint16_t port) = 0;
  /// Runs `fn` on the transport's thread (thread-safe; the one way in from outside).
  virtual void post(std::function<void()> fn) = 0;
  /// Sends a frame to `to`, connecting on first use. Transport thread only.
  /// Failure surfaces as on_peer_down(to, ...).
  virtual void send(const PeerKey& to, Frame frame) = 0;
  /// Forgets `peer`'s connection (e.g. after a protocol violation). Transport thread only.
  virtual void disconnect(const PeerKey& peer) = 0;
  /// Proves one more PeerID on every encrypted connection, now and later: a node that
  /// shares this transport's gateway and names itself as the caller of its calls. A
  /// callee refuses an OPEN whose caller names a PeerID its connection did not prove.
  /// Transport thread only; nothing to do in --insecure mode or in-process.
  virtual void prove_identity(const messages::Ed25519PrivateKey& key) { (void)key; }
  /// Reserves a slot at the relay at `relay` ("host:port") for PeerID `peer_id` (bytes:
  /// this transport's own when empty, or one proven with prove_identity), so that peers
  /// can dial it through the relay (HOST:PORT/p2p/RELAY/p2p-circuit/p2p/PEER), and keeps
  /// it: renewed before it lapses, and asked for again when the connection to the relay is
  /// lost. `done` runs once, on this thread, with the grant or why there is none (the relay
  /// is unreachable or refused; then the transport does not ask again). Transport thread only.
  virtual void reserve(const PeerKey& relay, const std::string& peer_id,
                       std::function<void(Result<RelayGrant>)> done) {
    (void)peer_id;
    done(make_error(errc::unsupported, "this transport does not reach relays (reserving at {})", relay));
  }
  /// The listen address this node tells its peers from now on ("host:port", or a relay's
  /// HOST:PORT/p2p/RELAY/p2p-circuit once it keeps slots for the PeerIDs behind this
  /// transport: a peer then reaches a caller at that address followed by /p2p/ and the
  /// caller's PeerID): in new handshakes, and at once in a HELLO on every established
  /// connection. Transport thread only.
  virtual void advertise(const std::string& listen_addr) { (void)listen_addr; }
  /// Closes connections and joins the thread. Idempotent.
  virtual void stop() = 0;
  /// Snapshot of the counters (thread-safe).
  virtual Stats stats() const = 0;
  /// Describes how frames to `peer` travel (lanes and devices), for diagnostics and
  /// for tests that check traffic stays on loopback. Transport thread only.
  virtual std::string describe(const PeerKey& peer) = 0;
};

/// A buffer for a frame's whole message, `body` bytes between the envelope's spliced head
/// and tail (Envelope.payload_head / payload_tail, copied in here and then cleared from
/// the envelope). The body's bytes, at offset `body_at`, are left for the caller to fill.
inline Buffer spliced_buffer(pb::Envelope& env, std::size_t body, std::size_t& body_at) {
  const std::string& head = env.payload_head();
  const std::string& tail = env.payload_tail();
  body_at = head.size();
  Buffer whole = Buffer::allocate(head.size() + body + tail.size());
  if (!head.empty()) std::memcpy(whole.data(), head.data(), head.size());
  if (!tail.empty()) std::memcpy(whole.data() + head.size() + body, tail.data(), tail.size());
  env.clear_payload_head();
  env.clear_payload_tail();
  return whole;
}

/// The payload of a spliced frame (Envelope.payload_head + payload + payload_tail) in one
/// buffer, with the envelope's head and tail cleared; any other payload as it is. For
/// transports that cannot receive the payload in place between head and tail.
inline Buffer join_spliced(pb::Envelope& env, Buffer payload) {
  if (env.payload_head().empty() && env.payload_tail().empty()) return payload;
  std::size_t body_at = 0;
  Buffer joined = spliced_buffer(env, payload.size(), body_at);
  if (!payload.empty()) std::memcpy(joined.data() + body_at, payload.data(), payload.size());
  return joined;
}

/// Asks `handler` for memory posted for the body (`body` bytes) of the frame with envelope
/// `env` (every frame asks, in arrival order); the zone, if it is one for a spliced frame
/// of exactly that size, else an empty Buffer.
inline Buffer posted_zone(Handler& handler, const PeerKey& from, const pb::Envelope& env, std::size_t body) {
  Buffer zone = handler.landing_for(from, env, body);
  const bool spliced = !env.payload_head().empty() || !env.payload_tail().empty();
  return spliced && zone.size() == body ? zone : Buffer{};
}

/// For transports that land a frame in one step: a posted zone (posted_zone) for the body
/// of spliced frame `frame` (payload as received) gets the body, and the payload is head +
/// tail (frame.landed set); otherwise the pieces are joined (join_spliced). Either way the
/// envelope's head and tail are cleared.
inline void land_or_join(Handler& handler, const PeerKey& from, Frame& frame) {
  pb::Envelope& env = frame.envelope;
  Buffer zone = posted_zone(handler, from, env, frame.payload.size());
  if (zone.empty()) {
    frame.payload = join_spliced(env, std::move(frame.payload));
    return;
  }
  std::memcpy(zone.data(), frame.payload.data(), zone.size());
  frame.landed = zone.size();
  frame.payload = join_spliced(env, Buffer{});
}

/// Serialized size limit of an envelope (well under UCX's max_am_header of 8140 B).
inline constexpr std::size_t k_max_envelope_bytes = 4096;
/// A received envelope of `size` bytes at `data`, decoded; refused (errc::malformed, saying
/// why) when over k_max_envelope_bytes, not an apiary.pb.Envelope, or of an unknown kind.
[[nodiscard]] Result<pb::Envelope> decode_envelope(const void* data, std::size_t size);
/// Longest handle name accepted.
inline constexpr std::size_t k_max_handle_bytes = 512;

}  // namespace apiary::transport
