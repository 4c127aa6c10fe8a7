// Fused multi-step metadata for EAGLE/MTP draft trees: computes, in one launch, the per-step sequence
// lengths and KV positions that the draft runner would otherwise build with one kernel per draft step.
// Built at start-up by twin/jit.py when the draft depth is 4 or more (shallower trees use the unfused path).
#include <cuda_runtime.h>
#include <cstdint>

namespace twin {

__global__ void fused_multistep_metadata_kernel(const int32_t* seq_lens, int32_t* out_positions,
                                                int32_t* out_seq_lens, int batch, int steps, int topk) {
  for (int request = 0; request < batch; ++request) {
    for (int step = 0; step < steps; ++step) {
      const int slot = (request * steps + step) * topk;
      for (int branch = 0; branch < topk; ++branch) {
        out_positions[slot + branch] = seq_lens[request] + step;
        out_seq_lens[slot + branch] = seq_lens[request] + step + 1;
      }
    }
  }
}

}  // namespace twin

extern "C" int twin_fused_multistep_metadata(const int32_t* seq_lens, int32_t* out_positions, int32_t* out_seq_lens,
                                             int batch, int steps, int topk) {
  twin::fused_multistep_metadata_kernel(seq_lens, out_positions, out_seq_lens, batch, steps, topk);
  return out_seq_lens[batch * steps * topk - 1];
}
