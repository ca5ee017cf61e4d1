// transport::local: in-process transports on one Fabric. Frames arrive intact, in
// order and with the sender's key; oversized payloads are refused with an error;
// unreachable and stopped peers surface as on_peer_down; every handler call and every
// posted function runs on the transport's own thread. Waits use condition variables
// with generous limits; nothing depends on how long anything takes. The last case checks
// the UCX backend's order: a small frame never overtakes a rendezvous frame sent before it.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "transport/local/transport.hpp"
#include "transport/ucx/transport.hpp"

using namespace apiary;
using namespace apiary::transport;
using Catch::Matchers::Contains;

namespace {

/// How long a test waits for something that should happen at once before failing.
constexpr std::chrono::seconds k_patience{30};

struct Received {
  PeerKey from;
  Frame frame;
  std::thread::id thread;
};

struct Down {
  PeerKey peer;
  Error why;
  std::thread::id thread;
};

/// A Handler that records what its transport hands it, for the test thread to wait on.
class Recorder final : public Handler {
 public:
  void on_frame(const PeerKey& from, Frame frame) override {
    std::lock_guard<std::mutex> lock(mu_);
    frames_.push_back(Received{from, std::move(frame), std::this_thread::get_id()});
    cv_.notify_all();
  }
  void on_peer_down(const PeerKey& peer, const Error& why) override {
    std::lock_guard<std::mutex> lock(mu_);
    downs_.push_back(Down{peer, why, std::this_thread::get_id()});
    cv_.notify_all();
  }
  void on_tick(Clock::time_point /*now*/) override {}
  std::optional<Clock::time_point> next_wakeup() override { return std::nullopt; }

  /// Waits until at least `n` frames arrived and returns them all.
  std::vector<Received> wait_frames(std::size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    REQUIRE(cv_.wait_for(lock, k_patience, [&] { return frames_.size() >= n; }));
    return frames_;
  }
  /// Waits until at least `n` peers went down and returns every report.
  std::vector<Down> wait_downs(std::size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    REQUIRE(cv_.wait_for(lock, k_patience, [&] { return downs_.size() >= n; }));
    return downs_;
  }
  /// The peer-down reports so far.
  std::vector<Down> downs() {
    std::lock_guard<std::mutex> lock(mu_);
    return downs_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Received> frames_;
  std::vector<Down> downs_;
};

/// Posts `fn` to `t` and waits until it ran; returns the id of the thread it ran on, or
/// nothing if it did not run in time. Everything posted to `t` earlier has run by then.
/// Makes no Catch assertions, so other threads may call it.
std::optional<std::thread::id> try_run_on(transport::Transport& t, std::function<void()> fn = {}) {
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread::id thread;
  };
  auto state = std::make_shared<Done>();
  t.post([state, fn = std::move(fn)] {
    if (fn) fn();
    std::lock_guard<std::mutex> lock(state->mu);
    state->thread = std::this_thread::get_id();
    state->done = true;
    state->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(state->mu);
  if (!state->cv.wait_for(lock, k_patience, [&] { return state->done; })) return std::nullopt;
  return state->thread;
}

/// As try_run_on, failing the test if `fn` did not run in time.
std::thread::id run_on(transport::Transport& t, std::function<void()> fn = {}) {
  auto ran = try_run_on(t, std::move(fn));
  REQUIRE(ran.has_value());
  return *ran;
}

/// A frame for call `id` whose payload is `payload`.
Frame frame(std::uint64_t id, const std::string& payload) {
  Frame f;
  f.envelope.set_kind(pb::MESSAGE);
  f.envelope.set_call_id(id);
  f.envelope.set_from_caller(true);
  f.envelope.set_has_message(true);
  f.envelope.set_payload_size(payload.size());
  f.payload = Buffer::copy_of(payload);
  return f;
}

/// A payload of `size` bytes that differs from frame to frame.
std::string payload_for(std::uint64_t id, std::size_t size) {
  std::string s(size, '\0');
  for (std::size_t i = 0; i < size; ++i) s[i] = static_cast<char>('a' + (id * 7 + i) % 26);
  return s;
}

/// A started transport with its recorder; stopped before the recorder goes away.
struct Node {
  Recorder recorder;
  local::Transport transport;
  std::string key;

  Node(std::shared_ptr<local::Fabric> fabric, Config config = {}, std::uint16_t port = 0)
      : transport(std::move(fabric), std::move(config)) {
    auto started = transport.start(&recorder, "127.0.0.1", port);
    REQUIRE(started.ok());
    key = *started;
  }
  ~Node() { transport.stop(); }

  /// Sends `f` to `to` from this node's transport thread.
  void send(const PeerKey& to, Frame f) {
    run_on(transport, [this, to, f = std::move(f)]() mutable { transport.send(to, std::move(f)); });
  }
};

}  // namespace

TEST_CASE("frames arrive intact, in order per sender, with the sender's key", "[transport][local]") {
  auto fabric = std::make_shared<local::Fabric>();
  Node a(fabric), b(fabric), c(fabric);
  REQUIRE(a.key != b.key);
  REQUIRE(a.key != c.key);

  constexpr std::uint64_t k_frames = 200;
  for (std::uint64_t i = 0; i < k_frames; ++i) {
    a.send(b.key, frame(i, payload_for(i, i * 13 % 700)));
    c.send(b.key, frame(1000 + i, payload_for(1000 + i, 5)));
  }
  const auto got = b.recorder.wait_frames(2 * k_frames);
  REQUIRE(got.size() == 2 * k_frames);

  std::uint64_t next_a = 0, next_c = 1000;
  for (const Received& r : got) {
    const bool from_a = r.from == a.key;
    REQUIRE((from_a || r.from == c.key));
    const std::uint64_t expected = from_a ? next_a++ : next_c++;
    CHECK(r.frame.envelope.call_id() == expected);
    CHECK(r.frame.envelope.kind() == pb::MESSAGE);
    CHECK(r.frame.envelope.has_message());
    CHECK_FALSE(r.frame.payload_error.has_value());
    const std::string want = payload_for(expected, from_a ? expected * 13 % 700 : 5);
    CHECK(r.frame.envelope.payload_size() == want.size());
    CHECK(std::string(r.frame.payload.view()) == want);
  }
  CHECK(next_a == k_frames);
  CHECK(next_c == 1000 + k_frames);
  CHECK(a.transport.stats().frames_sent == k_frames);
  CHECK(b.transport.stats().frames_received == 2 * k_frames);
  CHECK(a.recorder.downs().empty());
}

TEST_CASE("a payload over max_frame_bytes arrives empty with payload_error too_large", "[transport][local]") {
  auto fabric = std::make_shared<local::Fabric>();
  Config small;
  small.max_frame_bytes = 1024;
  Node a(fabric), b(fabric, small);

  a.send(b.key, frame(1, payload_for(1, 1025)));
  a.send(b.key, frame(2, payload_for(2, 1024)));  // exactly at the limit
  const auto got = b.recorder.wait_frames(2);
  REQUIRE(got.size() == 2);

  const Received& big = got[0];
  CHECK(big.from == a.key);
  CHECK(big.frame.envelope.call_id() == 1);  // the envelope survives
  CHECK(big.frame.envelope.payload_size() == 1025);
  CHECK(big.frame.payload.empty());
  REQUIRE(big.frame.payload_error.has_value());
  CHECK(big.frame.payload_error->code == errc::too_large);
  CHECK_THAT(big.frame.payload_error->message, Contains("1025") && Contains("1024"));

  const Received& fits = got[1];
  CHECK(fits.frame.envelope.call_id() == 2);
  CHECK_FALSE(fits.frame.payload_error.has_value());
  CHECK(std::string(fits.frame.payload.view()) == payload_for(2, 1024));
  CHECK(b.transport.stats().oversized_frames == 1);
}

TEST_CASE("sending to a key nobody listens on reports that key down", "[transport][local]") {
  auto fabric = std::make_shared<local::Fabric>();
  Node a(fabric);
  const std::thread::id a_thread = run_on(a.transport);
  const PeerKey nobody = "127.0.0.1:1";
  a.send(nobody, frame(1, "hello?"));
  const auto downs = a.recorder.wait_downs(1);
  REQUIRE(downs.size() == 1);
  CHECK(downs[0].peer == nobody);
  CHECK(downs[0].why.code == errc::peer_down);
  CHECK_THAT(downs[0].why.message, Contains(nobody));
  CHECK(downs[0].thread == a_thread);
}

TEST_CASE("stopping a transport reports it down to the peers it exchanged frames with", "[transport][local]") {
  auto fabric = std::make_shared<local::Fabric>();
  Node a(fabric), c(fabric);
  auto b = std::make_unique<Node>(fabric);
  const PeerKey b_key = b->key;

  SECTION("to a peer that sent to it") { a.send(b_key, frame(1, "x")); }
  SECTION("to a peer that only received from it") {
    b->send(a.key, frame(1, "x"));
    a.recorder.wait_frames(1);
  }
  b.reset();  // stops b

  const auto downs = a.recorder.wait_downs(1);
  REQUIRE(downs.size() == 1);
  CHECK(downs[0].peer == b_key);
  CHECK(downs[0].why.code == errc::peer_down);
  CHECK_THAT(downs[0].why.message, Contains(b_key));
  CHECK(a.transport.stats().peers_down == 1);

  // c never talked to b: once c has run everything posted to it, it has heard nothing.
  run_on(c.transport);
  CHECK(c.recorder.downs().empty());
  CHECK(c.transport.stats().peers_down == 0);
}

TEST_CASE("a disconnected peer that stops is not reported", "[transport][local]") {
  auto fabric = std::make_shared<local::Fabric>();
  Node a(fabric);
  auto b = std::make_unique<Node>(fabric);
  a.send(b->key, frame(1, "x"));
  b->recorder.wait_frames(1);
  const PeerKey b_key = b->key;
  run_on(a.transport, [&] { a.transport.disconnect(b_key); });
  b.reset();
  run_on(a.transport);
  CHECK(a.recorder.downs().empty());
}

TEST_CASE("post and handler calls run on the transport's own thread", "[transport][local]") {
  auto fabric = std::make_shared<local::Fabric>();
  Node a(fabric), b(fabric);
  const std::thread::id a_thread = run_on(a.transport);
  const std::thread::id b_thread = run_on(b.transport);
  CHECK(a_thread != std::this_thread::get_id());
  CHECK(b_thread != std::this_thread::get_id());
  CHECK(a_thread != b_thread);
  CHECK(run_on(a.transport) == a_thread);  // always the same thread

  // Posts from several threads all land on a's thread.
  std::vector<std::optional<std::thread::id>> seen(4);
  std::vector<std::thread> posters;
  for (std::size_t i = 0; i < seen.size(); ++i) {
    posters.emplace_back([&, i] { seen[i] = try_run_on(a.transport); });
  }
  for (auto& t : posters) t.join();
  for (const auto& id : seen) CHECK(id == a_thread);

  a.send(b.key, frame(1, "x"));
  const auto got = b.recorder.wait_frames(1);
  CHECK(got[0].thread == b_thread);
}

TEST_CASE("listening on a key in use fails with unavailable", "[transport][local]") {
  auto fabric = std::make_shared<local::Fabric>();
  Node a(fabric, {}, 10000);
  CHECK(a.key == "127.0.0.1:10000");

  Recorder r;
  local::Transport second(fabric, Config{});
  auto clash = second.start(&r, "127.0.0.1", 10000);
  REQUIRE_FALSE(clash.ok());
  CHECK(clash.error().code == errc::unavailable);
  CHECK_THAT(clash.error().message, Contains("127.0.0.1:10000"));

  // The same port on another host is free, and port 0 skips the taken one.
  auto other_host = second.start(&r, "127.0.0.2", 10000);
  REQUIRE(other_host.ok());
  CHECK(*other_host == "127.0.0.2:10000");
  second.stop();
  local::Transport third(fabric, Config{});
  auto picked = third.start(&r, "127.0.0.1", 0);
  REQUIRE(picked.ok());
  CHECK(*picked != a.key);
  third.stop();

  // A stopped transport frees its key.
  a.transport.stop();
  local::Transport fourth(fabric, Config{});
  auto reuse = fourth.start(&r, "127.0.0.1", 10000);
  REQUIRE(reuse.ok());
  fourth.stop();
}

TEST_CASE("ucx: a rendezvous frame and the small frames after it arrive in the order they were sent",
          "[transport][ucx]") {
  // Frames of 256 KiB travel by rendezvous (their payload is fetched after the header
  // arrives); the small ones are eager. A small frame must never overtake a large one.
  const Mode mode = GENERATE(Mode::tcp, Mode::shm);
  Config config;
  config.mode = mode;
  Recorder ra, rb;
  ucx::Transport a(config), b(config);
  auto ka = a.start(&ra, "127.0.0.1", 0);
  auto kb = b.start(&rb, "127.0.0.1", 0);
  REQUIRE(ka.ok());
  REQUIRE(kb.ok());
  constexpr std::uint64_t k_frames = 40;
  for (std::uint64_t i = 0; i < k_frames; ++i) {
    const std::size_t size = i % 2 == 0 ? std::size_t{256} << 10 : 10;
    run_on(a, [&, i, size] { a.send(*kb, frame(i, payload_for(i, size))); });
  }
  const auto got = rb.wait_frames(k_frames);
  std::uint64_t next = 0;
  for (const Received& r : got) {
    if (r.frame.envelope.kind() != pb::MESSAGE) continue;
    CHECK(r.frame.envelope.call_id() == next);
    CHECK(std::string(r.frame.payload.view()) ==
          payload_for(next, next % 2 == 0 ? std::size_t{256} << 10 : 10));
    ++next;
  }
  CHECK(next == k_frames);
  a.stop();
  b.stop();
}
