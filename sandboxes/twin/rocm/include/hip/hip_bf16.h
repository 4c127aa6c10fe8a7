// HIP bf16 type: __hip_bfloat16 (CUDA's __nv_bfloat16 does not exist here).
#pragma once
#include <cstdint>
struct __hip_bfloat16 { uint16_t data; };
typedef __hip_bfloat16 hip_bfloat16;
