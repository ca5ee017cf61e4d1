// core/ps/values_text: a job's final values are printed whole while small, and as a
// count, a digest of their bits and the first values when large.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/ps/values_text.hpp"

using namespace apiary::core::ps;

TEST_CASE("small values are printed whole, each reading back as the same float", "[values_text]") {
  const std::vector<float> v = {0.1F, -3.0F, 1e-30F, 16777217.0F, 0.0F};
  const std::string text = values_text(v);
  std::istringstream in(text);
  for (float expected : v) {
    std::string word;
    in >> word;
    CHECK(std::strtof(word.c_str(), nullptr) == expected);
  }
  std::string rest;
  CHECK_FALSE(in >> rest);
  CHECK(values_text({}).empty());
  CHECK(values_text(std::vector<float>(k_values_printed_whole, 1.0F)).find('[') == std::string::npos);
}

TEST_CASE("large values are printed as their count, digest and first values", "[values_text]") {
  std::vector<float> v(k_values_printed_whole + 1);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5F;
  const std::string text = values_text(v);
  CHECK(text.rfind(" [4097 values, fnv1a64 0x", 0) == 0);
  CHECK(text.find("] 0 0.5 1 1.5 2 2.5 3 3.5 ...") != std::string::npos);
  CHECK(text.size() < 100);
  // One bit anywhere changes the digest; the same bits give the same one.
  auto w = v;
  CHECK(values_digest(w) == values_digest(v));
  w.back() = std::nextafter(w.back(), 1e9F);
  CHECK(values_digest(w) != values_digest(v));
  CHECK(values_text(w) != text);
  // Order counts.
  auto r = v;
  std::swap(r[0], r[1]);
  CHECK(values_digest(r) != values_digest(v));
  // The empty digest is FNV-1a's offset basis.
  CHECK(values_digest({}) == 0xcbf29ce484222325ULL);
}
