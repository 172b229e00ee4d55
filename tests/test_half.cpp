// The host fp16/bf16 conversions of src/core/half.hpp (used by the CPU
// backend and by every test that fills or reads 16-bit tensors), checked
// against known bit patterns and, exhaustively, against a brute-force
// nearest-value reference written here.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/half.hpp"

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
uint16_t half_bits(float f) { return xvk::to_half(f).bits; }
uint16_t bf16_bits(float f) { return xvk::to_bfloat16(f).bits; }
float half_value(uint16_t b) { return xvk::to_float(xvk::half_t{b}); }
float bf16_value(uint16_t b) { return xvk::to_float(xvk::bfloat16_t{b}); }
bool half_is_nan(uint16_t b) { return (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

// The value of a finite fp16 bit pattern, computed from the definition.
double half_definition(uint16_t b) {
  const int sign = (b >> 15) ? -1 : 1;
  const int exponent = (b >> 10) & 0x1f;
  const int mantissa = b & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(double(mantissa), -24);
  return sign * std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
}

// Round-to-nearest-even to fp16 by brute force over the sorted positive
// finite fp16 values (the exact value of a float is a double).
uint16_t half_reference(float f) {
  static const std::vector<double> values = [] {
    std::vector<double> v;
    for (uint32_t b = 0; b < 0x7c00u; ++b) v.push_back(half_definition(uint16_t(b)));
    v.push_back(65536.0);  // where 0x7c00 would be if the exponent went on: the neighbour that overflows
    return v;
  }();
  const uint16_t sign = std::signbit(f) ? 0x8000u : 0;
  const double a = std::fabs(double(f));
  // Beyond the largest finite value plus half an ulp (65504 + 16): infinity.
  if (a >= 65520.0) return sign | 0x7c00u;
  const auto it = std::lower_bound(values.begin(), values.end(), a);
  const size_t hi = size_t(it - values.begin());
  if (values[hi] == a) return uint16_t(sign | hi);  // (65536 itself was handled above)
  const size_t lo = hi - 1;
  const double dlo = a - values[lo], dhi = values[hi] - a;
  if (dlo < dhi) return uint16_t(sign | lo);
  if (dhi < dlo) return uint16_t(sign | hi);
  return uint16_t(sign | ((lo & 1) ? hi : lo));  // tie: the even bit pattern
}

// Round-to-nearest-even to bfloat16: the two candidates are the float
// truncated to its top 16 bits and the next bfloat16 up in magnitude.
uint16_t bf16_reference(float f) {
  const uint32_t u = to_bits(f);
  const uint32_t down = u & 0xffff0000u, up = down + 0x10000u;
  const double a = std::fabs(double(f)), da = std::fabs(double(from_bits(down)));
  if (a == da) return uint16_t(down >> 16);
  // `up` may be infinity (0x7f80): rounding to it is an overflow to inf.
  const double ua = (up & 0x7fffffffu) == 0x7f800000u ? std::ldexp(1.0, 128) : std::fabs(double(from_bits(up)));
  const double dlo = a - da, dhi = ua - a;
  if (dlo < dhi) return uint16_t(down >> 16);
  if (dhi < dlo) return uint16_t(up >> 16);
  return uint16_t(((down >> 16) & 1) ? up >> 16 : down >> 16);
}

}  // namespace

TEST_CASE("known fp16 bit patterns from float") {
  CHECK(half_bits(0.0f) == 0x0000);
  CHECK(half_bits(-0.0f) == 0x8000);
  CHECK(half_bits(1.0f) == 0x3c00);
  CHECK(half_bits(-2.0f) == 0xc000);
  CHECK(half_bits(0.5f) == 0x3800);
  CHECK(half_bits(65504.0f) == 0x7bff);  // largest finite
  CHECK(half_bits(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  SUBCASE("subnormals") {
    CHECK(half_bits(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
    CHECK(half_bits(-std::ldexp(1.0f, -24)) == 0x8001);
    CHECK(half_bits(std::ldexp(1023.0f, -24)) == 0x03ff);  // largest subnormal
    CHECK(half_bits(std::ldexp(1.0f, -25)) == 0x0000);  // tie between 0 and 2^-24: even (0)
    CHECK(half_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(half_bits(std::ldexp(3.0f, -25)) == 0x0002);  // tie between 1 and 2: even (2)
    CHECK(half_bits(std::ldexp(5.0f, -25)) == 0x0002);  // tie between 2 and 3: even (2)
    CHECK(half_bits(std::ldexp(1.0f, -30)) == 0x0000);  // far below: zero
    CHECK(half_bits(-std::ldexp(1.0f, -30)) == 0x8000);  // keeps its sign
    CHECK(half_bits(from_bits(0x00000001u)) == 0x0000);  // float subnormal
    // Halfway between the largest subnormal and the smallest normal: rounds
    // up into the normal range (0x0400 is even).
    CHECK(half_bits(std::ldexp(2047.0f, -25)) == 0x0400);
  }
  SUBCASE("rounding ties to even") {
    CHECK(half_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);         // halfway 1 / 1+2^-10: even (1)
    CHECK(half_bits(1.0f + std::ldexp(3.0f, -11)) == 0x3c02);         // halfway 0x3c01 / 0x3c02: even
    CHECK(half_bits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);  // above half: up
    CHECK(half_bits(1.0f + std::ldexp(1.0f, -11) - std::ldexp(1.0f, -20)) == 0x3c00);  // below half: down
    CHECK(half_bits(2.0f - std::ldexp(1.0f, -11)) == 0x4000);  // tie that carries into the exponent
    CHECK(half_bits(2049.0f) == 0x6800);                       // 2048 (even) not 2050
    CHECK(half_bits(2051.0f) == 0x6802);                       // 2052 (even) not 2050
  }
  SUBCASE("overflow to infinity") {
    CHECK(half_bits(65519.0f) == 0x7bff);  // below 65504 + half an ulp: stays finite
    CHECK(half_bits(65520.0f) == 0x7c00);  // the tie rounds to even: infinity
    CHECK(half_bits(1e6f) == 0x7c00);
    CHECK(half_bits(-1e6f) == 0xfc00);
    CHECK(half_bits(std::numeric_limits<float>::max()) == 0x7c00);
    CHECK(half_bits(std::numeric_limits<float>::infinity()) == 0x7c00);
    CHECK(half_bits(-std::numeric_limits<float>::infinity()) == 0xfc00);
  }
  SUBCASE("NaN stays NaN") {
    CHECK(half_is_nan(half_bits(std::numeric_limits<float>::quiet_NaN())));
    CHECK(half_is_nan(half_bits(from_bits(0x7f800001u))));  // payload only in bits lost by the conversion
    CHECK(half_is_nan(half_bits(from_bits(0x7fffffffu))));
    CHECK(half_is_nan(half_bits(from_bits(0xff800001u))));
    CHECK((half_bits(from_bits(0xffc00000u)) & 0x8000u) != 0);  // sign kept
  }
}

TEST_CASE("known fp16 bit patterns to float") {
  CHECK(half_value(0x0000) == 0.0f);
  CHECK(std::signbit(half_value(0x8000)));
  CHECK(half_value(0x3c00) == 1.0f);
  CHECK(half_value(0x3555) == 0.333251953125f);
  CHECK(half_value(0x7bff) == 65504.0f);
  CHECK(half_value(0x0001) == std::ldexp(1.0f, -24));
  CHECK(half_value(0x8001) == -std::ldexp(1.0f, -24));
  CHECK(half_value(0x0200) == std::ldexp(1.0f, -15));
  CHECK(half_value(0x03ff) == std::ldexp(1023.0f, -24));
  CHECK(half_value(0x0400) == std::ldexp(1.0f, -14));
  CHECK(half_value(0x7c00) == std::numeric_limits<float>::infinity());
  CHECK(half_value(0xfc00) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(half_value(0x7e00)));
  CHECK(std::isnan(half_value(0x7c01)));  // signaling NaN pattern: still NaN
  CHECK(std::isnan(half_value(0xfe00)));
}

TEST_CASE("every fp16 value converts exactly and round-trips") {
  int checked = 0;
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const uint16_t bits = uint16_t(b);
    const float f = half_value(bits);
    if (half_is_nan(bits)) {
      REQUIRE(std::isnan(f));
      REQUIRE(half_is_nan(half_bits(f)));
      continue;
    }
    if ((bits & 0x7c00u) != 0x7c00u) REQUIRE(double(f) == half_definition(bits));
    REQUIRE(half_bits(f) == bits);
    ++checked;
  }
  CHECK(checked == 65536 - 2046);  // 2 * 1023 NaN patterns
}

TEST_CASE("float to fp16 rounds to nearest even (against a brute-force reference)") {
  std::vector<float> inputs;
  // Every midpoint and its neighbours between consecutive positive fp16 values.
  for (uint32_t b = 0; b < 0x7bffu; ++b) {
    const double mid = (half_definition(uint16_t(b)) + half_definition(uint16_t(b + 1))) / 2;
    const float m = float(mid);  // exact: a midpoint needs at most 12 significant bits
    REQUIRE(double(m) == mid);
    inputs.push_back(m);
    inputs.push_back(std::nextafter(m, 0.0f));
    inputs.push_back(std::nextafter(m, 1e9f));
  }
  // Random floats over the whole fp16 range and beyond.
  std::mt19937 rng(12345);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t exponent = 100 + rng() % 45;  // 2^-27 .. 2^17
    inputs.push_back(from_bits((exponent << 23) | (rng() & 0x7fffffu)));
  }
  int bad = 0;
  for (float f : inputs)
    for (float v : {f, -f}) {
      if (half_bits(v) != half_reference(v) && ++bad <= 5)
        FAIL_CHECK("to_half(" << v << ") = " << half_bits(v) << ", expected " << half_reference(v));
    }
  CHECK(bad == 0);
  CHECK(inputs.size() == 3 * 0x7bff + 200000);
}

TEST_CASE("known bfloat16 bit patterns") {
  CHECK(bf16_bits(0.0f) == 0x0000);
  CHECK(bf16_bits(-0.0f) == 0x8000);
  CHECK(bf16_bits(1.0f) == 0x3f80);
  CHECK(bf16_bits(-2.0f) == 0xc000);
  SUBCASE("rounding ties to even") {
    CHECK(bf16_bits(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);  // halfway 0x3f80 / 0x3f81: even
    CHECK(bf16_bits(1.0f + std::ldexp(3.0f, -8)) == 0x3f82);  // halfway 0x3f81 / 0x3f82: even
    CHECK(bf16_bits(from_bits(0x3f808001u)) == 0x3f81);        // just above half: up
    CHECK(bf16_bits(from_bits(0x3f807fffu)) == 0x3f80);        // just below half: down
    CHECK(bf16_bits(from_bits(0x3fff8000u)) == 0x4000);        // tie that carries into the exponent
  }
  SUBCASE("subnormals") {
    CHECK(bf16_bits(from_bits(0x00010000u)) == 0x0001);
    CHECK(bf16_bits(from_bits(0x00008000u)) == 0x0000);  // tie: even (0)
    CHECK(bf16_bits(from_bits(0x00018000u)) == 0x0002);  // tie: even (2)
    CHECK(bf16_bits(from_bits(0x00000001u)) == 0x0000);
    CHECK(bf16_value(0x0001) == from_bits(0x00010000u));
  }
  SUBCASE("overflow to infinity") {
    CHECK(bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up past the largest bf16
    CHECK(bf16_bits(from_bits(0x7f7f7fffu)) == 0x7f7f);             // below half an ulp: stays finite
    CHECK(bf16_bits(-std::numeric_limits<float>::max()) == 0xff80);
    CHECK(bf16_bits(std::numeric_limits<float>::infinity()) == 0x7f80);
    CHECK(bf16_value(0x7f80) == std::numeric_limits<float>::infinity());
  }
  SUBCASE("NaN stays NaN") {
    CHECK(bf16_is_nan(bf16_bits(std::numeric_limits<float>::quiet_NaN())));
    CHECK(bf16_is_nan(bf16_bits(from_bits(0x7f800001u))));  // would truncate to inf without care
    CHECK(bf16_is_nan(bf16_bits(from_bits(0x7fffffffu))));  // would carry into the sign without care
    CHECK(bf16_is_nan(bf16_bits(from_bits(0xff800001u))));
    CHECK((bf16_bits(from_bits(0xffc00000u)) & 0x8000u) != 0);
    CHECK(std::isnan(bf16_value(0x7fc0)));
    CHECK(std::isnan(bf16_value(0x7f81)));
  }
}

TEST_CASE("float to bfloat16 rounds to nearest even (against a reference)") {
  // Every bfloat16 value round-trips.
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const uint16_t bits = uint16_t(b);
    if (bf16_is_nan(bits)) {
      REQUIRE(bf16_is_nan(bf16_bits(bf16_value(bits))));
      continue;
    }
    REQUIRE(to_bits(bf16_value(bits)) == uint32_t(bits) << 16);
    REQUIRE(bf16_bits(bf16_value(bits)) == bits);
  }
  // Random finite floats, and exact midpoints.
  std::mt19937 rng(54321);
  int bad = 0;
  for (int i = 0; i < 300000; ++i) {
    uint32_t u = rng();
    if (i % 3 == 0) u = (u & 0xffff0000u) | 0x8000u;  // an exact tie
    if ((u & 0x7f800000u) == 0x7f800000u) continue;  // inf/NaN: checked above
    const float f = from_bits(u);
    if (bf16_bits(f) != bf16_reference(f) && ++bad <= 5)
      FAIL_CHECK("to_bfloat16(" << f << ") = " << bf16_bits(f) << ", expected " << bf16_reference(f));
  }
  CHECK(bad == 0);
}
