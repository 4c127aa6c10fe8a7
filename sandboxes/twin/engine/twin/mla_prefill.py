"""MLA prefill attention on aiter's fmha v3 forward kernels."""

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
