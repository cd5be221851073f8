// Storage types shared by generated kernels and the host: IEEE half and bfloat16.
// Both convert to and from float with round-to-nearest-even, NaN preserved (as c10::Half and
// c10::BFloat16 do), so results match PyTorch eager bit for bit.
// This header is self-contained (no coil includes): it is embedded into libcoil and written
// next to generated kernels by the code cache.
#pragma once

#include <cstdint>
#include <cstring>

namespace coil {

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

struct bfloat16 {
  uint16_t bits;
  bfloat16() = default;
  bfloat16(float f) : bits(from_float(f)) {}  // NOLINT: implicit like c10::BFloat16
  operator float() const { return bits_float(static_cast<uint32_t>(bits) << 16); }
  static uint16_t from_float(float f) {
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
    uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>((u + rounding_bias) >> 16);
  }
};

struct half {
  uint16_t bits;
  half() = default;
  half(float f) : bits(from_float(f)) {}  // NOLINT: implicit like c10::Half
  operator float() const { return to_float(bits); }

  static float to_float(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf/nan
    if (exp == 0) {
      if (mant == 0) return bits_float(sign);
      // Subnormal half: value = mant * 2^-24.
      float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
      return sign ? -v : v;
    }
    return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  }

  static uint16_t from_float(float f) {
    uint32_t u = float_bits(f);
    uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
    if (abs >= 0x477ff000u) return sign | 0x7c00u;  // overflow (>= 65520) -> inf
    if (abs < 0x38800000u) {                        // subnormal or zero in half
      // Round abs * 2^24 to nearest even integer: add 0.5 via float magic.
      float a = bits_float(abs);
      float scaled = a * 16777216.0f;  // exact: power of two scaling
      // nearest-even rounding of a non-negative float below 1024
      float r = scaled + 8388608.0f;  // 2^23 forces rounding to integer (ties to even)
      uint32_t m = float_bits(r) - 0x4b000000u;
      return static_cast<uint16_t>(sign | m);
    }
    uint32_t mant_odd = (abs >> 13) & 1u;
    abs += 0xfffu + mant_odd;  // round to nearest even on the 13 dropped bits
    return static_cast<uint16_t>(sign | ((abs - 0x38000000u) >> 13));
  }
};

}  // namespace coil
