"""What `serve` shows of a healthy start-up (porter/triage/log_digest.py): every warning and error line once, with
the ranks that wrote it, and the kernel choices in each engine's own wording. The lines below are written here in
the shape of sglang 0.5.20's and vLLM 0.25.1's logs (their logging formats, vLLM's fused_moe/oracle/fp8.py and
platforms/rocm.py messages, aiter's fused_moe lookups); the twin's own logs: test_twin_local.py."""

from __future__ import annotations

from porter.engines import sglang, vllm
from porter.triage.log_digest import decode_steps, digest, fold_ranks

AITER_KEY = "('gfx950', 256, {}, 6144, 256, 256, 8, 'ActivationType.Silu', 'torch.bfloat16')"
VLLM_LOG = [
    "(APIServer pid=7) INFO 07-14 10:22:01 [api_server.py:1] vLLM API server version 0.25.1",
    *(
        f"(Worker_TP{rank} pid={20 + rank}) WARNING 07-14 10:22:03 [fp8.py:120] Triton fallback: no aiter kernel"
        for rank in range(8)
    ),
    *(
        f"(Worker_TP{rank} pid={20 + rank}) INFO 07-14 10:22:03 [fp8.py:297] Using TRITON Fp8 MoE backend out of "
        "potential backends: ['AITER', 'TRITON']."
        for rank in range(8)
    ),
    "(Worker_TP0 pid=20) INFO 07-14 10:22:04 [rocm.py:611] Using ROCM_AITER_MLA backend out of potential backends: "
    "['ROCM_AITER_MLA', 'TRITON_MLA'].",
    "(EngineCore_DP0 pid=9) ERROR 07-14 10:22:05 [core.py:1] a request failed and was aborted",
]


def test_every_warning_and_error_shows_once_with_its_ranks():
    shown = digest(enumerate(VLLM_LOG, start=1), vllm.ENGINE.kernel_lines).render()
    assert "Warnings and errors in the log: 2\n" in shown
    assert "Triton fallback: no aiter kernel (x8 ranks)" in shown and "a request failed and was aborted" in shown
    assert "- MoE backend: 10: " in shown and "Using TRITON Fp8 MoE backend out of potential" in shown
    assert "- attention backend: 18: " in shown and "Using ROCM_AITER_MLA backend" in shown


def test_aiter_lookups_count_rows_hit_and_missed_and_the_dump_shows_around_the_match():
    log = [
        "[2026-07-14 10:22:01] server_args=ServerArgs(" + "x=1, " * 200 + "moe_runner_backend='auto', y=2)",
        "[2026-07-14 10:22:02] Warning: Attention backend specified by --attention-backend might be overridden.",
        f"[aiter] [fused_moe] using 2stage default for {AITER_KEY.format(1)} ",
        f"[aiter] [fused_moe] using 2stage (kernelName1='ck_a', kernelName2='ck_b') for {AITER_KEY.format(2)} ",
        f"[aiter] [fused_moe] using 2stage default for {AITER_KEY.format(4)} ",
    ]
    shown = digest(enumerate(log, start=1), sglang.ENGINE.kernel_lines).render()
    assert "Warnings and errors in the log: 1\n" in shown
    assert "- MoE backend: 1: ...x=1, " in shown and "moe_runner_backend='auto'" in shown
    assert f"1 keys with a tuned row, 2 on the default; first missed key {AITER_KEY.format(1)}" in shown


def test_none_is_said_only_when_no_line_warns():
    shown = digest(enumerate(["[2026-07-14 10:22:01 TP0] Load weight end."], start=1), ()).render()
    assert shown == "Warnings and errors in the log: none\nKernel choices logged:"


def test_a_rank_that_says_something_else_is_not_folded():
    lines = ["[2026-07-14 10:22:01 TP0] KV size: 9 GB", "[2026-07-14 10:22:01 TP1] KV size: 8 GB", "plain", "plain"]
    assert [line.shown() for line in fold_ranks(enumerate(lines, start=1))] == lines


def test_a_single_stream_reads_the_acceptance_length_each_engine_logs_and_the_step_it_implies():
    sglang_lines = [
        "[2026-07-14 10:22:01 TP0] Decode batch, #running-req: 1, #token: 9000, token usage: 0.00, accept len: 2.60, "
        "accept rate: 0.53, cuda graph: True, gen throughput (token/s): 212.40, #queue-req: 0",
        "[2026-07-14 10:22:03 TP0] Decode batch, #running-req: 1, #token: 9080, token usage: 0.00, accept len: 2.80, "
        "accept rate: 0.60, cuda graph: True, gen throughput (token/s): 215.10, #queue-req: 0",
    ]
    shown = decode_steps(sglang_lines, 216.0)
    assert "mean acceptance length 2.70 (2 engine lines during the check): a decode step every 12.5 ms" in shown
    vllm_line = (
        "(APIServer pid=7) INFO 07-14 10:22:05 [metrics.py:122] SpecDecoding metrics: Mean acceptance length: 3.10"
    )
    assert "mean acceptance length 3.10 (1 engine lines" in decode_steps([vllm_line], 310.0)
    assert "no speculative acceptance logged during the check (1 token a step): a decode step every 10.0 ms" in (
        decode_steps(["[2026-07-14 10:22:01 TP0] Decode batch, #running-req: 1"], 100.0)
    )


def test_a_log_of_endless_warnings_is_kept_bounded_and_counted():
    """The log is the sandbox's to write: past MAX_KEPT lines a kind, warnings are counted, not kept."""
    lines = ((n, f"WARNING 07-14 10:22:01 [x.py:1] distinct warning {n}") for n in range(1, 50_001))
    found = digest(lines, ())
    assert len(found.warnings) == 2000 and found.unkept == 48_000
    shown = found.render()
    assert shown.startswith("Warnings and errors in the log: 50000\n") and "... 49970 more: read_log grep" in shown
    assert len(shown) < 12_000
