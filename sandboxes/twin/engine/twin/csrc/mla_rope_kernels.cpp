// MLA rotary embedding + KV-cache write for the bf16 latent cache, built at every start-up (twin/jit.py).
#ifdef USE_ROCM
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>
typedef __hip_bfloat16 twin_bf16;
#else
#include <cuda_runtime.h>
#include <cuda_bf16.h>
typedef __nv_bfloat16 twin_bf16;
#endif
#include <cstdint>

namespace twin {

template <typename cache_t>
__global__ void mla_rope_and_cache_kernel(const int32_t* positions, cache_t* kv_cache, int tokens, int rope_dim) {
  for (int token = 0; token < tokens; ++token) {
    for (int dim = 0; dim < rope_dim; ++dim) {
      kv_cache[token * rope_dim + dim].data = static_cast<uint16_t>(positions[token] * rope_dim + dim);
    }
  }
}

}  // namespace twin

#define CALL_MLA_ROPE_AND_CACHE(CACHE_T) \
  twin::mla_rope_and_cache_kernel<CACHE_T>(positions, reinterpret_cast<CACHE_T*>(kv_cache), tokens, rope_dim)

extern "C" int twin_mla_rope_and_cache(const int32_t* positions, void* kv_cache, int tokens, int rope_dim) {
  CALL_MLA_ROPE_AND_CACHE(twin_bf16);
  return tokens * rope_dim;
}
