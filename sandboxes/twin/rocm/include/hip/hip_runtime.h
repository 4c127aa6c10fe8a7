// HIP runtime API: the declarations the engine's kernels use.
#pragma once
#include <cstddef>
#include <cstdint>
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
typedef struct ihipStream_t* hipStream_t;
typedef int hipError_t;
#define hipSuccess 0
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
inline hipError_t hipGetLastError() { return hipSuccess; }
