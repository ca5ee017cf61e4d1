// Synchronizer: per-group collective inputs with the right codecs, fp16 rounding for
// the Horovod compressors, the error-feedback residual carried from one step to the
// next, and assemble() undoing the cut of partitioned variables.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/collective/synchronizer.hpp"
#include "messages/tensor/float16.hpp"

using namespace apiary;
namespace cc = core::collective;

namespace {

/// w[4] in group 0 and b[2] in group 1 (w cut in two pieces when `split`), both with `c`.
cc::ArPlan two_variable_plan(cc::CompressorKind c, bool split = false) {
  cc::ArPlan plan;
  plan.replicas = {"localhost:CPU:0", "localhost:CPU:1"};
  plan.variables.push_back({"w:0", {4}, split ? "2" : "", false, {}});
  plan.variables.push_back({"b:0", {2}, "", false, {}});
  if (split) {
    plan.tensors.push_back({"w/part_0:0", 0, 0, 2, 0, c, cc::Transport::ring});
    plan.tensors.push_back({"w/part_1:0", 0, 1, 2, 0, c, cc::Transport::ring});
    plan.variables[0].shards = {0, 1};
  } else {
    plan.tensors.push_back({"w:0", 0, 0, 4, 0, c, cc::Transport::ring});
    plan.variables[0].shards = {0};
  }
  plan.tensors.push_back({"b:0", 1, 0, 2, 1, c, cc::Transport::ring});
  plan.variables[1].shards = {plan.tensors.size() - 1};
  plan.groups.push_back({0, split ? std::vector<std::size_t>{0, 1} : std::vector<std::size_t>{0}, cc::Transport::ring});
  plan.groups.push_back({1, {plan.tensors.size() - 1}, cc::Transport::ring});
  return plan;
}

float fp16(float x) { return messages::half_to_float(messages::float_to_half(x)); }

}  // namespace

TEST_CASE("NoneCompressor sends the gradients as they are, one input per group", "[collective][unit]") {
  auto sync = cc::Synchronizer::create(two_variable_plan(cc::CompressorKind::none, true));
  REQUIRE(sync.ok());
  const std::map<std::string, std::vector<float>> g{{"w:0", {0.1F, 0.2F, 0.3F, 0.4F}}, {"b:0", {1.1F, -2.2F}}};
  auto in = sync->prepare(g);
  REQUIRE(in.ok());
  REQUIRE(in->size() == 2);
  // w's two pieces follow one another in group 0: w goes whole, as one tensor.
  CHECK(sync->whole(0));
  CHECK_FALSE(sync->whole(1));
  CHECK((*in)[0].tensors == std::vector<std::vector<float>>{{0.1F, 0.2F, 0.3F, 0.4F}});
  CHECK((*in)[0].codecs == std::vector<pb::CompressionType>{pb::NONE});
  CHECK((*in)[1].tensors == std::vector<std::vector<float>>{{1.1F, -2.2F}});
  auto out = sync->assemble({(*in)[0].tensors, (*in)[1].tensors});
  REQUIRE(out.ok());
  CHECK(*out == g);
  CHECK(sync->residual("w/part_0:0").empty());
  // An output of the wrong size for the whole variable is refused.
  auto short_out = sync->assemble({{{0.1F, 0.2F}}, (*in)[1].tensors});
  REQUIRE_FALSE(short_out.ok());
  CHECK(short_out.error().message.find("w:0") != std::string::npos);
}

TEST_CASE("a partitioned variable is cut into its pieces unless they follow one another in one group, uncompressed",
          "[collective][unit]") {
  // w of shape `shape` cut in two along `axis`; its pieces in groups `groups`, with `c`.
  struct Case {
    const char* what;
    std::vector<std::int64_t> shape;
    std::string partitioner;
    std::vector<std::int32_t> groups;
    cc::CompressorKind c;
    std::vector<std::vector<float>> sent;  // the inputs' tensors, groups in order
  };
  const std::vector<Case> cases = {
      {"each piece its own group", {4}, "2", {0, 1}, cc::CompressorKind::none, {{0.1F, 0.2F}, {0.3F, 0.4F}}},
      {"pieces strided (a 2x2 matrix cut along its columns)", {2, 2}, "1,2", {0, 0}, cc::CompressorKind::none,
       {{0.1F, 0.3F}, {0.2F, 0.4F}}},
      {"a 1x4 matrix cut along its columns: blocks in order", {1, 4}, "1,2", {0, 0}, cc::CompressorKind::none,
       {{0.1F, 0.2F, 0.3F, 0.4F}}},
      {"compressed pieces", {4}, "2", {0, 0}, cc::CompressorKind::horovod,
       {{fp16(0.1F), fp16(0.2F)}, {fp16(0.3F), fp16(0.4F)}}},
  };
  for (const auto& k : cases) {
    INFO(k.what);
    cc::ArPlan plan;
    plan.replicas = {"localhost:CPU:0", "localhost:CPU:1"};
    plan.variables.push_back({"w:0", k.shape, k.partitioner, false, {0, 1}});
    plan.tensors.push_back({"w/part_0:0", 0, 0, 2, k.groups[0], k.c, cc::Transport::ring});
    plan.tensors.push_back({"w/part_1:0", 0, 1, 2, k.groups[1], k.c, cc::Transport::ring});
    if (k.groups[0] == k.groups[1]) {
      plan.groups.push_back({0, {0, 1}, cc::Transport::ring});
    } else {
      plan.groups.push_back({0, {0}, cc::Transport::ring});
      plan.groups.push_back({1, {1}, cc::Transport::ring});
    }
    auto sync = cc::Synchronizer::create(plan);
    REQUIRE(sync.ok());
    CHECK(sync->whole(0) == (k.sent.size() == 1));
    const std::map<std::string, std::vector<float>> g{{"w:0", {0.1F, 0.2F, 0.3F, 0.4F}}};
    auto in = sync->prepare(g);
    REQUIRE(in.ok());
    std::vector<std::vector<float>> sent;
    std::vector<std::vector<std::vector<float>>> outputs;
    for (const auto& group : *in) {
      sent.insert(sent.end(), group.tensors.begin(), group.tensors.end());
      outputs.push_back(group.tensors);
    }
    CHECK(sent == k.sent);
    auto out = sync->assemble(outputs);
    REQUIRE(out.ok());
    CHECK(out->at("w:0") == (k.c == cc::CompressorKind::none ? g.at("w:0")
                                                              : std::vector<float>{fp16(0.1F), fp16(0.2F), fp16(0.3F),
                                                                                   fp16(0.4F)}));
  }
}

TEST_CASE("HorovodCompressor rounds to fp16 and keeps no residual", "[collective][unit]") {
  auto sync = cc::Synchronizer::create(two_variable_plan(cc::CompressorKind::horovod));
  REQUIRE(sync.ok());
  const std::map<std::string, std::vector<float>> g{{"w:0", {0.1F, 0.2F, 0.3F, 1e-5F}}, {"b:0", {1.1F, -2.2F}}};
  for (int step = 0; step < 2; ++step) {
    auto in = sync->prepare(g);
    REQUIRE(in.ok());
    CHECK((*in)[0].codecs == std::vector<pb::CompressionType>{pb::FLOAT16});
    for (std::size_t j = 0; j < 4; ++j) CHECK((*in)[0].tensors[0][j] == fp16(g.at("w:0")[j]));
    CHECK((*in)[0].tensors[0][0] != 0.1F);  // 0.1 is not an fp16 value
  }
  CHECK(sync->residual("w:0").empty());
}

TEST_CASE("HorovodCompressorEF carries its residual to the next step", "[collective][unit]") {
  auto sync = cc::Synchronizer::create(two_variable_plan(cc::CompressorKind::horovod_ef));
  REQUIRE(sync.ok());
  const std::vector<float> w{0.1F, 0.2F, 0.3F, 1e-5F};
  const std::map<std::string, std::vector<float>> g{{"w:0", w}, {"b:0", {1.1F, -2.2F}}};
  // Step 0: c = fp16(g), e = g - c.
  auto in0 = sync->prepare(g);
  REQUIRE(in0.ok());
  const auto& e0 = sync->residual("w:0");
  REQUIRE(e0.size() == 4);
  std::vector<float> e_prev(4);
  for (std::size_t j = 0; j < 4; ++j) {
    CHECK((*in0)[0].tensors[0][j] == fp16(w[j]));
    e_prev[j] = w[j] - fp16(w[j]);
    CHECK(e0[j] == e_prev[j]);
  }
  CHECK(e_prev[0] != 0.0F);
  // Step 1: the residual of step 0 is added before rounding: c = fp16(g + e0).
  auto in1 = sync->prepare(g);
  REQUIRE(in1.ok());
  for (std::size_t j = 0; j < 4; ++j) {
    const float x = w[j] + e_prev[j];
    CHECK((*in1)[0].tensors[0][j] == fp16(x));
    CHECK(sync->residual("w:0")[j] == x - fp16(x));
  }
  // Over many steps the sum of what was sent tracks the sum of the gradients within
  // one fp16 rounding (plain fp16 drifts by T roundings).
  std::vector<double> sent(4, 0.0);
  for (std::size_t j = 0; j < 4; ++j) sent[j] = (*in0)[0].tensors[0][j] + (*in1)[0].tensors[0][j];
  const int steps = 200;
  for (int s = 2; s < steps; ++s) {
    auto in = sync->prepare(g);
    REQUIRE(in.ok());
    for (std::size_t j = 0; j < 4; ++j) sent[j] += (*in)[0].tensors[0][j];
  }
  for (std::size_t j = 0; j < 4; ++j) {
    const double drift = std::abs(sent[j] - static_cast<double>(steps) * w[j]);
    CHECK(drift <= std::abs(static_cast<double>(sync->residual("w:0")[j])) + 1e-6);
    CHECK(drift < 1e-3);
  }
  CHECK(std::abs(static_cast<double>(steps) * (w[0] - fp16(w[0]))) > 1e-3);  // what fp16 alone would lose
}

TEST_CASE("a missing or mis-sized gradient is refused and changes no residual", "[collective][unit]") {
  auto sync = cc::Synchronizer::create(two_variable_plan(cc::CompressorKind::horovod_ef));
  REQUIRE(sync.ok());
  auto missing = sync->prepare({{"w:0", {0.1F, 0.2F, 0.3F, 0.4F}}});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("b:0") != std::string::npos);
  auto wrong = sync->prepare({{"w:0", {0.1F}}, {"b:0", {1.0F, 2.0F}}});
  REQUIRE_FALSE(wrong.ok());
  CHECK(sync->residual("w:0").empty());
  CHECK(sync->residual("b:0").empty());
  auto bad_out = sync->assemble({{{1.0F}}});
  REQUIRE_FALSE(bad_out.ok());
}

TEST_CASE("touched_rows keeps every row holding a value other than zero, in order, with its values",
          "[collective][unit]") {
  // The rows a plain loop finds: any value != 0 (NaN too; -0 is zero), the last row short
  // when the values do not fill it.
  const auto expected = [](const std::vector<float>& dense, std::size_t width) {
    core::ps::SparseGradient g;
    for (std::size_t row = 0; row * width < dense.size(); ++row) {
      const std::size_t end = std::min(dense.size(), (row + 1) * width);
      bool any = false;
      for (std::size_t i = row * width; i < end; ++i) any = any || dense[i] != 0.0f;
      if (!any) continue;
      g.rows.push_back(static_cast<std::int64_t>(row));
      g.values.insert(g.values.end(), dense.begin() + static_cast<std::ptrdiff_t>(row * width),
                      dense.begin() + static_cast<std::ptrdiff_t>(end));
    }
    return g;
  };
  std::vector<float> dense(1001, 0.0f);
  for (std::size_t i = 0; i < dense.size(); ++i) {
    if (i % 7 == 0 || i % 11 == 3) dense[i] = static_cast<float>(i) - 500.0f;  // 500 itself is 0
  }
  dense[2] = -0.0f;
  dense[5] = std::nanf("");
  dense[1000] = 1.0f;
  for (std::size_t width : {std::size_t{1}, std::size_t{3}, std::size_t{8}, std::size_t{1001}, std::size_t{2000}}) {
    INFO("row width " << width);
    const auto want = expected(dense, width);
    const auto got = cc::touched_rows(dense, width);
    CHECK(got.rows == want.rows);
    REQUIRE(got.values.size() == want.values.size());
    CHECK(std::memcmp(got.values.data(), want.values.data(), want.values.size() * sizeof(float)) == 0);
    CHECK_FALSE(got.rows.empty());
  }
  const auto one = cc::touched_rows(dense, 1);
  CHECK(std::find(one.rows.begin(), one.rows.end(), 2) == one.rows.end());  // -0
  CHECK(std::find(one.rows.begin(), one.rows.end(), 5) != one.rows.end());  // NaN
  CHECK(std::find(one.rows.begin(), one.rows.end(), 500) == one.rows.end());
  // Nothing touched, and no row width: no rows.
  CHECK(cc::touched_rows(std::vector<float>(64, 0.0f), 1).rows.empty());
  CHECK(cc::touched_rows(std::vector<float>(64, -0.0f), 4).rows.empty());
  CHECK(cc::touched_rows(dense, 0).rows.empty());
  // Few values touched (the blocks without one passed over): the same rows, at a block's
  // first and last value, in the short last block, NaN and -0 among them.
  std::vector<float> few(10000 + 37, 0.0f);
  for (std::size_t i : {std::size_t{0}, std::size_t{63}, std::size_t{64}, std::size_t{640}, std::size_t{4095},
                        std::size_t{9999}, std::size_t{10036}}) {
    few[i] = static_cast<float>(i) + 0.5f;
  }
  few[777] = std::nanf("");
  few[778] = -0.0f;
  for (std::size_t width : {std::size_t{1}, std::size_t{5}}) {
    const auto want = expected(few, width);
    const auto got = cc::touched_rows(few, width);
    CHECK(got.rows == want.rows);
    REQUIRE(got.values.size() == want.values.size());
    CHECK(std::memcmp(got.values.data(), want.values.data(), want.values.size() * sizeof(float)) == 0);
  }
  CHECK(cc::touched_rows(few, 1).rows.size() == 8);
  // Every value touched.
  const auto all = cc::touched_rows(std::vector<float>(10, 2.0f), 1);
  CHECK(all.rows.size() == 10);
  CHECK(all.values == std::vector<float>(10, 2.0f));
}
