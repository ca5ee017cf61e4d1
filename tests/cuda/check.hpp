#pragma once
// A tiny self-contained test harness for the cuda/ tests, which must also build on a
// GPU machine that has no Catch2: TEST_CASE-like registration, CHECK macros that count
// and report, and a main() helper printing "N passed, M failed" (exit 1 on failure).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/bits.hpp"

namespace apiary::cuda::testing {

/// Pass/fail counters shared by every check in the process.
struct tally {
  int passed = 0;
  int failed = 0;
};

/// The process-wide counters.
inline tally& counts() {
  static tally t;
  return t;
}

/// Records one check; prints the failure with its location and detail.
inline bool record(bool ok, const char* file, int line, const char* expr,
                   const std::string& detail) {
  if (ok) {
    ++counts().passed;
  } else {
    ++counts().failed;
    std::printf("FAIL %s:%d: %s%s%s\n", file, line, expr, detail.empty() ? "" : " -- ",
                detail.c_str());
    std::fflush(stdout);
  }
  return ok;
}

/// Index of the first element whose bytes differ between a and b (a.size() when the
/// arrays are bitwise equal; b.size() when only the sizes differ).
template <class T>
std::size_t first_bit_mismatch(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return std::min(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return i;
  }
  return a.size();
}

/// The bits of a float as "0x3f800000".
inline std::string hex_bits(float f) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", static_cast<unsigned>(bits_of(f)));
  return text;
}

/// A 16-bit pattern as "0x3c00".
inline std::string hex_bits(std::uint16_t h) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%04x", static_cast<unsigned>(h));
  return text;
}

/// A registered test case.
struct test_case {
  const char* name;
  void (*body)();
};

/// Every test case, in registration order.
inline std::vector<test_case>& registry() {
  static std::vector<test_case> cases;
  return cases;
}

/// Registers a test case at static-initialisation time.
struct registrar {
  registrar(const char* name, void (*body)()) { registry().push_back({name, body}); }
};

/// Runs every registered case (or only those whose name contains argv[1]) and prints
/// "<suite>: N passed, M failed". Returns the process exit code (0 or 1).
inline int run_all(const char* suite, int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  for (const test_case& c : registry()) {
    if (!filter.empty() && std::string(c.name).find(filter) == std::string::npos) continue;
    const int failed_before = counts().failed;
    c.body();
    std::printf("%s %s\n", counts().failed == failed_before ? "ok  " : "FAIL", c.name);
    std::fflush(stdout);
  }
  std::printf("%s: %d passed, %d failed\n", suite, counts().passed, counts().failed);
  return counts().failed == 0 && counts().passed > 0 ? 0 : 1;
}

}  // namespace apiary::cuda::testing

#define APIARY_CONCAT_INNER(a, b) a##b
#define APIARY_CONCAT(a, b) APIARY_CONCAT_INNER(a, b)

/// Defines and registers a test case: TEST_CASE("name") { ... }
#define TEST_CASE(name)                                                                      \
  static void APIARY_CONCAT(apiary_test_body_, __LINE__)();                                  \
  static const ::apiary::cuda::testing::registrar APIARY_CONCAT(apiary_test_reg_, __LINE__){ \
      name, &APIARY_CONCAT(apiary_test_body_, __LINE__)};                                    \
  static void APIARY_CONCAT(apiary_test_body_, __LINE__)()

/// Counts a check of `cond`; on failure prints the expression.
#define CHECK(cond) \
  ::apiary::cuda::testing::record(static_cast<bool>(cond), __FILE__, __LINE__, #cond, "")

/// Counts a check of `cond`; on failure prints the expression and `detail` (a string).
#define CHECK_MSG(cond, detail) \
  ::apiary::cuda::testing::record(static_cast<bool>(cond), __FILE__, __LINE__, #cond, (detail))
