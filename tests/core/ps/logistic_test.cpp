// The logistic-regression workload's data sets: a sparse one (density below 1) holds the
// same loss and gradient as its dense copy, bit for bit, and reads only its nonzeros.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/ps/logistic_regression.hpp"

using namespace apiary::core::ps;

namespace {

/// `sparse` written out dense, row-major.
LogisticData densified(const LogisticData& sparse) {
  LogisticData d;
  d.features = sparse.features;
  d.y = sparse.y;
  d.x.assign(sparse.samples() * sparse.features, 0.0F);
  for (std::size_t i = 0; i < sparse.samples(); ++i) {
    for (std::size_t p = sparse.row_start[i]; p < sparse.row_start[i + 1]; ++p) {
      d.x[i * sparse.features + sparse.columns[p]] = sparse.values[p];
    }
  }
  return d;
}

std::map<std::string, std::vector<float>> some_params(std::size_t features) {
  auto params = logistic_initial(features);
  auto& w = params.at(k_logreg_weights);
  for (std::size_t j = 0; j < features; ++j) w[j] = std::sin(0.37F * static_cast<float>(j)) * 0.8F;
  params.at(k_logreg_bias) = {-0.125F};
  return params;
}

}  // namespace

TEST_CASE("a sparse data set: round(density x features) distinct ascending columns a sample, labels of both kinds",
          "[logistic]") {
  const auto data = make_logistic_data(200, 1000, 5, 0.01);
  REQUIRE(data.sparse());
  CHECK(data.x.empty());
  REQUIRE(data.row_start.size() == 201);
  std::set<std::uint32_t> seen;
  for (std::size_t i = 0; i < data.samples(); ++i) {
    REQUIRE(data.row_start[i + 1] - data.row_start[i] == 10);
    for (std::size_t p = data.row_start[i]; p + 1 < data.row_start[i + 1]; ++p) {
      CHECK(data.columns[p] < data.columns[p + 1]);
    }
    for (std::size_t p = data.row_start[i]; p < data.row_start[i + 1]; ++p) {
      CHECK(data.columns[p] < 1000);
      CHECK(data.values[p] >= -1.0F);
      CHECK(data.values[p] < 1.0F);
      seen.insert(data.columns[p]);
    }
  }
  CHECK(seen.size() > 800);  // 2,000 draws over 1,000 columns reach about 86% of them
  const auto ones = std::count(data.y.begin(), data.y.end(), 1.0F);
  CHECK(ones > 40);
  CHECK(ones < 160);
  // The same seed, the same data; another seed, other columns.
  const auto again = make_logistic_data(200, 1000, 5, 0.01);
  CHECK(again.columns == data.columns);
  CHECK(again.values == data.values);
  CHECK(again.y == data.y);
  CHECK(make_logistic_data(200, 1000, 6, 0.01).columns != data.columns);
  // Every column once at the most a sample can have short of dense, one at the least.
  const auto nearly = make_logistic_data(3, 64, 1, 63.0 / 64.0);
  CHECK(nearly.row_start[1] == 63);
  CHECK(logistic_nonzeros(1000, 1e-9) == 1);
  CHECK(logistic_nonzeros(1000, 0.0004) == 1);
  CHECK(logistic_nonzeros(1000, 0.25) == 250);
  // Density 1 is the dense data set as ever.
  CHECK_FALSE(make_logistic_data(4, 8, 1, 1.0).sparse());
  CHECK(make_logistic_data(4, 8, 1, 1.0).x == make_logistic_data(4, 8, 1).x);
}

TEST_CASE("a sparse data set's loss and gradient equal its dense copy's bit for bit, zero off the batch's columns",
          "[logistic]") {
  const auto sparse = make_logistic_data(64, 5000, 9, 0.003);
  const auto dense = densified(sparse);
  const auto params = some_params(5000);
  for (std::int64_t step : {0, 1, 7}) {
    const auto batch = logistic_batch(sparse, 2, 1, step, 8);
    std::map<std::string, std::vector<float>> gs, gd;
    const double ls = logistic_loss(sparse, batch, params, &gs);
    const double ld = logistic_loss(dense, batch, params, &gd);
    CHECK(ls == ld);
    CHECK(gs.at(k_logreg_bias) == gd.at(k_logreg_bias));
    REQUIRE(gs.at(k_logreg_weights).size() == 5000);
    CHECK(gs.at(k_logreg_weights) == gd.at(k_logreg_weights));
    std::set<std::uint32_t> columns;
    for (std::size_t i : batch) {
      columns.insert(sparse.columns.begin() + static_cast<std::ptrdiff_t>(sparse.row_start[i]),
                     sparse.columns.begin() + static_cast<std::ptrdiff_t>(sparse.row_start[i + 1]));
    }
    std::size_t nonzero = 0;
    for (std::size_t j = 0; j < 5000; ++j) {
      if (gs.at(k_logreg_weights)[j] != 0.0F) {
        ++nonzero;
        CHECK(columns.count(static_cast<std::uint32_t>(j)) == 1);
      }
    }
    CHECK(nonzero == columns.size());
  }
  // A gradient's storage reused from a denser call is cleared off the new batch's columns.
  std::map<std::string, std::vector<float>> reused;
  (void)logistic_loss(dense, logistic_batch(dense, 1, 0, 0, 32), params, &reused);
  (void)logistic_loss(sparse, logistic_batch(sparse, 1, 0, 5, 2), params, &reused);
  std::map<std::string, std::vector<float>> fresh;
  (void)logistic_loss(sparse, logistic_batch(sparse, 1, 0, 5, 2), params, &fresh);
  CHECK(reused.at(k_logreg_weights) == fresh.at(k_logreg_weights));
  CHECK(logistic_full_loss(sparse, params) == logistic_full_loss(dense, params));
}

TEST_CASE("a data set's size and density are checked, a sparse nonzero counting twice", "[logistic]") {
  CHECK(check_logistic_data_size(1024, 1000000, 0.001));
  CHECK(check_logistic_data_size(1 << 20, 1 << 10));
  CHECK_FALSE(check_logistic_data_size(1 << 20, 1 << 11));
  CHECK(check_logistic_data_size(1 << 19, 1 << 11, 0.5));   // 2^19 x 1024 nonzeros x 2 = 2^30
  CHECK_FALSE(check_logistic_data_size(1 << 20, 1 << 11, 0.5));
  for (double bad : {0.0, -0.5, 1.5, std::nan("")}) {
    const auto st = check_logistic_data_size(16, 16, bad);
    REQUIRE_FALSE(st);
    CHECK(st.error().code == apiary::errc::invalid_argument);
    CHECK_THAT(st.error().message, Catch::Contains("density"));
  }
}
