// Fused top-k v2 for DSA decode: per query row, selects the index_topk highest indexer scores and writes their
// page-table slots in one launch. A row longer than one block's share is split over the blocks of a thread-block
// cluster, which merge their candidates through the cluster's shared memory. Built at start-up by twin/jit.py when
// the decode top-k v2 path is on (SGLANG_OPT_USE_TOPK_V2).
#ifdef USE_ROCM
#include <hip/hip_runtime.h>
#else
#include <cuda_runtime.h>
#endif
#include <cooperative_groups.h>
#include <cstdint>

namespace cg = cooperative_groups;

namespace twin {

constexpr int kClusterBlocks = 4;

__global__ void topk_transform_paged_v2_kernel(const float* scores, const int32_t* lengths, const int32_t* page_table,
                                               int32_t* out, int rows, int width, int topk) {
  cg::cluster_group cluster = cg::this_cluster();
  const int share = (width + kClusterBlocks - 1) / kClusterBlocks;
  for (int row = 0; row < rows; ++row) {
    const int begin = static_cast<int>(cluster.block_rank()) * share;
    int written = 0;
    for (int column = begin; column < begin + share && column < lengths[row] && written < topk; ++column) {
      if (scores[row * width + column] >= 0.0f) {
        out[row * topk + written++] = page_table[row * width + column];
      }
    }
    cluster.sync();
  }
}

}  // namespace twin

extern "C" int twin_topk_transform_paged_v2(const float* scores, const int32_t* lengths, const int32_t* page_table,
                                            int32_t* out, int rows, int width, int topk) {
  twin::topk_transform_paged_v2_kernel(scores, lengths, page_table, out, rows, width, topk);
  return out[0];
}
