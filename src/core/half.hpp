// Host-side float16 and bfloat16 storage types with round-to-nearest-even
// conversion. Used by the CPU backend and the tests; the GPU kernels use the
// vendor types through src/cuda/portability.cuh instead.
#pragma once

#include <cstdint>
#include <cstring>

namespace xvk {

struct half_t {
  uint16_t bits;
};
struct bfloat16_t {
  uint16_t bits;
};

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float to_float(float v) { return v; }

inline float to_float(half_t h) {
  const uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return bits_float(sign);
  // Subnormal half: exactly representable as a normal float.
  int e = -1;
  do {
    ++e;
    mantissa <<= 1;
  } while ((mantissa & 0x400u) == 0);
  return bits_float(sign | uint32_t(112 - e) << 23 | (mantissa & 0x3ffu) << 13);
}

inline float to_float(bfloat16_t b) { return bits_float(uint32_t(b.bits) << 16); }

inline half_t to_half(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return {uint16_t(sign | 0x7e00u | ((abs >> 13) & 0x3ffu))};  // NaN stays NaN
  if (abs >= 0x477ff000u) return {uint16_t(sign | 0x7c00u)};  // rounds to or beyond inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): shift the full mantissa into place and round.
    if (abs < 0x33000000u) return {uint16_t(sign)};  // below half the smallest subnormal
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // value = mantissa * 2^(exponent - 150); in [14, 24]
    uint32_t result = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (result & 1u))) ++result;
    return {uint16_t(sign | result)};
  }
  uint32_t result = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) ++result;  // may carry into exponent: fine
  return {uint16_t(sign | result)};
}

inline bfloat16_t to_bfloat16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {uint16_t((u >> 16) | 0x40u)};  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return {uint16_t((u + rounding) >> 16)};
}

// Storage conversion used by templated code: from_float<T>(v).
template <class T> T from_float(float v);
template <> inline float from_float<float>(float v) { return v; }
template <> inline half_t from_float<half_t>(float v) { return to_half(v); }
template <> inline bfloat16_t from_float<bfloat16_t>(float v) { return to_bfloat16(v); }

}  // namespace xvk
