// apiary::ExpertServer and apiary::RemoteExpert over UCX in one process, streamed: a
// request over 2 MiB goes through rpc_forward_stream / rpc_backward_stream (the server
// counts it) and a smaller one stays unary, on either role host; an ffn expert's streamed
// forward equals the expert called directly; a stream broken off midway is dropped by
// the server, which keeps answering.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <thread>

#include "actors/gateway.hpp"
#include "actors/rpc.hpp"
#include "api/expert_server.hpp"
#include "api/remote_expert.hpp"
#include "api/runtime.hpp"
#include "core/moe/expert_backend.hpp"
#include "core/moe/stream_chunks.hpp"
#include "messages/tensor/codec.hpp"
#include "tests/support/test_system.hpp"

using namespace apiary;
using namespace std::chrono_literals;
namespace moe = apiary::core::moe;

namespace {

/// A server runtime and a client runtime on one actor system.
struct Pair {
  testing::TestSystem t;
  std::unique_ptr<Runtime> server_rt;
  std::unique_ptr<Runtime> client_rt;
  Pair() {
    RuntimeOptions o;
    o.system = &t.sys;
    auto a = Runtime::start(o);
    REQUIRE(a.ok());
    server_rt = std::move(*a);
    auto b = Runtime::start(o);
    REQUIRE(b.ok());
    client_rt = std::move(*b);
  }
  ~Pair() {
    client_rt->stop();
    server_rt->stop();
  }
  [[nodiscard]] core::PeerAddr server_addr() const { return core::PeerAddr(server_rt->address()); }
};

ExpertServerOptions options(const std::string& cls, std::uint32_t hidden, core::HostKind host) {
  ExpertServerOptions o;
  o.expert_cls = cls;
  o.hidden_dim = hidden;
  o.expert_uids = {cls + ".0"};
  o.seed = 7;
  o.max_batch_size = std::size_t{1} << 20;
  o.host = host;
  return o;
}

/// `rows` x `h` float32 values in [-1, 1), distinct along a row.
ExpertTensor rows_of(std::uint32_t rows, std::uint32_t h, float phase) {
  ExpertTensor t;
  t.shape = {rows, h};
  t.values.resize(std::size_t{rows} * h);
  for (std::size_t i = 0; i < t.values.size(); ++i) t.values[i] = std::sin(phase + static_cast<float>(i) * 0.01f);
  return t;
}

/// A caller that does not listen to its call's deliveries.
class Deaf final : public actors::DirectSink {
 public:
  void deliver(actors::Delivery /*d*/) override {}
  std::optional<core::TimePoint> next_wakeup() override { return std::nullopt; }
  void on_tick(core::TimePoint /*now*/) override {}
};

}  // namespace

TEST_CASE("a request over 2 MiB streams and a smaller one stays unary on either host", "[actor][moe]") {
  const auto host = GENERATE(core::HostKind::actor, core::HostKind::transport_thread);
  Pair p;
  auto server = ExpertServer::start(*p.server_rt, options("nop", 2, host));
  REQUIRE(server.ok());
  RemoteExpert remote(*p.client_rt, "nop.0", p.server_addr(), 30s);
  const auto small = rows_of(1000, 2, 0.5f);  // 8 kB
  auto y = remote.forward({small});
  REQUIRE(y.ok());
  CHECK(y->front().values == small.values);
  CHECK((*server)->counters().server.streams == 0);

  const auto big = rows_of(1u << 19, 2, 1.5f);  // 4 MiB
  const auto grad = rows_of(1u << 19, 2, 2.5f);
  auto streamed = remote.forward({big});
  REQUIRE(streamed.ok());
  CHECK(streamed->front().shape == big.shape);
  CHECK(streamed->front().values == big.values);
  auto back = remote.backward({big}, {grad});
  REQUIRE(back.ok());
  CHECK(back->front().values == grad.values);
  CHECK((*server)->counters().server.streams == 2);
  CHECK((*server)->counters().server.refused == 0);

  // An unknown uid is refused on the first chunk; the caller's later chunks go nowhere.
  const std::size_t bytes = big.values.size() * 4;
  auto tensor = messages::Tensor::copy_of(messages::dtype::float32, big.shape, big.values.data(), bytes);
  REQUIRE(tensor.ok());
  std::vector<Payload> chunks;
  for (auto& m : moe::request_stream("nop.9", {messages::encode_none(*tensor)}, std::size_t{1} << 20)) {
    chunks.emplace_back(Buffer::adopt(std::move(m)));
  }
  REQUIRE(chunks.size() == 4);
  const auto addr = p.server_addr();
  auto call = actors::stream_call(*p.client_rt->gateway(), addr.key(), addr.addressed(moe::k_forward_stream_handle),
                                  std::move(chunks), 10s);
  REQUIRE(call.answer.wait_for(15s) == std::future_status::ready);
  auto refused = call.answer.get();
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == errc::not_found);
  CHECK(refused.error().message.find("no expert 'nop.9'") != std::string::npos);
  auto still = remote.forward({big});
  REQUIRE(still.ok());
  CHECK(still->front().values == big.values);
}

TEST_CASE("a streamed ffn forward equals the expert called directly", "[actor][moe]") {
  Pair p;
  auto server = ExpertServer::start(*p.server_rt, options("ffn", 16, core::HostKind::actor));
  REQUIRE(server.ok());
  RemoteExpert remote(*p.client_rt, "ffn.0", p.server_addr(), 30s);
  const auto x = rows_of(1u << 16, 16, 0.0f);  // 4 MiB
  auto got = remote.forward({x});
  REQUIRE(got.ok());
  CHECK((*server)->counters().server.streams == 1);
  moe::FfnConfig c;
  c.hidden_dim = 16;
  c.seed = 7;
  moe::FfnExpert local(c);
  auto input = messages::Tensor::copy_of(messages::dtype::float32, x.shape, x.values.data(), x.values.size() * 4);
  REQUIRE(input.ok());
  auto want = local.forward({*input});
  REQUIRE(want.ok());
  REQUIRE(got->front().values.size() == want->front().numel());
  const float* w = want->front().data<float>();
  float worst = 0;
  const auto& values = got->front().values;
  for (std::size_t i = 0; i < values.size(); ++i) worst = std::fmax(worst, std::fabs(values[i] - w[i]));
  CHECK(worst <= 1e-5f);
}

TEST_CASE("a stream broken off midway is dropped by the server and the next call succeeds", "[actor][moe]") {
  Pair p;
  auto server = ExpertServer::start(*p.server_rt, options("nop", 2, core::HostKind::actor));
  REQUIRE(server.ok());
  const auto x = rows_of(1u << 19, 2, 0.0f);
  auto tensor = messages::Tensor::copy_of(messages::dtype::float32, x.shape, x.values.data(), x.values.size() * 4);
  REQUIRE(tensor.ok());
  const auto first = moe::request_stream("nop.0", {messages::encode_none(*tensor)}).front();
  actors::Gateway& gw = *p.client_rt->gateway();
  const auto addr = p.server_addr();
  const auto call = gw.open(std::shared_ptr<actors::DirectSink>(std::make_shared<Deaf>()), addr.key(),
                            addr.addressed(moe::k_forward_stream_handle), pb::BIDI_STREAM, 10s,
                            Payload(Buffer::copy_of(first)), false);
  for (int i = 0; i < 100 && (*server)->counters().server.streams == 0; ++i) std::this_thread::sleep_for(20ms);
  gw.cancel(call, "the caller gave up");
  for (int i = 0; i < 100 && (*server)->counters().server.broken_streams == 0; ++i) std::this_thread::sleep_for(20ms);
  CHECK((*server)->counters().server.broken_streams == 1);

  RemoteExpert remote(*p.client_rt, "nop.0", p.server_addr(), 30s);
  auto y = remote.forward({x});
  REQUIRE(y.ok());
  CHECK(y->front().values == x.values);
  CHECK((*server)->counters().server.streams == 2);
}
