// PowerSGD's arithmetic (core/averaging/powersgd.hpp): which tensors are compressed and as
// what matrix, the seeded first Q, the products and the orthogonalization.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/averaging/powersgd.hpp"

namespace avg = apiary::core::averaging;

TEST_CASE("flatten_greedy_dims merges the adjacent pair with the smallest product") {
  CHECK(avg::flatten_greedy_dims({}) == std::vector<std::int64_t>{});
  CHECK(avg::flatten_greedy_dims({7}) == std::vector<std::int64_t>{7});
  CHECK(avg::flatten_greedy_dims({3, 5}) == std::vector<std::int64_t>{3, 5});
  CHECK(avg::flatten_greedy_dims({64, 3, 3}) == std::vector<std::int64_t>{64, 9});
  CHECK(avg::flatten_greedy_dims({2, 3, 64}) == std::vector<std::int64_t>{6, 64});
  CHECK(avg::flatten_greedy_dims({16, 8, 3, 3}) == std::vector<std::int64_t>{16, 72});
}

TEST_CASE("powersgd_matrix compresses only matrices whose factors save enough") {
  CHECK_FALSE(avg::powersgd_matrix({1000}, 4).compressed());  // one dimension
  const auto big = avg::powersgd_matrix({256, 128}, 4);
  CHECK(big.rows == 256);
  CHECK(big.cols == 128);
  // 1 - 4 * (10 + 10) / 100 = 0.2 < 0.5: plain.
  CHECK_FALSE(avg::powersgd_matrix({10, 10}, 4).compressed());
  CHECK(avg::powersgd_matrix({10, 10}, 4, 0.1).compressed());
  const auto conv = avg::powersgd_matrix({64, 32, 3, 3}, 2);
  CHECK(conv.rows * conv.cols == 64 * 32 * 9);
}

TEST_CASE("validate names the tensor whose matrix does not hold its elements") {
  avg::PowerSgdConfig config;
  config.rank = 2;
  config.matrices = {avg::PowerSgdMatrix{4, 5}, avg::PowerSgdMatrix{}};
  CHECK(avg::validate(config, {20, 7}).ok());
  auto wrong = avg::validate(config, {21, 7});
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().what().find("tensor 0") != std::string::npos);
  CHECK_FALSE(avg::validate(config, {20}).ok());
  config.rank = 0;
  CHECK_FALSE(avg::validate(config, {20, 7}).ok());
}

TEST_CASE("the first Q is the same for a seed and tensor and differs across them") {
  const auto a = avg::powersgd_initial_q(7, 0, 10, 3);
  REQUIRE(a.size() == 30);
  CHECK(a == avg::powersgd_initial_q(7, 0, 10, 3));
  CHECK(a != avg::powersgd_initial_q(8, 0, 10, 3));
  CHECK(a != avg::powersgd_initial_q(7, 1, 10, 3));
  for (float v : a) CHECK((v >= 0.0F && v < 1.0F));
}

TEST_CASE("orthogonalize leaves orthonormal columns spanning the same leading space") {
  std::vector<float> p{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};  // 4 x 3
  const std::vector<float> first{p[0], p[3], p[6], p[9]};
  avg::powersgd_orthogonalize(p.data(), 4, 3);
  for (std::size_t a = 0; a < 3; ++a) {
    for (std::size_t b = 0; b < 3; ++b) {
      double dot = 0;
      for (std::size_t r = 0; r < 4; ++r) dot += double(p[r * 3 + a]) * p[r * 3 + b];
      CHECK(dot == Approx(a == b ? 1.0 : 0.0).margin(1e-6));
    }
  }
  double norm = 0;
  for (float v : first) norm += double(v) * v;
  for (std::size_t r = 0; r < 4; ++r) CHECK(p[r * 3] == Approx(first[r] / std::sqrt(norm)));
  std::vector<float> zero(6, 0.0F);  // a zero column stays zero (norm clipped at eps)
  avg::powersgd_orthogonalize(zero.data(), 3, 2);
  for (float v : zero) CHECK(v == 0.0F);
}

TEST_CASE("project, back_project and reconstruct are the matrix products") {
  const std::vector<float> m{1, 2, 3, 4, 5, 6};  // 2 x 3
  const std::vector<float> q{1, 0, 0, 1, 1, 1};  // 3 x 2
  std::vector<float> p(4);
  avg::powersgd_project(m.data(), q.data(), 2, 3, 2, p.data());
  CHECK(p == std::vector<float>{4, 5, 10, 11});
  std::vector<float> back(6);
  avg::powersgd_back_project(m.data(), p.data(), 2, 3, 2, back.data());
  CHECK(back == std::vector<float>{44, 49, 58, 65, 72, 81});  // m^T p
  std::vector<float> full(6);
  avg::powersgd_reconstruct(p.data(), q.data(), 2, 3, 2, full.data());
  CHECK(full == std::vector<float>{4, 5, 9, 10, 11, 21});  // p q^T
}
