// Unit tests of the CPU twins (label unit): the IEEE binary16 conversions (known values,
// every half, float sweeps against an independent double-arithmetic reference and
// against the x86 F16C instructions), the clamping cast, weighted accumulate and sum.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/bits.hpp"
#include "cuda/kernels.hpp"
#include "tests/cuda/check.hpp"

using namespace apiary::cuda;
using apiary::cuda::testing::first_bit_mismatch;
using apiary::cuda::testing::hex_bits;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)  // GCC: cpu_supports("f16c")
#include <immintrin.h>
#define APIARY_TEST_F16C 1
#endif

namespace {

// Reference binary32 -> binary16 written independently of the twin: scale by the
// half ulp in double (exact), round with nearbyint (nearest even), re-encode.
std::uint16_t reference_half(float x) {
  const std::uint32_t b = bits_of(x);
  const auto sign = static_cast<std::uint16_t>((b >> 16) & 0x8000u);
  if (std::isnan(x)) return static_cast<std::uint16_t>(sign | 0x7e00u | ((b >> 13) & 0x3ffu));
  const double a = std::fabs(static_cast<double>(x));
  if (a == 0.0) return sign;
  if (a >= 65520.0) return static_cast<std::uint16_t>(sign | 0x7c00u);
  int e = 0;
  (void)std::frexp(a, &e);              // a in [2^(e-1), 2^e)
  int exponent = std::max(e - 1, -14);  // half exponent (subnormals share -14)
  double q = std::nearbyint(a / std::ldexp(1.0, exponent - 10));  // in half ulps
  if (exponent == -14 && q < 1024.0)
    return static_cast<std::uint16_t>(sign | static_cast<unsigned>(q));
  if (q >= 2048.0) {  // rounded up into the next binade
    q /= 2.0;
    exponent += 1;
  }
  return static_cast<std::uint16_t>(sign | ((exponent + 15) << 10) |
                                    (static_cast<unsigned>(q) - 1024u));
}

// The float sweep used by the conversion checks: a coarse pass over all 2^32 patterns,
// a dense pass over the subnormal boundary, every float near 65504, and random bits.
std::vector<std::uint32_t> float_sweep() {
  std::vector<std::uint32_t> out;
  for (std::uint64_t b = 7; b < (1ull << 32); b += 4099)
    out.push_back(static_cast<std::uint32_t>(b));
  for (std::uint32_t b = 0x32800000u; b < 0x39000000u; b += 97) {
    out.push_back(b);
    out.push_back(b | 0x80000000u);
  }
  for (std::uint32_t b = 0x477fd000u; b < 0x47801000u; ++b) out.push_back(b);
  std::mt19937 rng(20240611);
  for (int i = 0; i < 1000000; ++i) out.push_back(static_cast<std::uint32_t>(rng()));
  return out;
}

#ifdef APIARY_TEST_F16C
__attribute__((target("f16c"))) std::uint16_t f16c_half(float x) {
  const __m128i h = _mm_cvtps_ph(_mm_set_ss(x), 0);  // 0: round to nearest even
  return static_cast<std::uint16_t>(_mm_extract_epi16(h, 0));
}
__attribute__((target("f16c"))) float f16c_float(std::uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
bool have_f16c() { return __builtin_cpu_supports("f16c"); }
#endif

std::vector<float> random_floats(std::size_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

const std::size_t kSizes[] = {0, 1, 4097, std::size_t{1} << 20};

}  // namespace

TEST_CASE("f32_to_f16_bits: known values") {
  struct known {
    std::uint32_t in;
    std::uint16_t out;
  };
  const known cases[] = {
      {0x00000000u, 0x0000},
      {0x80000000u, 0x8000},  // +-0
      {bits_of(1.0f), 0x3c00},
      {bits_of(-2.0f), 0xc000},
      {bits_of(0.1f), 0x2e66},
      {bits_of(65504.0f), 0x7bff},
      {bits_of(65519.99f), 0x7bff},
      {bits_of(65520.0f), 0x7c00},  // halfway to 65536: even is inf
      {bits_of(1e10f), 0x7c00},
      {bits_of(-1e10f), 0xfc00},
      {0x7f800000u, 0x7c00},
      {0xff800000u, 0xfc00},            // +-inf
      {bits_of(0x1p-14f), 0x0400},         // smallest normal
      {bits_of(0x1p-24f), 0x0001},         // smallest subnormal
      {bits_of(0x1p-25f), 0x0000},         // tie between 0 and 1 ulp: even
      {bits_of(0x1p-25f) + 1, 0x0001},     // just above the tie
      {bits_of(0x3p-25f), 0x0002},         // 1.5 ulp: even is 2
      {bits_of(0x5p-25f), 0x0002},         // 2.5 ulp: even is 2
      {bits_of(0x3fep-24f), 0x03fe},       // 1022 ulp
      {bits_of(0x3ffp-24f), 0x03ff},       // largest subnormal
      {bits_of(0x7ffp-25f), 0x0400},       // 1023.5 ulp: even is 1024
      {bits_of(1.0f + 0x1p-11f), 0x3c00},  // tie: even mantissa
      {bits_of(1.0f + 0x3p-11f), 0x3c02},  // tie: rounds up to even
      {0x00000001u, 0x0000},
      {0x80000001u, 0x8000},  // float subnormals
      {0x7fc00000u, 0x7e00},
      {0xffc00001u, 0xfe00},  // quiet NaNs
      {0x7f800001u, 0x7e00},  // signalling NaN becomes quiet
      {0x7fa00000u, 0x7f00},  // payload top bits kept
  };
  for (const known& k : cases) {
    const std::uint16_t got = cpu::f32_to_f16_bits(float_of(k.in));
    CHECK_MSG(got == k.out, "in " + hex_bits(float_of(k.in)) + " got " + hex_bits(got) + " want " +
                                hex_bits(k.out));
  }
}

TEST_CASE("f16_bits_to_f32: every half widens exactly and round-trips") {
  int wrong_value = 0, wrong_trip = 0;
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const float f = cpu::f16_bits_to_f32(half);
    const std::uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 31u, mant = h & 0x3ffu;
    std::uint32_t want;
    if (exponent == 31) {
      want = sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u);
    } else {
      const double v =
          exponent == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, int(exponent) - 25);
      want = bits_of(static_cast<float>(sign != 0 ? -v : v));
    }
    if (bits_of(f) != want && ++wrong_value <= 5) {
      CHECK_MSG(false, "half " + hex_bits(half) + " gave " + hex_bits(f) + " want " +
                           hex_bits(float_of(want)));
    }
    const std::uint16_t back = cpu::f32_to_f16_bits(f);
    const std::uint16_t expected =
        (exponent == 31 && mant != 0) ? static_cast<std::uint16_t>(h | 0x200u) : half;
    if (back != expected && ++wrong_trip <= 5) {
      CHECK_MSG(false, "half " + hex_bits(half) + " came back as " + hex_bits(back));
    }
  }
  CHECK(wrong_value == 0);
  CHECK(wrong_trip == 0);
}

TEST_CASE("f32_to_f16_bits: float sweep matches the double-arithmetic reference") {
  int wrong = 0;
  const std::vector<std::uint32_t> sweep = float_sweep();
  for (std::uint32_t b : sweep) {
    const float x = float_of(b);
    const std::uint16_t got = cpu::f32_to_f16_bits(x), want = reference_half(x);
    if (got != want && ++wrong <= 5) {
      CHECK_MSG(false, "in " + hex_bits(x) + " got " + hex_bits(got) + " want " + hex_bits(want));
    }
  }
  CHECK_MSG(wrong == 0, std::to_string(wrong) + " of " + std::to_string(sweep.size()) + " differ");
}

TEST_CASE("half conversions: bit-exact with x86 F16C, NaNs included") {
#ifdef APIARY_TEST_F16C
  if (!have_f16c()) {
    std::printf("note: this CPU has no F16C; comparison skipped\n");
    return;
  }
  int wrong_narrow = 0, wrong_widen = 0;
  for (std::uint32_t b : float_sweep()) {
    const float x = float_of(b);
    const std::uint16_t got = cpu::f32_to_f16_bits(x), want = f16c_half(x);
    if (got != want && ++wrong_narrow <= 5) {
      CHECK_MSG(false, "in " + hex_bits(x) + " got " + hex_bits(got) + " F16C " + hex_bits(want));
    }
  }
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const float got = cpu::f16_bits_to_f32(half), want = f16c_float(half);
    if (bits_of(got) != bits_of(want) && ++wrong_widen <= 5) {
      CHECK_MSG(false,
                "half " + hex_bits(half) + " got " + hex_bits(got) + " F16C " + hex_bits(want));
    }
  }
  CHECK(wrong_narrow == 0);
  CHECK(wrong_widen == 0);
#else
  std::printf("note: not an x86-64 GCC build; F16C comparison skipped\n");
#endif
}

TEST_CASE("cast_f32_to_f16: clamps to +-65504, keeps NaN, converts the rest") {
  const std::vector<float> in = {float_of(0x7f800000u),
                                 float_of(0xff800000u),
                                 1e9f,
                                 -1e9f,
                                 65520.0f,
                                 -65536.0f,
                                 65504.0f,
                                 float_of(0x7fc00000u),
                                 1.0f,
                                 0x1p-24f,
                                 -0.0f};
  const std::vector<std::uint16_t> want = {0x7bff, 0xfbff, 0x7bff, 0xfbff, 0x7bff, 0xfbff,
                                           0x7bff, 0x7e00, 0x3c00, 0x0001, 0x8000};
  std::vector<std::uint16_t> got(in.size());
  cpu::cast_f32_to_f16(got.data(), in.data(), in.size());
  const std::size_t at = first_bit_mismatch(got, want);
  CHECK_MSG(at == got.size(), "element " + std::to_string(at) + " got " +
                                  (at < got.size() ? hex_bits(got[at]) : std::string("?")));
}

TEST_CASE("cast_f32_to_f16 / cast_f16_to_f32: arrays equal the scalar conversions") {
  std::mt19937 rng(7);
  for (std::size_t n : kSizes) {
    std::vector<float> src(n);
    for (float& x : src) x = float_of(static_cast<std::uint32_t>(rng()));  // every class
    std::vector<std::uint16_t> half(n), want_half(n);
    cpu::cast_f32_to_f16(half.data(), src.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      const float c = std::isnan(src[i]) ? src[i] : std::fmin(std::fmax(src[i], -f16_max), f16_max);
      want_half[i] = reference_half(c);
    }
    CHECK_MSG(first_bit_mismatch(half, want_half) == n, "narrowing, n = " + std::to_string(n));
    std::vector<float> wide(n), want_wide(n);
    cpu::cast_f16_to_f32(wide.data(), half.data(), n);
    for (std::size_t i = 0; i < n; ++i) want_wide[i] = cpu::f16_bits_to_f32(half[i]);
    CHECK_MSG(first_bit_mismatch(wide, want_wide) == n, "widening, n = " + std::to_string(n));
  }
}

TEST_CASE("weighted_accumulate: product and sum rounded separately, tail untouched") {
  std::mt19937 rng(11);
  for (std::size_t n : kSizes) {
    std::vector<float> acc = random_floats(n + 3, rng, -1e3f, 1e3f);
    const std::vector<float> x = random_floats(n + 3, rng, -1e3f, 1e3f);
    const float w = 0.37f;
    std::vector<float> want = acc;
    for (std::size_t i = 0; i < n; ++i) {
      volatile float product = w * x[i];  // volatile: forces a rounded float in between
      want[i] = acc[i] + product;
    }
    cpu::weighted_accumulate(acc.data(), x.data(), w, n);
    CHECK_MSG(first_bit_mismatch(acc, want) == acc.size(), "n = " + std::to_string(n));
  }
  // A fused multiply-add would leave 2^-24 here: (1+2^-12)^2 rounds to 1+2^-11.
  float acc = -(1.0f + 0x1p-11f);
  const float x = 1.0f + 0x1p-12f;
  cpu::weighted_accumulate(&acc, &x, x, 1);
  CHECK_MSG(acc == 0.0f, "got " + hex_bits(acc));
}

TEST_CASE("sum: exact on integers, accurate and deterministic on random data") {
  for (std::size_t n : {0, 1, 2, 7, 8, 9, 15, 16, 17, 4097, 1 << 20}) {
    std::vector<float> x(n);
    double exact = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(static_cast<long>(i % 2001) - 1000 + (i % 7 == 0 ? 3 : 0));
      exact += x[i];
    }
    CHECK_MSG(cpu::sum(x.data(), n) == exact, "integers, n = " + std::to_string(n));
  }
  std::mt19937 rng(13);
  const std::vector<float> x = random_floats(std::size_t{1} << 20, rng, -1.0f, 1.0f);
  long double reference = 0.0L, magnitude = 0.0L;
  for (float v : x) {
    reference += v;
    magnitude += std::fabs(v);
  }
  const double got = cpu::sum(x.data(), x.size());
  CHECK_MSG(std::fabs(static_cast<long double>(got) - reference) <= 1e-12L * magnitude,
            "sum " + std::to_string(got) + " vs " + std::to_string(static_cast<double>(reference)));
  CHECK(cpu::sum(x.data(), x.size()) == got);
}

int main(int argc, char** argv) {
  return apiary::cuda::testing::run_all("cuda_cpu_kernels_test", argc, argv);
}
