// StateLoader driven by hand: the call it opens, a clean download, and falling back to
// the next donor when one breaks mid-stream, stalls past chunk_timeout, sends garbage,
// does not share, or holds another model; every donor failing; no donors; cancel.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <variant>
#include <vector>

#include "tests/core/averaging/state_testing.hpp"
#include "tests/support/peer_addr.hpp"

namespace {
using apiary::test::operator""_addr;

using namespace apiary::core::averaging::testing;

const std::vector<Shape> k_shapes{{3, 4}, {100}};

// A donor's stream: two tensors (12 and 100 floats) in 32-byte chunks, values from `base`.
std::vector<std::string> donor_stream(float base, std::vector<Shape> shapes = k_shapes) {
  const auto tensors = tensors_of(shapes, [base](std::size_t, std::size_t i) { return base + static_cast<float>(i); });
  auto stream = av::make_state_stream("meta", tensors, shapes, pb::NONE, 32);
  REQUIRE(stream.ok());
  return *stream;
}

av::StateLoader make_loader(std::vector<apiary::core::PeerAddr> donors, std::uint64_t id_base = 100) {
  av::StateLoaderConfig config;
  config.donors = std::move(donors);
  config.handle = "run::DecentralizedAverager.rpc_download_state";
  config.chunk_timeout = seconds(2);
  config.call_timeout = seconds(60);
  config.expected_shapes = k_shapes;
  config.id_base = id_base;
  auto loader = av::StateLoader::create(config);
  REQUIRE(loader.ok());
  return std::move(*loader);
}

// The one Call of `fx`, checked as a download request.
Call the_call(const Effects& fx) {
  auto calls = all_of<Call>(fx);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].stream);
  CHECK(calls[0].last);
  CHECK(calls[0].handle == "run::DecentralizedAverager.rpc_download_state");
  CHECK(calls[0].timeout == seconds(60));
  pb::DownloadRequest request;
  CHECK(request.ParseFromString(calls[0].request));
  return calls[0];
}

// Feeds `messages` on `call` at 1 s intervals from `t`; returns the last input's effects.
Effects feed(av::StateLoader& loader, TimePoint& t, apiary::core::CallId call,
             const std::vector<std::string>& messages) {
  Effects fx;
  for (const auto& m : messages) {
    t += seconds(1);
    fx = loader.on_message(t, call, m);
    if (loader.finished() || !all_of<Call>(fx).empty()) break;
  }
  return fx;
}

}  // namespace

TEST_CASE("state loader: downloads from the best donor", "[state_loader]") {
  auto loader = make_loader({"/ip4/10.0.0.1/tcp/1"_addr, "/ip4/10.0.0.2/tcp/2"_addr});
  TimePoint t = seconds(10);
  Effects fx = loader.start(t);
  const Call call = the_call(fx);
  CHECK(call.id == 101);
  CHECK(call.peer == "/ip4/10.0.0.1/tcp/1"_addr);
  auto timers = all_of<SetTimer>(fx);
  REQUIRE(timers.size() == 1);
  CHECK(timers[0].id == 101);
  CHECK(timers[0].at == t + seconds(2));

  const auto stream = donor_stream(5.0f);
  REQUIRE(stream.size() > 3);
  for (const auto& m : stream) {
    t += seconds(1);  // under chunk_timeout between two messages, 1 s each
    fx = loader.on_message(t, call.id, m);
    auto rearmed = all_of<SetTimer>(fx);
    REQUIRE(rearmed.size() == 1);
    CHECK(rearmed[0].at == t + seconds(2));
    CHECK(loader.on_timer(t + seconds(1), 101).empty());  // an older timer firing late
  }
  CHECK_FALSE(loader.finished());
  fx = loader.on_response(t, call.id, std::string{});
  CHECK(all_of<CancelTimer>(fx).size() == 1);
  REQUIRE(loader.finished());
  const auto& outcome = *loader.outcome();
  REQUIRE(outcome.ok());
  CHECK(outcome->donor == "/ip4/10.0.0.1/tcp/1"_addr);
  CHECK(outcome->metadata == "meta");
  CHECK(outcome->shapes == k_shapes);
  REQUIRE(outcome->tensors.size() == 2);
  CHECK(outcome->tensors[1][99] == 104.0f);
  CHECK(loader.failures().empty());
  // Nothing more happens once finished.
  CHECK(loader.on_timer(t + seconds(5), 101).empty());
  CHECK(loader.cancel(t).empty());
}

TEST_CASE("state loader: falls back to the next donor", "[state_loader]") {
  auto loader = make_loader({"/ip4/10.0.0.1/tcp/1"_addr, "/ip4/10.0.0.2/tcp/1"_addr});
  TimePoint t = seconds(0);
  const Call a = the_call(loader.start(t));
  const auto stream = donor_stream(1.0f);
  Effects fx = feed(loader, t, a.id, {stream[0], stream[1]});
  REQUIRE(all_of<Call>(fx).empty());
  errc why = errc::ok;
  bool cancels_a = false;

  SECTION("the first donor's stream breaks mid-way") {
    fx = loader.on_response(t, a.id, apiary::make_error(errc::peer_down, "connection reset"));
    why = errc::peer_down;
  }
  SECTION("the first donor stalls past chunk_timeout") {
    CHECK(loader.on_timer(t + seconds(1), 101).empty());  // not due yet
    fx = loader.on_timer(t + seconds(2), 101);
    why = errc::deadline_exceeded;
    cancels_a = true;
  }
  SECTION("the first donor sends garbage") {
    t += seconds(1);
    fx = loader.on_message(t, a.id, "\x0a\xff\xff\xff");
    why = errc::malformed;
    cancels_a = true;
  }
  SECTION("the first donor ends in the middle of a tensor") {
    t += seconds(1);
    REQUIRE(loader.on_message(t, a.id, stream[2]).size() == 1);  // tensor 1 begun
    fx = loader.on_response(t, a.id, std::string{});
    why = errc::truncated;
  }
  SECTION("the first donor holds another model") {
    // Tensor 1 of shape [2] (one chunk) where [100] is expected.
    fx = loader.on_message(t, a.id, donor_stream(1.0f, {{3, 4}, {2}})[2]);
    why = errc::protocol;
    cancels_a = true;
  }

  auto cancels = all_of<Cancel>(fx);
  REQUIRE(cancels.size() == (cancels_a ? 1u : 0u));
  if (cancels_a) CHECK(cancels[0].call == a.id);
  const Call b = the_call(fx);
  CHECK(b.peer == "/ip4/10.0.0.2/tcp/1");
  CHECK(b.id == 102);
  REQUIRE(loader.failures().size() == 1);
  CHECK(loader.failures()[0].donor == "/ip4/10.0.0.1/tcp/1");
  CHECK(loader.failures()[0].error.code == why);

  // A late message or end from A is ignored; B delivers.
  CHECK(loader.on_message(t, a.id, stream[2]).empty());
  CHECK(loader.on_response(t, a.id, std::string{}).empty());
  const auto from_b = donor_stream(50.0f);
  feed(loader, t, b.id, std::vector<std::string>(from_b.begin(), from_b.end() - 1));
  // The last message may travel with the end.
  loader.on_response(t, b.id, from_b.back()).swap(fx);
  REQUIRE(loader.finished());
  REQUIRE(loader.outcome()->ok());
  CHECK((*loader.outcome())->donor == "/ip4/10.0.0.2/tcp/1");
  CHECK((*loader.outcome())->tensors[0][0] == 50.0f);
}

TEST_CASE("state loader: a donor that does not share is skipped", "[state_loader]") {
  auto loader = make_loader({"/ip4/10.0.0.7/tcp/1"_addr, "/ip4/10.0.0.8/tcp/1"_addr});
  TimePoint t = seconds(0);
  const Call q = the_call(loader.start(t));
  Effects fx = loader.on_response(t, q.id, std::string{});  // empty stream: sharing off
  const Call s = the_call(fx);
  CHECK(s.peer == "/ip4/10.0.0.8/tcp/1");
  REQUIRE(loader.failures().size() == 1);
  CHECK(loader.failures()[0].error.code == errc::not_found);
  feed(loader, t, s.id, donor_stream(0.0f));
  loader.on_response(t, s.id, std::string{}).swap(fx);
  REQUIRE(loader.finished());
  CHECK(loader.outcome()->ok());
}

TEST_CASE("state loader: every donor failing is reported donor by donor", "[state_loader]") {
  auto loader = make_loader({"/ip4/10.0.0.1/tcp/1"_addr, "/ip4/10.0.0.2/tcp/1"_addr, "/ip4/10.0.0.3/tcp/1"_addr}, 0);
  TimePoint t = seconds(0);
  const Call a = the_call(loader.start(t));
  const Call b = the_call(loader.on_message(t, a.id, "garbage"));
  const Call c = the_call(loader.on_timer(t + seconds(2), 1));
  Effects fx = loader.on_response(t + seconds(3), c.id,
                                  apiary::make_error(errc::handler_error, "state is busy"));
  CHECK(b.id == 2);
  CHECK(all_of<Call>(fx).empty());
  CHECK(all_of<CancelTimer>(fx).size() == 1);
  REQUIRE(loader.finished());
  const auto& outcome = *loader.outcome();
  REQUIRE_FALSE(outcome.ok());
  CHECK(outcome.error().code == errc::unavailable);
  const std::string& text = outcome.error().message;
  CHECK(text.find("/ip4/10.0.0.1/tcp/1: malformed") != std::string::npos);
  CHECK(text.find("/ip4/10.0.0.2/tcp/1: deadline_exceeded") != std::string::npos);
  CHECK(text.find("/ip4/10.0.0.3/tcp/1: handler_error: state is busy") != std::string::npos);
  REQUIRE(loader.failures().size() == 3);
}

TEST_CASE("state loader: no donors, bad config, cancel", "[state_loader]") {
  auto none = make_loader({});
  CHECK(none.start(seconds(0)).empty());
  REQUIRE(none.finished());
  CHECK(none.outcome()->error().code == errc::not_found);

  av::StateLoaderConfig bad;
  bad.handle.clear();
  CHECK(av::StateLoader::create(bad).error().code == errc::invalid_argument);
  bad.handle = av::k_download_state_handle;
  bad.chunk_timeout = seconds(0);
  CHECK(av::StateLoader::create(bad).error().code == errc::invalid_argument);

  auto loader = make_loader({"/ip4/10.0.0.1/tcp/1"_addr});
  const Call a = the_call(loader.start(seconds(0)));
  Effects fx = loader.cancel(seconds(1));
  auto cancels = all_of<Cancel>(fx);
  REQUIRE(cancels.size() == 1);
  CHECK(cancels[0].call == a.id);
  CHECK(all_of<CancelTimer>(fx).size() == 1);
  REQUIRE(loader.finished());
  CHECK(loader.outcome()->error().code == errc::cancelled);
  auto taken = loader.take_outcome();
  REQUIRE(taken.has_value());
  CHECK_FALSE(taken->ok());
}
