// HIP fp8 types: __hip_fp8_e4m3 (OCP e4m3fn, the gfx950 format) and
// __hip_fp8_e4m3_fnuz (the MI300 format), each a byte `__x` built from a float with round-to-nearest and
// saturation. CUDA's <cuda_fp8.h> and __nv_fp8_e4m3 do not exist here. Like ROCm's amd_hip_fp8.h it brings the
// HIP host defines (__global__, __device__) with it.
#pragma once
#include <hip/hip_runtime.h>
#include <cmath>
#include <cstdint>

namespace twin_hip_detail {
// Encode `value` as sign | exponent (4 bits, `bias`) | mantissa (3 bits), saturating at `largest`.
inline uint8_t encode_e4m3(float value, int bias, float largest) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  float magnitude = std::fmin(std::fabs(value), largest);
  if (magnitude == 0.0f) return sign;
  int exponent = 0;
  const float fraction = std::frexp(magnitude, &exponent);  // magnitude = fraction * 2^exponent, fraction in [0.5, 1)
  int biased = exponent - 1 + bias;
  if (biased < 1) return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::lround(magnitude * std::ldexp(1.0f, 9 - bias))));
  int mantissa = static_cast<int>(std::lround((fraction * 2.0f - 1.0f) * 8.0f));
  if (mantissa == 8) { mantissa = 0; ++biased; }
  return static_cast<uint8_t>(sign | (biased << 3) | mantissa);
}
}  // namespace twin_hip_detail

struct __hip_fp8_e4m3 {
  uint8_t __x;
  __hip_fp8_e4m3() = default;
  explicit __hip_fp8_e4m3(float value) : __x(twin_hip_detail::encode_e4m3(value, 7, 448.0f)) {}
};

struct __hip_fp8_e4m3_fnuz {
  uint8_t __x;
  __hip_fp8_e4m3_fnuz() = default;
  explicit __hip_fp8_e4m3_fnuz(float value) : __x(twin_hip_detail::encode_e4m3(value, 8, 240.0f)) {}
};
