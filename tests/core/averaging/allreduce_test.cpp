// AllReduceRunner: groups of runners on the in-memory network of allreduce_harness.hpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/averaging/allreduce.hpp"
#include "core/averaging/allreduce_fastwire.hpp"
#include "core/averaging/allreduce_wire.hpp"
#include "tests/core/averaging/allreduce_group.hpp"
#include "tests/support/peer_addr.hpp"

namespace apiary::core::averaging {
namespace {
using apiary::test::operator""_addr;

using namespace testing;

/// Whether two tensors hold the same bits (memcmp, which an empty one must not reach).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

/// Runs a healthy group; every sender must get the weighted mean within `atol`, and
/// every aux peer its own tensors back.
void check_group(const GroupSpec& spec, double atol) {
  Group g = make_group(spec);
  const Tensors reference = weighted_mean(g, senders_of(spec));
  Net net(std::move(g.runners));
  net.land_answers = spec.land;
  net.run();
  // Landings are posted in place and spliced, and match answers that are averages.
  const bool averages = !spec.answer_averages.empty() &&
                        std::all_of(spec.answer_averages.begin(), spec.answer_averages.end(), [](bool a) { return a; });
  const bool lands = spec.land && spec.in_place && spec.splice && averages && spec.codecs == std::vector{pb::NONE};
  if (lands) CHECK(net.landed > 0);
  if (!spec.land || !spec.in_place || !spec.splice || spec.answer_averages.empty()) CHECK(net.landed == 0);
  for (std::size_t p = 0; p < spec.modes.size(); ++p) {
    INFO("peer " << p << " mode " << static_cast<int>(spec.modes[p]));
    REQUIRE(net.runner(p).finished());
    REQUIRE(net.runner(p).outcome().status);
    CHECK(net.runner(p).outcome().failed_senders.empty());
    CHECK(net.runner(p).outcome().failed_reducers.empty());
    const Tensors result = result_of(net, g, p);
    if (spec.modes[p] == AveragingMode::aux) {
      CHECK(max_error(result, g.inputs[p]) == 0.0);
    } else {
      CHECK(max_error(result, reference) <= atol);
    }
  }
}

TEST_CASE("allreduce: four nodes get the exact mean for every part size", "[allreduce]") {
  GroupSpec spec;
  spec.modes.assign(4, AveragingMode::node);
  // 17 floats (parts split tensors, many parts per peer), 512 bytes, one part per tensor.
  for (std::int64_t part_size : {std::int64_t{68}, std::int64_t{512}, std::int64_t{1} << 19}) {
    INFO("part_size_bytes " << part_size);
    spec.part_size_bytes = part_size;
    check_group(spec, 1e-6);
  }
}

/// Four nodes at several part sizes, then a weighted client / node / aux / node mix.
void check_sizes_and_mix(GroupSpec spec) {
  spec.modes.assign(4, AveragingMode::node);
  for (std::int64_t part_size : {std::int64_t{68}, std::int64_t{512}, std::int64_t{1} << 19}) {
    INFO("part_size_bytes " << part_size);
    spec.part_size_bytes = part_size;
    check_group(spec, 1e-6);
  }
  spec.part_size_bytes = 256;
  spec.modes = {AveragingMode::client, AveragingMode::node, AveragingMode::aux, AveragingMode::node};
  spec.weights = {0.5, 7.25, 3.0, 0.01};
  check_group(spec, 1e-6);
}

TEST_CASE("allreduce: deferred reductions (device jobs, results out of order) give the exact mean",
          "[allreduce]") {
  GroupSpec spec;
  spec.deferred = true;
  check_sizes_and_mix(spec);
}

TEST_CASE("allreduce: averages in place (no deltas) give the exact mean, inline and deferred",
          "[allreduce]") {
  GroupSpec spec;
  spec.in_place = true;
  for (const bool deferred : {false, true}) {
    INFO("deferred " << deferred);
    spec.deferred = deferred;
    check_sizes_and_mix(spec);
  }
  spec.modes = {AveragingMode::client, AveragingMode::node, AveragingMode::aux, AveragingMode::node};
  spec.weights = {0.5, 7.25, 3.0, 0.01};
  spec.part_size_bytes = 256;
  spec.codecs = {pb::FLOAT16};  // decoded answers are added too
  check_group(spec, 2e-3);
}

TEST_CASE("allreduce: spliced parts (views of the tensors) give the exact mean, in place or not, inline or deferred",
          "[allreduce]") {
  GroupSpec spec;
  spec.splice = true;
  for (const bool in_place : {false, true}) {
    for (const bool deferred : {false, true}) {  // deltas from the averaging pass or the job
      INFO("in place " << in_place << ", deferred " << deferred);
      spec.in_place = in_place;
      spec.deferred = deferred;
      check_sizes_and_mix(spec);
    }
  }
  spec.deferred = false;
  spec.modes = {AveragingMode::node, AveragingMode::client, AveragingMode::node, AveragingMode::aux};
  spec.codecs = {pb::FLOAT16};  // a codec's parts are encoded as before
  check_group(spec, 2e-3);
}

TEST_CASE("allreduce: reducers answering with averages give the exact mean, the same bits on every member in place",
          "[allreduce]") {
  GroupSpec spec;
  for (const bool in_place : {false, true}) {
    for (const bool splice : {false, true}) {  // averages over the received copy, or in a message of their own
      for (const bool deferred : {false, true}) {
        INFO("in place " << in_place << ", spliced " << splice << ", deferred " << deferred);
        spec.in_place = in_place;
        spec.splice = splice;
        spec.deferred = deferred;
        spec.answer_averages.assign(4, true);
        check_sizes_and_mix(spec);
        if (!in_place) continue;
        // x + (avg - x) need not be avg in floating point; a copied average is.
        spec.modes.assign(4, AveragingMode::node);
        spec.weights = {0.3, 1.7, 2.9, 0.11};
        spec.part_size_bytes = 68;
        Group g = make_group(spec);
        Net net(std::move(g.runners));
        net.run();
        const Tensors first = result_of(net, g, 0);
        for (std::size_t p = 1; p < 4; ++p) {
          INFO("peer " << p);
          REQUIRE(net.runner(p).outcome().status);
          for (std::size_t t = 0; t < first.size(); ++t) {
            CHECK(same_bits(result_of(net, g, p)[t], first[t]));
          }
        }
        spec.weights.clear();
      }
    }
  }
  // Answers that land in the tensors (posted receives), and the ones that cannot: deltas
  // and a codec's parts arrive whole.
  spec.land = true;
  spec.in_place = true;
  spec.splice = true;
  for (const bool deferred : {false, true}) {
    INFO("landing, deferred " << deferred);
    spec.deferred = deferred;
    spec.answer_averages.assign(4, true);
    check_sizes_and_mix(spec);
    spec.answer_averages = {false, true, false, true};
    check_sizes_and_mix(spec);
  }
  spec.land = false;
  // Reducers of both kinds in one group, and a codec's parts, answered with deltas still.
  spec.deferred = false;
  spec.answer_averages = {true, false, true, false};
  check_sizes_and_mix(spec);
  spec.modes = {AveragingMode::node, AveragingMode::client, AveragingMode::node, AveragingMode::aux};
  spec.answer_averages.assign(4, true);
  spec.codecs = {pb::FLOAT16};
  check_group(spec, 2e-3);
}

TEST_CASE("allreduce: identical results give every member the same bits with any codec", "[allreduce]") {
  for (const auto codec : {pb::NONE, pb::FLOAT16, pb::UNIFORM_8BIT, pb::BLOCKWISE_8BIT, pb::QUANTILE_8BIT}) {
    for (const bool deferred : {false, true}) {
      for (const bool splice : {false, true}) {
        INFO("codec " << static_cast<int>(codec) << ", deferred " << deferred << ", spliced " << splice);
        GroupSpec spec;
        spec.modes = {AveragingMode::node, AveragingMode::client, AveragingMode::node, AveragingMode::node};
        spec.weights = {0.3, 1.7, 2.9, 0.11};
        spec.part_size_bytes = 200;
        spec.codecs = {codec};
        spec.in_place = true;
        spec.deferred = deferred;
        spec.splice = splice;
        spec.answer_averages.assign(4, true);
        spec.identical = true;
        Group g = make_group(spec);
        const Tensors reference = weighted_mean(g, senders_of(spec));
        Net net(std::move(g.runners));
        net.run();
        const Tensors first = result_of(net, g, 0);
        CHECK(max_error(first, reference) <= (codec == pb::NONE ? 1e-6 : 6e-2));
        for (std::size_t p = 1; p < 4; ++p) {
          INFO("peer " << p);
          REQUIRE(net.runner(p).outcome().status);
          const Tensors mine = result_of(net, g, p);
          for (std::size_t t = 0; t < first.size(); ++t) {
            CHECK(same_bits(mine[t], first[t]));
          }
        }
      }
    }
  }
  // Without it, a codec's answers are each sender's delta: the members differ.
  GroupSpec spec;
  spec.modes.assign(4, AveragingMode::node);
  spec.codecs = {pb::UNIFORM_8BIT};
  spec.in_place = true;
  spec.answer_averages.assign(4, true);
  Group g = make_group(spec);
  Net net(std::move(g.runners));
  net.run();
  CHECK(max_error(result_of(net, g, 0), result_of(net, g, 1)) > 0.0);
  // It needs in-place averages answered as averages.
  AllReduceConfig bad;
  bad.identical_results = true;
  bad.averages_in_place = true;
  const Status refused = validate(bad, {});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == errc::invalid_argument);
  CHECK(std::string(refused.error().what()).find("identical_results") != std::string::npos);
}

TEST_CASE("allreduce: a spliced part's body is the tensor itself, kept alive while a frame holds it",
          "[allreduce]") {
  std::vector<std::vector<float>> tensors{std::vector<float>(1000), std::vector<float>(24)};
  for (std::size_t k = 0; k < tensors[0].size(); ++k) tensors[0][k] = static_cast<float>(k);
  const float* first = tensors[0].data();
  AllReduceConfig c;
  c.group_id = "g";
  c.peers = {test_addr(0), test_addr(1)};
  c.modes = {AveragingMode::node, AveragingMode::node};
  c.tensor_sizes = {1000, 24};
  c.peer_fractions = {1.0, 1.0};
  c.part_size_bytes = 1024;
  c.splice_parts = true;
  c.averages_in_place = true;
  auto runner = AllReduceRunner::create(c, std::move(tensors));
  REQUIRE(runner);
  Effects fx = runner->start(TimePoint{});
  std::vector<Buffer> bodies;
  std::string joined;
  for (const Effect& e : fx) {
    if (const auto* call = std::get_if<Call>(&e)) {
      CHECK(call->request.size() < 64);  // only the framing is a string
      bodies.push_back(call->body);
      joined = whole_message(*call);
    } else if (const auto* send = std::get_if<Send>(&e); send && !send->body.empty()) {
      bodies.push_back(send->body);
    }
  }
  // Peer 0 sends peer 1's half (elements 512.. of the 1024), part by part, from where
  // the values lie.
  REQUIRE(bodies.size() >= 2);
  CHECK(reinterpret_cast<const float*>(bodies[0].data()) == first + 512);
  CHECK(bodies[0].size() == 256 * sizeof(float));
  std::string_view floats;
  auto msg = read_part_message(joined, floats);
  REQUIRE(msg);
  CHECK(msg->code == pb::PART_FOR_AVERAGING);
  CHECK(floats == bodies[0].view());
  // Peer 1's copy of part 0 (elements 0..255, all 10): the answer, its delta, is written
  // over that copy in the received message and sent from there.
  const std::vector<float> theirs(256, 10.0f);
  Buffer part = Buffer::copy_of(encode_none_part(pb::PART_FOR_AVERAGING, "g", test_addr(1).multiaddr(), theirs.data(),
                                                 theirs.size(), 1.0));
  const std::byte* received = part.data();
  const std::size_t received_size = part.size();
  Effects served = runner->on_request(TimePoint{}, 77, test_addr(1), std::move(part));
  const Reply* answer = nullptr;
  for (const Effect& e : served) {
    if (const auto* r = std::get_if<Reply>(&e); r && r->request == 77) answer = r;
  }
  REQUIRE(answer != nullptr);
  REQUIRE(answer->body.size() == 256 * sizeof(float));
  CHECK(answer->body.data() >= received);
  CHECK(answer->body.data() + answer->body.size() <= received + received_size);
  std::string_view delta;
  const std::string answer_bytes = whole_message(*answer);
  auto answered = read_part_message(answer_bytes, delta);
  REQUIRE(answered);
  CHECK(answered->code == pb::AVERAGED_PART);
  float d3 = 0.0f;
  std::memcpy(&d3, delta.data() + 3 * sizeof(float), sizeof d3);
  CHECK(d3 == (3.0f + 10.0f) / 2.0f - 10.0f);
  // The round ends (peer 1 cancels): the frames still hold views, so the outcome is a copy
  // and the views' bytes stay as they were.
  (void)runner->on_response(TimePoint{}, 2, make_error(errc::peer_down, "gone"));
  (void)runner->on_request_message(TimePoint{}, 77, make_error(errc::peer_down, "gone"), true);
  REQUIRE(runner->finished());
  auto out = runner->take_outcome();
  REQUIRE(out.averages.size() == 2);
  CHECK(out.averages[0].data() != first);
  CHECK(out.averages[0][600] == 600.0f);
  out.averages[0][600] = -1.0f;
  CHECK(reinterpret_cast<const float*>(bodies[0].data())[600 - 512] == 600.0f);
}

TEST_CASE("allreduce: weighted mean with two client peers", "[allreduce]") {
  GroupSpec spec;
  spec.modes = {AveragingMode::client, AveragingMode::node, AveragingMode::client,
                AveragingMode::node};
  spec.weights = {0.5, 7.25, 3.0, 0.01};
  spec.seed = 7;
  check_group(spec, 1e-6);
}

TEST_CASE("allreduce: 0-2 client and 0-2 aux peers among four", "[allreduce]") {
  for (int clients = 0; clients <= 2; ++clients) {
    for (int aux = 0; aux <= 2; ++aux) {
      INFO(clients << " clients, " << aux << " aux");
      GroupSpec spec;
      spec.seed = static_cast<std::uint64_t>(10 + clients * 3 + aux);
      spec.part_size_bytes = 100;
      for (int i = 0; i < 4; ++i) {
        spec.modes.push_back(i < clients                ? AveragingMode::client
                             : i >= 4 - aux             ? AveragingMode::aux
                                                        : AveragingMode::node);
      }
      check_group(spec, 1e-6);
    }
  }
}

TEST_CASE("allreduce: edge groups (all aux, one node and three aux, one client)", "[allreduce]") {
  GroupSpec spec;
  spec.modes.assign(4, AveragingMode::aux);
  {
    // No sender: nothing to average, every tensor stays as it is.
    Group g = make_group(spec);
    Net net(std::move(g.runners));
    net.run();
    for (std::size_t p = 0; p < 4; ++p) {
      REQUIRE(net.runner(p).finished());
      CHECK(max_error(result_of(net, g, p), g.inputs[p]) == 0.0);
    }
  }
  spec.modes = {AveragingMode::node, AveragingMode::aux, AveragingMode::aux, AveragingMode::aux};
  check_group(spec, 1e-6);
  spec.modes = {AveragingMode::client, AveragingMode::node, AveragingMode::node};
  check_group(spec, 1e-6);
}

TEST_CASE("allreduce: compressed parts stay within the codec's error", "[allreduce]") {
  GroupSpec spec;
  spec.modes = {AveragingMode::node, AveragingMode::client, AveragingMode::node,
                AveragingMode::aux};
  spec.part_size_bytes = 200;
  spec.codecs = {pb::FLOAT16};
  check_group(spec, 2e-3);
  spec.codecs = {pb::UNIFORM_8BIT};
  check_group(spec, 6e-2);
  // One codec per tensor, all six.
  spec.codecs = {pb::NONE,          pb::FLOAT16,     pb::MEANSTD_16BIT,
                 pb::QUANTILE_8BIT, pb::UNIFORM_8BIT, pb::BLOCKWISE_8BIT};
  check_group(spec, 6e-2);
}

TEST_CASE("allreduce: bad streams are refused with their code", "[allreduce]") {
  GroupSpec spec;
  spec.modes = {AveragingMode::node, AveragingMode::node, AveragingMode::aux};
  Group g = make_group(spec);
  AllReduceRunner& r = g.runners[0];
  (void)r.start(0ns);
  const float values[1] = {1.0f};
  auto code_of = [](const Effects& fx) {
    REQUIRE(fx.size() >= 1);
    const auto* reply = std::get_if<Reply>(&fx[0]);
    REQUIRE(reply);
    CHECK(reply->last);
    REQUIRE(reply->response);
    auto msg = decode_part_message(*reply->response);
    REQUIRE(msg);
    return msg->code;
  };
  auto wrong_group = encode_part_message(pb::PART_FOR_AVERAGING, "other", "", values, 1,
                                         pb::NONE, 1.0);
  REQUIRE(wrong_group);
  CHECK(code_of(r.on_request(0ns, 1, test_addr(1), Buffer::copy_of(*wrong_group))) == pb::BAD_GROUP_ID);
  auto good = encode_part_message(pb::PART_FOR_AVERAGING, "group-1", "", values, 1, pb::NONE, 1.0);
  REQUIRE(good);
  // The aux peer sends nothing, a stranger is not in the group.
  CHECK(code_of(r.on_request(0ns, 2, test_addr(2), Buffer::copy_of(*good))) == pb::PROTOCOL_VIOLATION);
  CHECK(code_of(r.on_request(0ns, 3, "/ip4/1.2.3.4/tcp/9"_addr, Buffer::copy_of(*good))) == pb::PROTOCOL_VIOLATION);
  CHECK(code_of(r.on_request(0ns, 4, test_addr(1), Buffer::copy_of("not a message"))) == pb::PROTOCOL_VIOLATION);
  auto not_first = encode_part_message(pb::AVERAGED_PART, "group-1", "", values, 1, pb::NONE, 1.0);
  REQUIRE(not_first);
  CHECK(code_of(r.on_request(0ns, 5, test_addr(1), Buffer::copy_of(*not_first))) == pb::PROTOCOL_VIOLATION);
}

/// Replies to `request` among `fx`: (number of AVERAGED_PART messages, ended with last).
std::pair<std::size_t, bool> answers(const Effects& fx, RequestId request) {
  std::size_t parts = 0;
  bool ended = false;
  for (const Effect& e : fx) {
    const auto* reply = std::get_if<Reply>(&e);
    if (!reply || reply->request != request) continue;
    REQUIRE(reply->response);
    if (!reply->response->empty()) {
      auto msg = decode_part_message(*reply->response);
      REQUIRE(msg);
      CHECK(msg->code == pb::AVERAGED_PART);
      ++parts;
    }
    ended = ended || reply->last;
  }
  return {parts, ended};
}

TEST_CASE("allreduce: a client's answers wait until its input ends, a node's do not",
          "[allreduce]") {
  for (AveragingMode mode : {AveragingMode::client, AveragingMode::node}) {
    INFO("sender mode " << static_cast<int>(mode));
    GroupSpec spec;
    spec.modes = {AveragingMode::node, mode};
    spec.sizes = {40};
    spec.part_size_bytes = 80;  // 20 floats: two parts, both reduced by peer 0
    Group g = make_group(spec);
    AllReduceRunner& reducer = g.runners[0];
    if (mode == AveragingMode::node) {
      // Give every part to peer 0 by rebuilding it with fraction 0 for peer 1.
      AllReduceConfig c;
      c.group_id = "group-1";
      c.peers = {test_addr(0), test_addr(1)};
      c.modes = spec.modes;
      c.tensor_sizes = spec.sizes;
      c.peer_fractions = {1.0, 0.0};
      c.part_size_bytes = spec.part_size_bytes;
      auto r = AllReduceRunner::create(c, g.inputs[0]);
      REQUIRE(r);
      reducer = std::move(*r);
    }
    REQUIRE(reducer.partition().num_parts_by_peer[0] == 2);
    (void)reducer.start(0ns);
    const float* x = g.inputs[1][0].data();
    auto part0 = encode_part_message(pb::PART_FOR_AVERAGING, "group-1", "", x, 20, pb::NONE, 1.0);
    auto part1 = encode_part_message(pb::NO_CODE, "", "", x + 20, 20, pb::NONE, 1.0);
    REQUIRE(part0);
    REQUIRE(part1);
    const auto first = answers(reducer.on_request(1ms, 9, test_addr(1), Buffer::copy_of(*part0)), 9);
    const auto second = answers(reducer.on_request_message(2ms, 9, Buffer::copy_of(*part1), false), 9);
    const auto end = answers(reducer.on_request_message(3ms, 9, Buffer{}, true), 9);
    if (mode == AveragingMode::client) {
      CHECK(first.first + second.first == 0);
      CHECK(end == std::make_pair(std::size_t{2}, true));
    } else {
      CHECK(first == std::make_pair(std::size_t{1}, false));
      CHECK(second == std::make_pair(std::size_t{1}, false));
      CHECK(end == std::make_pair(std::size_t{0}, true));
    }
    CHECK(reducer.finished());
    // The reducer's own result is the mean of both copies.
    for (std::size_t k = 0; k < 40; ++k) {
      const float mean = (g.inputs[0][0][k] + g.inputs[1][0][k]) / 2;
      CHECK(g.inputs[0][0][k] + reducer.outcome().deltas[0][k] == Approx(mean).margin(1e-6));
    }
  }
}

TEST_CASE("allreduce: a cancelled round in place hands the tensors back as they stand", "[allreduce]") {
  const std::vector<float> mine{1.0f, 2.0f, 3.0f, 4.0f};
  AllReduceConfig c;
  c.group_id = "g";
  c.peers = {test_addr(0), test_addr(1)};
  c.modes = {AveragingMode::node, AveragingMode::node};
  c.tensor_sizes = {4};
  c.peer_fractions = {1.0, 1.0};
  c.averages_in_place = true;
  auto runner = AllReduceRunner::create(c, {mine});
  REQUIRE(runner);
  (void)runner->start(TimePoint{});
  (void)runner->cancel(TimePoint{});
  REQUIRE(runner->finished());
  auto out = runner->take_outcome();
  CHECK(out.status.error().code == errc::cancelled);
  // Nothing was averaged before the cancel: the caller gets its own values back.
  REQUIRE(out.averages.size() == 1);
  CHECK(out.averages[0] == mine);
}

}  // namespace
}  // namespace apiary::core::averaging
