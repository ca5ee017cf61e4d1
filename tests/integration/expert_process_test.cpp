// An expert server in a child process over UCX on loopback: a RemoteExpert's forward
// equals the ffn expert called here, and once the process is killed a call fails with
// an error in time instead of waiting; a 16 MiB forward and backward stream through a
// nop expert, and malformed or broken streams fail alone.
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <string>

#include "api/remote_expert.hpp"
#include "actors/gateway.hpp"
#include "actors/rpc.hpp"
#include "api/runtime.hpp"
#include "core/moe/expert_backend.hpp"
#include "core/moe/expert_server_role.hpp"
#include "core/moe/stream_chunks.hpp"
#include "messages/tensor/codec.hpp"
#include "tests/support/process.hpp"

using namespace apiary;
using namespace std::chrono_literals;

TEST_CASE("a remote expert calls an expert server process and fails in time once it is killed",
          "[integration][moe]") {
  testing::Process child({testing::sibling_executable("expert_server_process"), "ffn.0", "ffn.1"});
  auto line = child.read_line(20s);
  REQUIRE(line.has_value());
  REQUIRE(line->rfind("serving ", 0) == 0);
  auto server = core::PeerAddr::parse(line->substr(8));
  REQUIRE(server.ok());
  CHECK(server->host() == "127.0.0.1");

  auto runtime = Runtime::start(RuntimeOptions{});
  REQUIRE(runtime.ok());
  RemoteExpert remote(**runtime, "ffn.1", *server, 5s);
  ExpertTensor x;
  x.shape = {2, 16};
  for (int i = 0; i < 32; ++i) x.values.push_back(static_cast<float>(i % 7) / 7.0f - 0.4f);
  auto got = remote.forward({x});
  REQUIRE(got.ok());

  core::moe::FfnConfig config;
  config.hidden_dim = 16;
  config.seed = 8;  // the process's second expert
  core::moe::FfnExpert local(config);
  auto input = messages::Tensor::copy_of(messages::dtype::float32, x.shape, x.values.data(), x.values.size() * 4);
  REQUIRE(input.ok());
  auto want = local.forward({*input});
  REQUIRE(want.ok());
  REQUIRE(got->front().values.size() == want->front().numel());
  const float* w = want->front().data<float>();
  for (std::size_t i = 0; i < got->front().values.size(); ++i) CHECK(std::abs(got->front().values[i] - w[i]) <= 1e-5f);

  child.kill(SIGKILL);
  child.wait(10s);
  const auto t0 = std::chrono::steady_clock::now();
  auto dead = remote.forward({x});
  REQUIRE(!dead.ok());
  INFO(dead.error().what());
  CHECK(dead.error().message.find("ffn.1") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 8s);
  (*runtime)->stop();
}

TEST_CASE("apiary experts serves its experts until SIGTERM and refuses a bad flag", "[integration][moe]") {
  testing::Process child({testing::sibling_executable("apiary"), "experts", "--expert-uids", "ffn.0", "--hidden-dim",
                          "16", "--seed", "7", "--stats-every", "0", "--listen", "/ip4/127.0.0.1/tcp/0"});
  auto line = child.read_line(20s);
  REQUIRE(line.has_value());
  REQUIRE(line->rfind("serving ", 0) == 0);
  auto server = core::PeerAddr::parse(line->substr(8));
  REQUIRE(server.ok());
  CHECK(child.read_line(5s) == std::optional<std::string>("experts ffn.0"));
  auto runtime = Runtime::start(RuntimeOptions{});
  REQUIRE(runtime.ok());
  RemoteExpert remote(**runtime, "ffn.0", *server, 5s);
  auto info = remote.info();
  REQUIRE(info.ok());
  CHECK(info->forward_inputs().front().instance_shape == messages::Shape{16});
  child.kill(SIGTERM);
  CHECK(child.read_line(10s) == std::optional<std::string>("stopping on SIGTERM"));
  CHECK(child.wait(10s) == 0);
  (*runtime)->stop();

  testing::Process bad({testing::sibling_executable("apiary"), "experts", "--hidden-dim", "wide"});
  CHECK(bad.wait(10s) == 2);
}

namespace {

/// `rows` x 2 float32 values, each distinct from its neighbours (offset by `base`).
ExpertTensor pairs(std::uint32_t rows, float base) {
  ExpertTensor t;
  t.shape = {rows, 2};
  t.values.resize(std::size_t{rows} * 2);
  for (std::size_t i = 0; i < t.values.size(); ++i) t.values[i] = base + static_cast<float>(i % 65536) / 1024.0f;
  return t;
}

/// The first chunk message of a streamed forward of `x` to `uid`.
std::string first_chunk(const std::string& uid, const ExpertTensor& x) {
  auto tensor = messages::Tensor::copy_of(messages::dtype::float32, x.shape, x.values.data(), x.values.size() * 4);
  REQUIRE(tensor.ok());
  return core::moe::request_stream(uid, {messages::encode_none(*tensor)}).front();
}

/// A caller that does not listen to its call's deliveries.
class Deaf final : public actors::DirectSink {
 public:
  void deliver(actors::Delivery /*d*/) override {}
  std::optional<core::TimePoint> next_wakeup() override { return std::nullopt; }
  void on_tick(core::TimePoint /*now*/) override {}
};

}  // namespace

TEST_CASE("a 16 MiB forward and backward stream through a nop expert process and bad streams fail alone",
          "[integration][moe]") {
  testing::Process child({testing::sibling_executable("apiary"), "experts", "--expert-uids", "nop.0", "--expert-cls",
                          "nop", "--hidden-dim", "2", "--max-batch-size", "2097152", "--stats-every", "0",
                          "--listen", "/ip4/127.0.0.1/tcp/0"});
  auto line = child.read_line(20s);
  REQUIRE(line.has_value());
  REQUIRE(line->rfind("serving ", 0) == 0);
  auto server = core::PeerAddr::parse(line->substr(8));
  REQUIRE(server.ok());
  auto runtime = Runtime::start(RuntimeOptions{});
  REQUIRE(runtime.ok());
  RemoteExpert remote(**runtime, "nop.0", *server, 60s);

  // 2^21 rows of 2 float32: 16 MiB, well over the 2 MiB that makes the client stream.
  const ExpertTensor x = pairs(1u << 21, -8.0f);
  const ExpertTensor g = pairs(1u << 21, 3.0f);
  auto y = remote.forward({x});
  REQUIRE(y.ok());
  REQUIRE(y->size() == 1);
  CHECK(y->front().shape == x.shape);
  CHECK(y->front().values == x.values);
  auto gx = remote.backward({x}, {g});
  REQUIRE(gx.ok());
  REQUIRE(gx->size() == 1);
  CHECK(gx->front().values == g.values);

  // A malformed second message: the caller gets an error that says what came.
  actors::Gateway& gw = *(*runtime)->gateway();
  const std::string handle = server->addressed(core::moe::k_forward_stream_handle);
  const ExpertTensor small = pairs(1024, 0.0f);
  std::vector<Payload> junk{Buffer::copy_of(first_chunk("nop.0", small)), Buffer::copy_of(std::string("\xff\xff", 2))};
  auto bad = actors::stream_call(gw, server->key(), handle, std::move(junk), 10s);
  REQUIRE(bad.answer.wait_for(15s) == std::future_status::ready);
  auto refused = bad.answer.get();
  REQUIRE_FALSE(refused.ok());
  INFO(refused.error().what());
  CHECK(refused.error().message.find("rpc_forward_stream") != std::string::npos);
  CHECK(refused.error().message.find("not an ExpertRequest") != std::string::npos);

  // A stream whose caller ends it after the first of four chunks: truncated.
  std::vector<Payload> cut{Buffer::copy_of(first_chunk("nop.0", x))};
  auto short_stream = actors::stream_call(gw, server->key(), handle, std::move(cut), 10s);
  REQUIRE(short_stream.answer.wait_for(15s) == std::future_status::ready);
  auto truncated = short_stream.answer.get();
  REQUIRE_FALSE(truncated.ok());
  INFO(truncated.error().what());
  CHECK(truncated.error().message.find("1 of 4 announced chunks") != std::string::npos);

  // A stream broken off midway: opened with one chunk of four, then cancelled.
  const std::shared_ptr<actors::DirectSink> deaf = std::make_shared<Deaf>();
  const auto broken = gw.open(deaf, server->key(), handle, pb::BIDI_STREAM, 10s,
                              Payload(Buffer::copy_of(first_chunk("nop.0", x))), false);
  gw.cancel(broken, "the caller gave up");

  // The server still answers, unary and streamed.
  auto after = remote.forward({small});
  REQUIRE(after.ok());
  CHECK(after->front().values == small.values);
  auto again = remote.forward({x});
  REQUIRE(again.ok());
  CHECK(again->front().values == x.values);
  child.kill(SIGTERM);
  CHECK(child.wait(10s) == 0);
  (*runtime)->stop();
}
