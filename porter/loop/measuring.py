"""Measuring a configuration into samples: what a configuration is right now, and running its checks.

Covers the configuration of the live trees (or of the accepted commits) with the serve flags and the
image digest; running one kind of check through the registry against the server under the node's
measurement lock, keeping every result as a sample of the configuration it ran on (a configuration
measured for the first time gets the kind's minimum number of samples, later runs add one); reusing
samples cached by earlier runs unless the run is --fresh; and re-measuring the targets the accepted
configuration has no figure for; a relative quality bar measured against the reference the run anchored. The
records and their keys are porter.ledger's; what to keep is ledger/decision.py's.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING

import aiohttp

from porter.checks import registry
from porter.checks.loadgen import CheckError
from porter.errors import ToolError
from porter.ledger import evidence, measure_cache
from porter.ledger.records import Sample
from porter.ledger.state import anchor_references, target_report
from porter.sandbox.foreign_changes import foreign_changes, unseen_paths
from porter.schema import serve_env

if TYPE_CHECKING:
    from porter.loop.run_context import RunContext


def measure(ctx: RunContext, kind_name: str, extra: int | None = None, config: str | None = None) -> dict[str, dict]:
    """Run one kind of check against the live server; results keyed "throughput", "quality:<name>", ...

    A configuration measured for the first time gets the kind's minimum number of samples (cached ones
    count); afterwards each call adds one new sample (or `extra`). `config` names the configuration the
    running server must be on, when it is not the current one (the accepted flags served for a check).
    """
    items = registry.declared(ctx.task, kind_name)
    if not items:
        raise ToolError(f"the task declares no {kind_name} check")
    if config is None:
        base_url = ctx.require_server()
        config = ctx.server_fingerprint  # require_server checked it is the tree's and the flags' as they are now
    else:
        base_url = _server_on(ctx, config)
    results = {}
    for item in items:
        have = len(ctx.state.samples_on(config, item.key))
        if have == 0:
            have = _reuse_cached(ctx, item, config)
            wanted = item.kind.min_samples - have
        else:
            wanted = max(1, item.kind.min_samples - have)
        wanted = max(wanted, extra or 0)
        for number in range(1, wanted + 1):
            result = _run(ctx, item, base_url, number, wanted)
            _record(ctx, evidence.new_sample(item, config, ctx.state.step, result, cached=False))
        results[item.key] = ctx.state.checks_on(config)[item.key]
    return results


def _run(ctx: RunContext, item: registry.Declared, base_url: str, number: int, samples: int) -> dict:
    """Sample `number` of `samples`, under the node's lock. Whatever stops a check (a missing dataset, the server
    dying mid-sweep, a client error) becomes a ToolError the agent reads; a check that did not finish leaves
    no sample, and neither does one that finished after its server died (its late requests failed)."""
    server = ctx.server.process if ctx.server else None
    reference = ctx.state.references.get(item.key)
    spec = item.kind.anchored(item.spec, reference.value) if reference else item.spec
    watcher = ctx.check_watcher
    waiting = functools.partial(watcher.waiting, item.key) if watcher else None
    progress = functools.partial(watcher.progressed, item.key) if watcher else None
    try:
        with measure_cache.measurement_lock(f"porter run {ctx.state.run_id}: {item.key}", on_wait=waiting):
            if watcher:
                watcher.sample_started(item.key, number, samples)
            result = item.kind.run(base_url, spec, ctx.task, progress)
    except (TimeoutError, CheckError, aiohttp.ClientError, OSError) as exc:
        died = (
            f" The server exited (code {server.exit_code()}) meanwhile: call serve."
            if server and not server.alive()
            else ""
        )
        raise ToolError(f"the {item.kind.name} check did not complete: {type(exc).__name__}: {exc}.{died}") from None
    if server and not server.alive():  # requests after the death failed: the figures describe a dying server
        raise ToolError(
            f"the server exited (code {server.exit_code()}) during the {item.kind.name} check, so its figures are "
            "discarded, not kept as a sample; call serve, then run_check again"
        )
    return result


def _server_on(ctx: RunContext, config: str) -> str:
    server = ctx.server
    if server is None or not server.healthy or not server.process.alive() or ctx.server_fingerprint != config:
        raise ToolError(f"no healthy server runs configuration {config}; call serve first")
    return ctx.sandbox.endpoint(ctx.task.serve.port)


def _shared(ctx: RunContext, config: str) -> bool:
    """Whether figures of `config` may go to or come from the cross-run cache: only when the fingerprint is all that
    decides them (no change outside the repos, no serve variable naming files or shell code it does not cover)."""
    env = serve_env(ctx.state.configs[config].flags)
    return not unseen_paths(ctx.task, env) and not foreign_changes(ctx.sandbox, ctx.task, ctx.run_dir)


def _reuse_cached(ctx: RunContext, item: registry.Declared, config: str) -> int:
    """Samples of this exact configuration and check from earlier runs, as many as a decision needs."""
    if ctx.state.fresh or (item.kind.relative(item.spec) and not item.kind.performance) or not _shared(ctx, config):
        return 0  # a relative quality verdict is this run's own: another run judged it against its own reference
    key = evidence.cache_key(ctx.state.configs[config], item)
    cached = measure_cache.cached_samples(key)[-item.kind.min_samples :]
    for result in cached:
        _record(ctx, evidence.new_sample(item, config, ctx.state.step, result, cached=True))
    return len(cached)


def _record(ctx: RunContext, sample: Sample) -> None:
    state = ctx.state
    state.samples.append(sample)
    anchor_references(ctx.task, state)
    item = registry.by_key(ctx.task, sample.key)
    if not sample.cached and _shared(ctx, sample.config):
        measure_cache.store_sample(evidence.cache_key(state.configs[sample.config], item), sample.result)
    pending = sample.config != state.accepted_config
    line = {
        "step": state.step,
        "check": sample.key,
        "pending": pending,
        "config": sample.config,
        "cached": sample.cached,
    }
    with open(ctx.run_dir / "metrics.jsonl", "a", encoding="utf-8") as metrics:
        metrics.write(json.dumps({**line, "flags": state.flags, "result": sample.result}, default=str) + "\n")
    ctx.transcript.record(
        "check", step=state.step, name=sample.key, pending=pending, config=sample.config, cached=sample.cached,
        result=sample.result,
    )  # fmt: skip


def refresh_stale(ctx: RunContext) -> list[str]:
    """Measure every target the accepted configuration has no figure for, if the server runs that configuration.

    Returns the keys measured. Called after an accept that changed the configuration and before a run
    declares success, so no target is ever judged on another configuration's figure.
    """
    accepted = ctx.state.accepted_config
    if ctx.server is None or not ctx.server.healthy or ctx.server_fingerprint != accepted:
        return []
    stale = [row.key for row in target_report(ctx.task, ctx.state) if row.stale]  # measured on other configurations
    kinds = list(dict.fromkeys(registry.by_key(ctx.task, key).kind.name for key in stale))
    for kind_name in kinds:
        measure(ctx, kind_name, config=accepted)
    return stale
