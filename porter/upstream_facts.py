"""Facts about the real stack that no package porter can install carries: read once in upstream's source, pinned here.

Covers where each engine image keeps the code an agent patches, and how aiter looks up a tuned fused-MoE config.
Each fact names the upstream file and the commit it was read from; tests/conformance checks porter's use of them
(and, where a PyPI package holds the same fact, the fact itself). The notes with the quoted lines:
/work/notes/upstream-facts.md (outside the repo). Does not cover flag names (the engines' own parsers answer
those at preflight) or anything measured.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ImageLayout:
    """Where an image installs a tree the agent may patch, and the upstream file that says so."""

    image: str
    repo: str
    path: str
    source: str


IMAGE_LAYOUTS = (
    # final stage: `uv pip install --system *.whl` (a wheel in the system Python's dist-packages; Python 3.12 from
    # docker/Dockerfile.rocm_base, ARG PYTHON_VERSION=3.12); /app/vllm only gets benchmarks/, examples/, docker/
    ImageLayout(
        "vllm/vllm-openai-rocm:v0.25.1",
        "vllm",
        "/usr/local/lib/python3.12/dist-packages/vllm",
        "vllm-project/vllm docker/Dockerfile.rocm @ 00305ee5, docker/Dockerfile.rocm_base @ 00256d59",
    ),
    # WORKDIR /sgl-workspace; `git clone ... sglang` then `pip install -e "python[all_hip]"` (editable)
    ImageLayout(
        "lmsysorg/sglang-rocm:v0.5.20-rocm720-mi35x-20260919",
        "sglang",
        "/sgl-workspace/sglang",
        "sgl-project/sglang docker/rocm.Dockerfile @ 004ae46f",
    ),
    # `git clone ${AITER_REPO}` in /sgl-workspace, `pip install --config-settings editable_mode=compat -e .`
    ImageLayout(
        "lmsysorg/sglang-rocm:v0.5.20-rocm720-mi35x-20260919",
        "aiter",
        "/sgl-workspace/aiter",
        "sgl-project/sglang docker/rocm.Dockerfile @ 004ae46f",
    ),
)

# ROCm/aiter @ c16d44b93a528b2a4bfd6d8d3409116d465872a9 (the AITER_COMMIT_DEFAULT of sglang's rocm.Dockerfile):
# aiter/fused_moe.py looks a tuned config up by M padded to the next power of two, M >= 32768 by these tiers.
AITER_COMMIT = "c16d44b93a528b2a4bfd6d8d3409116d465872a9"
AITER_PADDED_M_TIERS = (32768, 131072)
# aiter/configs/untuned_fmoe.csv's header, which gemm_moe_tune.py -i reads
AITER_FMOE_UNTUNED_COLUMNS = (
    "token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,doweight_stage1"
).split(",")


def aiter_padded_m(tokens: int) -> int:
    """The `token` value under which aiter looks up the tuned config for a batch of `tokens` rows
    (aiter/fused_moe.py: get_padded_M, nextPow2)."""
    if tokens < AITER_PADDED_M_TIERS[0]:
        return 1 if tokens <= 1 else 1 << (tokens - 1).bit_length()
    return max(tier for tier in AITER_PADDED_M_TIERS if tokens >= tier)


def layout_for(image: str, repo: str) -> ImageLayout | None:
    return next((entry for entry in IMAGE_LAYOUTS if entry.image == image and entry.repo == repo), None)


def layout_notes(image: str, repos: dict[str, str]) -> list[str]:
    """One line per declared repo of a pinned image: where it is, and a warning when the task looks elsewhere."""
    notes = []
    for name, path in repos.items():
        known = layout_for(image, name)
        if known is None:
            continue
        if known.path == path:
            notes.append(f"repo {name}: {path} is where {image} installs it ({known.source})")
        else:
            notes.append(f"WARNING repo {name}: {image} installs it at {known.path}, not {path} ({known.source})")
    return notes
