// The expert server role's streamed handles (rpc_forward_stream, rpc_backward_stream):
// chunked requests driven by hand as the host delivers them (the first message with the
// Request, the rest as RequestMessages), answers read back chunk by chunk; streamed and
// unary tasks share one pool; bad and broken streams reach their caller alone.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/moe/expert_backend.hpp"
#include "core/moe/expert_server_role.hpp"
#include "core/moe/stream_chunks.hpp"
#include "tests/core/moe/expert_tensors.hpp"

namespace {

namespace core = apiary::core;
namespace moe = apiary::core::moe;
using apiary::Buffer;
using expert_test::floats;
using expert_test::random_floats;
using expert_test::replies;
using expert_test::request;
using expert_test::rows_of;
using moe::ExpertServerRole;
using moe::Tensor;

constexpr std::uint32_t h = 4;
constexpr std::size_t k_chunk = 64;  ///< small chunks: several per tensor

moe::PoolConfig pool(std::size_t max, std::size_t min = 1) {
  moe::PoolConfig c;
  c.max_batch_size = max;
  c.min_batch_size = min;
  return c;
}

core::TimePoint at(int ms) { return std::chrono::milliseconds(ms); }

/// A role serving nop experts "nop.0" and "nop.1" of hidden dim h.
std::unique_ptr<ExpertServerRole> nop_server(moe::PoolConfig config = pool(1024)) {
  auto role = std::make_unique<ExpertServerRole>();
  REQUIRE(role->add_expert("nop.0", std::make_unique<moe::NopExpert>(h), config));
  REQUIRE(role->add_expert("nop.1", std::make_unique<moe::NopExpert>(h), config));
  return role;
}

/// The chunk messages of a request for `uid` with `tensors`.
std::vector<std::string> chunks_of(const std::string& uid, const std::vector<Tensor>& tensors) {
  std::vector<apiary::pb::Tensor> wire;
  for (const Tensor& t : tensors) wire.push_back(apiary::messages::encode_none(t));
  return moe::request_stream(uid, wire, k_chunk);
}

/// Delivers `messages` as streamed request `id` for `handle`, the last one ending the
/// caller's direction; the effects of every step, joined.
core::Effects stream(ExpertServerRole& role, core::TimePoint now, core::RequestId id, const char* handle,
                     const std::vector<std::string>& messages) {
  core::Effects fx = role.on(now, core::Request{id, handle, core::PeerAddr{}, Buffer::copy_of(messages.at(0))});
  for (std::size_t i = 1; i < messages.size(); ++i) {
    auto more = role.on(now, core::RequestMessage{id, Buffer::copy_of(messages[i]), false});
    fx.insert(fx.end(), more.begin(), more.end());
  }
  auto end = expert_test::settled(role, now, role.on(now, core::RequestMessage{id, Buffer{}, true}));
  fx.insert(fx.end(), end.begin(), end.end());
  return fx;
}

/// The tensors of a streamed answer: its chunk replies joined. The last reply ends it.
std::vector<Tensor> streamed_tensors(const std::vector<core::Reply>& out) {
  REQUIRE_FALSE(out.empty());
  std::vector<Buffer> messages;
  for (std::size_t i = 0; i + 1 < out.size(); ++i) {
    REQUIRE(out[i].response.ok());
    CHECK_FALSE(out[i].last);
    messages.push_back(Buffer::copy_of(*out[i].response));
  }
  REQUIRE(out.back().response.ok());
  CHECK(out.back().last);
  CHECK(out.back().response->empty());
  auto joined = moe::join_response(messages);
  REQUIRE(joined.ok());
  std::vector<Tensor> tensors;
  for (const auto& wire : *joined) {
    auto t = apiary::messages::decode(wire);
    REQUIRE(t.ok());
    tensors.push_back(*t);
  }
  return tensors;
}

}  // namespace

TEST_CASE("a streamed forward and backward answer in chunks with the nop expert's outputs", "[moe]") {
  auto role = nop_server();
  const Tensor x = rows_of(random_floats(40 * h, 1), h);  // 640 bytes: 10 chunks
  const auto messages = chunks_of("nop.0", {x});
  REQUIRE(messages.size() == 10);
  auto out = replies(stream(*role, at(0), 5, moe::k_forward_stream_handle, messages));
  REQUIRE(out.size() == 2);  // 640 bytes back, in the server's 4 MiB chunks: one, then the end
  for (const auto& r : out) CHECK(r.request == 5);
  auto y = streamed_tensors(out);
  REQUIRE(y.size() == 1);
  CHECK(y[0] == x);

  const Tensor g = rows_of(random_floats(40 * h, 2), h);
  auto back = replies(stream(*role, at(1), 6, moe::k_backward_stream_handle, chunks_of("nop.1", {x, g})));
  auto gx = streamed_tensors(back);
  REQUIRE(gx.size() == 1);
  CHECK(gx[0] == g);  // nop's gradient is the output gradient
  CHECK(role->stats().streams == 2);
  CHECK(role->open_streams() == 0);
}

TEST_CASE("a streamed task and a unary task of one expert run in one batch", "[moe]") {
  auto role = nop_server(pool(1024, 50));
  const Tensor a = rows_of(random_floats(40 * h, 3), h);
  const Tensor b = rows_of(random_floats(10 * h, 4), h);
  CHECK(replies(stream(*role, at(0), 1, moe::k_forward_stream_handle, chunks_of("nop.0", {a}))).empty());
  CHECK(role->queued_tasks() == 1);
  auto out = replies(expert_test::settled(
      *role, at(1), role->on(at(1), core::Request{2, moe::k_forward_handle, core::PeerAddr{}, request("nop.0", {b})})));
  CHECK(role->stats().batches == 1);
  CHECK(role->stats().rows == 50);
  REQUIRE(out.size() == 3);  // the stream's chunk and end, the unary answer
  CHECK(streamed_tensors({out[0], out[1]})[0] == a);
  CHECK(out[2].request == 2);
  CHECK(expert_test::response_tensors(out[2])[0] == b);
}

TEST_CASE("an unknown uid is refused on the stream's first message and its later messages are ignored", "[moe]") {
  auto role = nop_server();
  const auto messages = chunks_of("nop.7", {rows_of(random_floats(40 * h, 5), h)});
  auto first = replies(role->on(at(0), core::Request{3, moe::k_forward_stream_handle, core::PeerAddr{},
                                                     Buffer::copy_of(messages[0])}));
  REQUIRE(first.size() == 1);
  REQUIRE_FALSE(first[0].response.ok());
  CHECK(first[0].response.error().code == apiary::errc::not_found);
  CHECK_THAT(first[0].response.error().message, Catch::Contains("no expert 'nop.7'"));
  CHECK(replies(role->on(at(1), core::RequestMessage{3, Buffer::copy_of(messages[1]), false})).empty());
  CHECK(replies(role->on(at(1), core::RequestMessage{3, Buffer{}, true})).empty());
  CHECK(role->open_streams() == 0);
}

TEST_CASE("a stream cut short or with a wrong shape gets a clear error and the next stream succeeds", "[moe]") {
  auto role = nop_server();
  const Tensor x = rows_of(random_floats(40 * h, 6), h);
  auto messages = chunks_of("nop.0", {x});
  messages.pop_back();  // the caller ends its direction one chunk early
  auto cut = replies(stream(*role, at(0), 1, moe::k_forward_stream_handle, messages));
  REQUIRE(cut.size() == 1);
  REQUIRE_FALSE(cut[0].response.ok());
  CHECK(cut[0].response.error().code == apiary::errc::truncated);
  CHECK_THAT(cut[0].response.error().message,
             Catch::Contains("rpc_forward_stream") && Catch::Contains("9 of 10 announced chunks"));

  const Tensor wide = rows_of(random_floats(40 * 5, 7), 5);
  auto wrong = replies(stream(*role, at(1), 2, moe::k_forward_stream_handle, chunks_of("nop.0", {wide})));
  REQUIRE(wrong.size() == 1);
  CHECK(wrong[0].response.error().code == apiary::errc::invalid_argument);
  CHECK_THAT(wrong[0].response.error().message, Catch::Contains("[40, 5]") && Catch::Contains("[*, 4]"));

  auto junk = role->on(at(2), core::Request{3, moe::k_backward_stream_handle, core::PeerAddr{},
                                            Buffer::copy_of(chunks_of("nop.0", {x})[0])});
  CHECK(replies(junk).empty());
  auto bad = replies(role->on(at(2), core::RequestMessage{3, Buffer::copy_of(std::string("\xff\xff", 2)), false}));
  REQUIRE(bad.size() == 1);
  CHECK(bad[0].response.error().code == apiary::errc::malformed);
  CHECK_THAT(bad[0].response.error().message, Catch::Contains("rpc_backward_stream") && Catch::Contains("message 1"));

  auto good = replies(stream(*role, at(3), 4, moe::k_forward_stream_handle, chunks_of("nop.0", {x})));
  CHECK(streamed_tensors(good)[0] == x);
  CHECK(role->stats().refused == 3);
}

TEST_CASE("a stream its caller breaks off midway is dropped without an answer", "[moe]") {
  auto role = nop_server();
  const auto messages = chunks_of("nop.1", {rows_of(random_floats(40 * h, 8), h)});
  auto opened =
      role->on(at(0), core::Request{9, moe::k_forward_stream_handle, core::PeerAddr{}, Buffer::copy_of(messages[0])});
  REQUIRE(opened.size() == 1);  // no reply, the idle timer
  const auto* timer = std::get_if<core::SetTimer>(&opened[0]);
  REQUIRE(timer != nullptr);
  CHECK(timer->id == moe::k_stream_timer);
  CHECK(timer->at == at(0) + moe::k_stream_idle);
  CHECK(role->on(at(0), core::RequestMessage{9, Buffer::copy_of(messages[1]), false}).empty());
  CHECK(role->open_streams() == 1);
  const apiary::Error why = apiary::make_error(apiary::errc::peer_down, "caller gone");
  auto gone = role->on(at(1), core::RequestMessage{9, why, false});
  REQUIRE(gone.size() == 1);
  CHECK(std::holds_alternative<core::CancelTimer>(gone[0]));
  CHECK(role->open_streams() == 0);
  CHECK(role->stats().broken_streams == 1);
  CHECK(role->queued_tasks() == 0);
}

TEST_CASE("a stream idle for k_stream_idle is dropped with an error and a busy one is kept", "[moe]") {
  auto role = nop_server();
  const auto messages = chunks_of("nop.0", {rows_of(random_floats(40 * h, 9), h)});
  const auto first = [&](core::RequestId id, core::TimePoint now) {
    const Buffer body = Buffer::copy_of(messages[0]);
    return role->on(now, core::Request{id, moe::k_forward_stream_handle, core::PeerAddr{}, body});
  };
  const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(moe::k_stream_idle);
  CHECK(replies(first(1, at(0))).empty());  // a unary call to the streaming handle looks like this
  CHECK(replies(first(2, at(1000))).empty());
  CHECK(replies(role->on(at(30000), core::RequestMessage{2, Buffer::copy_of(messages[1]), false})).empty());
  // The timer armed for the first stream fires: it goes, the second (busy since) stays.
  auto fired = role->on(at(0) + idle, core::TimerFired{moe::k_stream_timer});
  auto dropped = replies(fired);
  REQUIRE(dropped.size() == 1);
  CHECK(dropped[0].request == 1);
  REQUIRE_FALSE(dropped[0].response.ok());
  CHECK(dropped[0].response.error().code == apiary::errc::deadline_exceeded);
  CHECK_THAT(dropped[0].response.error().message, Catch::Contains("no message for 60 s"));
  CHECK(role->open_streams() == 1);
  const auto* rearmed = std::get_if<core::SetTimer>(&fired.back());
  REQUIRE(rearmed != nullptr);
  CHECK(rearmed->at == at(30000) + moe::k_stream_idle);
  CHECK(role->stats().broken_streams == 1);

  // The second stream finishes and is answered.
  for (std::size_t i = 2; i < messages.size(); ++i) {
    CHECK(replies(role->on(at(40000), core::RequestMessage{2, Buffer::copy_of(messages[i]), false})).empty());
  }
  auto end = replies(expert_test::settled(*role, at(40000), role->on(at(40000), core::RequestMessage{2, Buffer{}, true})));
  REQUIRE(end.size() == 2);
  CHECK(end[0].request == 2);
  CHECK(role->open_streams() == 0);
}
