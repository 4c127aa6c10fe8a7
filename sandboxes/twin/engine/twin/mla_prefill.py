"""The MLA prefill attention kernel, after aiter's fmha v3 forward: MLA prefills as ordinary multi-head attention
over the up-projected keys and values, so the kernel is chosen by head size (query/key head = nope + rope, value
head = v_head_dim).

aiter's fmha v3 forward ships kernels for a few (query/key, value) head sizes per GPU architecture. A query/key head
smaller than a shipped size is zero-padded up to it (padding both queries and keys with zeros leaves every dot
product unchanged); a head size with no kernel at or above it runs aiter's generic ck_tile forward, with a warning.
Zero-padding a head dimension out to a size a kernel has is what vLLM does for MLA's value head before flash
attention (vllm 0.25.1 v1/attention/backends/mla/prefill/flash_attn.py). Does not cover decode (attention.py).
"""

from twin import attention, logs

# (query/key head, value head) sizes of aiter's fmha v3 forward kernels, per GPU architecture
FMHA_V3_HEADS = {
    "gfx950": ((128, 128), (192, 128), (256, 256)),
    "gfx942": ((128, 128), (192, 128)),
}


def select(qk_head_dim: int, v_head_dim: int) -> str:
    """The prefill kernel for this head shape on this GPU, logged as aiter logs its choice."""
    arch = attention.gpu_arch()
    sizes = sorted(qk for qk, v in FMHA_V3_HEADS.get(arch, ()) if v == v_head_dim and qk >= qk_head_dim)
    if not sizes:
        logs.aiter(
            f"fmha_v3_fwd: no kernel for hdim_q={qk_head_dim}, hdim_v={v_head_dim} on {arch}; "
            "falling back to the default ck_tile fmha_fwd (slow path)"
        )
        return "ck_tile_fmha_fwd"
    padded = sizes[0]
    kernel = f"fmha_v3_fwd_hd{padded}_{v_head_dim}"
    note = f" (query/key head {qk_head_dim} zero-padded to {padded})" if padded != qk_head_dim else ""
    logs.aiter(f"[mha] using {kernel} for MLA prefill on {arch}{note}")
    return kernel
