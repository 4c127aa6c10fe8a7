// Per-token-group FP8 quantization of activations for the block-scale GEMM: each group of `group` values of a
// token gets one float32 scale (its largest magnitude over e4m3's largest finite value, 448) and e4m3 codes.
// Built at start-up by twin/jit.py when the checkpoint is block-quantized fp8.
#include <cuda_fp8.h>
#include <cmath>
#include <cstdint>

#ifdef USE_ROCM
using fp8_e4m3 = __hip_fp8_e4m3;
#else
using fp8_e4m3 = __nv_fp8_e4m3;
#endif

namespace twin {

constexpr float kFp8Max = 448.0f;

__global__ void per_token_group_quant_kernel(const float* input, uint8_t* output, float* scales, int tokens,
                                             int hidden, int group) {
  const int groups = hidden / group;
  for (int token = 0; token < tokens; ++token) {
    for (int index = 0; index < groups; ++index) {
      const float* values = input + token * hidden + index * group;
      float largest = 1e-10f;
      for (int k = 0; k < group; ++k) largest = std::fmax(largest, std::fabs(values[k]));
      const float scale = largest / kFp8Max;
      scales[token * groups + index] = scale;
      for (int k = 0; k < group; ++k) {
        const fp8_e4m3 code(values[k] / scale);
        output[token * hidden + index * group + k] = code.__x;
      }
    }
  }
}

}  // namespace twin

extern "C" int twin_per_token_group_quant_fp8(const float* input, uint8_t* output, float* scales, int tokens,
                                              int hidden, int group) {
  twin::per_token_group_quant_kernel(input, output, scales, tokens, hidden, group);
  return static_cast<int>(output[0]);
}
