// The transport matrix, in the style of Gloo's: backend (ucx-tcp, ucx-shm, local)
// × payload (0 B, 1 B, 64 KiB, 16 MiB, 256 MiB) × calls in flight (1, 64). Payloads
// travel both ways (caller → service and service → caller) and must arrive intact.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "actors/rpc.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_services.hpp"

using namespace apiary;
using namespace std::chrono_literals;

namespace {

/// Receivers hold every payload in flight at once; this bounds what one matrix cell
/// keeps in memory on a 24 GiB machine (64 × 256 MiB would be 16 GiB per side): a cell
/// runs min(calls in flight, 1 GiB / payload) calls at once, and that many in all.
constexpr std::size_t k_max_bytes_in_flight = std::size_t{1} << 30;

struct Peer {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<actors::Gateway> client;
  std::shared_ptr<actors::Gateway> local_server;
  std::unique_ptr<testing::Process> server;
  std::string address;

  explicit Peer(const std::string& backend) {
    cfg.set("work-stealing.moderate-poll-attempts", 0);
    sys = std::make_unique<caf::actor_system>(cfg);
    actors::GatewayConfig gc;
    if (backend == "local") {
      gc.backend = actors::Backend::local;
      auto s = actors::Gateway::start(*sys, gc);
      REQUIRE(s.ok());
      local_server = *s;
      testing::install_test_services(*sys, local_server);
      address = local_server->address();
    } else {
      const std::string mode = backend == "ucx-shm" ? "shm" : "tcp";
      gc.transport.mode = mode == "shm" ? transport::Mode::shm : transport::Mode::tcp;
      auto started = testing::start_test_server({"--mode", mode});
      server = std::move(started.first);
      address = started.second;
    }
    auto c = actors::Gateway::start(*sys, gc);
    REQUIRE(c.ok());
    client = *c;
  }
  ~Peer() {
    client->stop();
    if (local_server) local_server->stop();
  }
};

Buffer make_request(std::uint64_t size, std::uint64_t seed) {
  Buffer b = Buffer::allocate(16);
  std::memcpy(b.data(), &size, 8);
  std::memcpy(b.data() + 8, &seed, 8);
  return b;
}

/// test.rpc_hash's answer to one call: the hash and length of what the service got.
std::pair<std::uint64_t, std::uint64_t> hash_answer(const actors::CallOutcome& o) {
  if (o.error) FAIL(o.error->what());
  REQUIRE(o.messages.size() == 1);
  REQUIRE(o.messages[0].size() == 16);
  std::uint64_t h = 0, n = 0;
  std::memcpy(&h, o.messages[0].data(), 8);
  std::memcpy(&n, o.messages[0].data() + 8, 8);
  return {h, n};
}

}  // namespace

TEST_CASE("transport matrix: bytes arrive intact", "[transport][integration]") {
  const std::string backend = GENERATE(as<std::string>{}, "ucx-tcp", "ucx-shm", "local");
  const std::size_t size = GENERATE(std::size_t{0}, std::size_t{1}, std::size_t{64} << 10, std::size_t{16} << 20,
                                    std::size_t{256} << 20);
  const std::size_t in_flight = GENERATE(std::size_t{1}, std::size_t{64});
  const std::size_t concurrent =
      std::max<std::size_t>(1, std::min(in_flight, k_max_bytes_in_flight / std::max<std::size_t>(size, 1)));
  // APIARY_MATRIX=backend[:size[:in_flight]] runs one slice of the matrix (debugging).
  if (const char* only = std::getenv("APIARY_MATRIX")) {
    const std::string cell = backend + ":" + std::to_string(size) + ":" + std::to_string(in_flight);
    if (cell.rfind(only, 0) != 0) return;
  }
  INFO("backend " << backend << ", payload " << size << " B, " << in_flight << " calls, " << concurrent
                  << " at once");

  Peer p(backend);
  caf::scoped_actor self{*p.sys};

  // Caller → service: the service answers with a hash and length of what it got.
  std::vector<Buffer> payloads;
  for (std::size_t i = 0; i < concurrent; ++i) {
    Buffer b = Buffer::allocate(size);
    testing::fill_pattern(b.data(), size, i + 1);
    payloads.push_back(std::move(b));
  }
  {
    std::set<actors::CallId> ids;
    std::map<actors::CallId, std::size_t> which;
    for (std::size_t i = 0; i < concurrent; ++i) {
      auto id = p.client->unary(self, p.address, "test.rpc_hash", payloads[i % payloads.size()], 60s);
      ids.insert(id);
      which[id] = i % payloads.size();
    }
    auto out = actors::await_calls(self, *p.client, ids, 90s);
    for (auto& [id, o] : out) {
      const auto [h, n] = hash_answer(o);
      const Buffer& sent = payloads[which[id]];
      CHECK(n == size);
      CHECK(h == testing::fnv1a(sent.data(), sent.size()));
    }
  }

  // Service → caller: the service generates the bytes from a seed.
  {
    std::set<actors::CallId> ids;
    std::map<actors::CallId, std::uint64_t> seed_of;
    for (std::size_t i = 0; i < concurrent; ++i) {
      auto id = p.client->unary(self, p.address, "test.rpc_make", make_request(size, 100 + i), 60s);
      ids.insert(id);
      seed_of[id] = 100 + i;
    }
    auto out = actors::await_calls(self, *p.client, ids, 90s);
    Buffer expect = Buffer::allocate(size);
    for (auto& [id, o] : out) {
      if (o.error) FAIL(o.error->what());
      REQUIRE(o.messages.size() == 1);
      REQUIRE(o.messages[0].size() == size);
      testing::fill_pattern(expect.data(), size, seed_of[id]);
      // An empty message may have no memory at all: memcmp must not see its null.
      CHECK((size == 0 || std::memcmp(o.messages[0].data(), expect.data(), size) == 0));
    }
  }
}

TEST_CASE("spliced messages arrive joined, their body sent from where it lies", "[transport][integration]") {
  // A message in pieces (Payload): head and tail ride in the envelope, the body (a view of
  // memory the sender keeps) is the payload; the service must see head + body + tail.
  const std::string backend = GENERATE(as<std::string>{}, "ucx-tcp", "ucx-shm", "local");
  const std::size_t size = GENERATE(std::size_t{0}, std::size_t{1}, std::size_t{64} << 10, std::size_t{16} << 20);
  INFO("backend " << backend << ", body " << size << " B");
  Peer p(backend);
  caf::scoped_actor self{*p.sys};
  auto storage = std::make_shared<std::vector<std::byte>>(size + 3);
  testing::fill_pattern(storage->data(), storage->size(), 7);
  const std::string head = "head: 0123456789", tail = "tail";
  // The body starts at an odd offset of its storage, as a part inside a tensor does.
  Payload message{head, Buffer::view_of(storage, storage->data() + 3, size), tail};
  const std::string whole = message.joined();
  REQUIRE(whole.size() == head.size() + size + tail.size());
  std::set<actors::CallId> ids{
      p.client->open(self, p.address, "test.rpc_hash", pb::UNARY, 60s, std::move(message), true)};
  auto out = actors::await_calls(self, *p.client, ids, 90s);
  REQUIRE(out.size() == 1);
  const auto& o = out.begin()->second;
  const auto [h, n] = hash_answer(o);
  CHECK(n == whole.size());
  CHECK(h == testing::fnv1a(whole.data(), whole.size()));
}

TEST_CASE("a spliced answer lands in memory the caller posted, when its head and tail match or any head was allowed", "[transport][integration]") {
  // Gateway::open's landings: the n-th answer's body is received straight into the n-th
  // zone if the answer's head, tail and size are the landing's; otherwise it arrives whole.
  const std::string backend = GENERATE(as<std::string>{}, "ucx-tcp", "ucx-shm", "local");
  const std::size_t size = GENERATE(std::size_t{1}, std::size_t{64} << 10, std::size_t{16} << 20);
  INFO("backend " << backend << ", body " << size << " B");
  Peer p(backend);
  caf::scoped_actor self{*p.sys};
  Buffer expect = Buffer::allocate(size);
  // Storage with guard bytes around the zone, at an odd offset.
  auto storage = std::make_shared<std::vector<std::byte>>(size + 6, std::byte{0x5a});
  // Posted: the answer's head and tail; any head with its tail (the head posted is not the
  // answer's); or its head with another tail, which does not match.
  enum class Posted { exact, any_head, other_tail };
  for (const Posted posted : {Posted::exact, Posted::any_head, Posted::other_tail}) {
    const bool matching = posted != Posted::other_tail;
    INFO("posted " << static_cast<int>(posted));
    std::fill(storage->begin(), storage->end(), std::byte{0x5a});
    const std::uint64_t seed = 11 + static_cast<std::uint64_t>(posted);
    std::vector<Landing> landings(1);
    landings[0].zone = Buffer::zone_of(storage, storage->data() + 3, size);
    landings[0].head = posted == Posted::any_head ? "not the head" : testing::spliced_head(seed);
    landings[0].any_head = posted == Posted::any_head;
    landings[0].tail = matching ? "tail" : "other tail";
    const auto before = p.client->transport_stats().frames_landed;
    std::set<actors::CallId> ids{p.client->open(self, p.address, "test.rpc_make_spliced", pb::UNARY, 60s,
                                                make_request(size, seed), true, {}, std::move(landings))};
    auto out = actors::await_calls(self, *p.client, ids, 90s);
    REQUIRE(out.size() == 1);
    const auto& o = out.begin()->second;
    if (o.error) FAIL(o.error->what());
    REQUIRE(o.messages.size() == 1);
    testing::fill_pattern(expect.data(), size, seed);
    const std::string head = testing::spliced_head(seed);
    if (matching) {
      // Delivered as head + tail; the body is in the zone, the guard bytes untouched.
      CHECK(o.messages[0].view() == head + "tail");
      CHECK(std::memcmp(storage->data() + 3, expect.data(), size) == 0);
      CHECK(p.client->transport_stats().frames_landed == before + 1);
    } else {
      // Delivered whole; the zone is left alone.
      REQUIRE(o.messages[0].size() == head.size() + size + 4);
      CHECK(o.messages[0].view().substr(0, head.size()) == head);
      CHECK(std::memcmp(o.messages[0].data() + head.size(), expect.data(), size) == 0);
      CHECK(o.messages[0].view().substr(head.size() + size) == "tail");
      CHECK(std::all_of(storage->begin() + 3, storage->begin() + 3 + static_cast<std::ptrdiff_t>(size),
                        [](std::byte b) { return b == std::byte{0x5a}; }));
      CHECK(p.client->transport_stats().frames_landed == before);
    }
    for (std::size_t i : {std::size_t{0}, std::size_t{1}, std::size_t{2}, size + 3, size + 4, size + 5}) {
      CHECK((*storage)[i] == std::byte{0x5a});
    }
  }
}

TEST_CASE("a call's landings are released when it fails, and an unmatched one when it ends", "[transport][integration]") {
  const std::string backend = GENERATE(as<std::string>{}, "ucx-tcp", "local");
  INFO("backend " << backend);
  Peer p(backend);
  caf::scoped_actor self{*p.sys};
  auto storage = std::make_shared<std::vector<std::byte>>(std::size_t{1} << 20);
  auto post = [&](const std::string& head) {
    std::vector<Landing> landings(2);  // one more than the call's answers
    for (auto& l : landings) {
      l.zone = Buffer::zone_of(storage, storage->data(), storage->size());
      l.head = head;
      l.tail = "tail";
    }
    return landings;
  };
  // Nobody listens there: the call fails, and the gateway lets go of the zones.
  std::set<actors::CallId> failed{p.client->open(self, "127.0.0.1:1", "test.rpc_make_spliced", pb::UNARY, 10s,
                                                 make_request(64, 1), true, {}, post(testing::spliced_head(1)))};
  auto out = actors::await_calls(self, *p.client, failed, 30s);
  REQUIRE(out.size() == 1);
  CHECK(out.begin()->second.error.has_value());
  CHECK(storage.use_count() == 1);
  // One answer takes one landing; the second, never used, goes when the call ends.
  std::set<actors::CallId> ok{p.client->open(self, p.address, "test.rpc_make_spliced", pb::UNARY, 60s,
                                             make_request(storage->size(), 2), true, {}, post(testing::spliced_head(2)))};
  out = actors::await_calls(self, *p.client, ok, 60s);
  REQUIRE(out.size() == 1);
  if (out.begin()->second.error) FAIL(out.begin()->second.error->what());
  CHECK(out.begin()->second.messages.at(0).view() == testing::spliced_head(2) + "tail");
  CHECK(storage.use_count() == 1);
}
