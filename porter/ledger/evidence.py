"""Evidence per configuration: what a configuration is, and measuring it into samples that say so.

Covers the configuration a server or a check result belongs to (the content tree of every repo, the
model overlay included when the task has one, the serve flags and the image digest) and its
fingerprint; running a check through the registry under the node's measurement lock, keeping every
result as a sample of that configuration (a configuration measured for the first time gets the
kind's minimum number of samples, later runs add one); reusing samples cached by earlier runs unless
the run is --fresh; and re-measuring the targets the accepted configuration has no figure for.
Does not decide what to keep (accepting.py).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import git

from porter import __version__
from porter.checks import registry
from porter.checks.loadgen import CheckError
from porter.ledger import measure_cache

if TYPE_CHECKING:
    from porter.loop.run_context import RunContext


def content_tree(repo: git.Repo) -> str:
    """Hash of the working tree as git would commit it now (new files in, ignored build products out).

    A scratch copy of the index is used, so the repo's own index and HEAD are untouched; the hash of
    a clean tree equals its HEAD's tree, so a configuration keeps its fingerprint when it is committed.
    """
    with tempfile.TemporaryDirectory(prefix="porter-index-") as scratch:
        index = Path(scratch) / "index"
        own = Path(repo.git_dir) / "index"
        if own.exists():
            shutil.copyfile(own, index)
        env = {"GIT_INDEX_FILE": str(index)}
        repo.git.add(A=True, env=env)
        return repo.git.write_tree(env=env)


def image_digest(ctx: RunContext) -> str:
    if ctx.image_digest is None:
        describe = getattr(ctx.sandbox, "describe", None)
        facts = describe() if describe else {}
        ctx.image_digest = facts.get("image_id") or facts.get("kind") or "unknown"
    return ctx.image_digest


def configuration(ctx: RunContext, accepted: bool = False) -> dict:
    """The current (or the accepted) configuration: trees, flags, image."""
    if accepted:
        trees = {name: repo.repo.head.commit.tree.hexsha for name, repo in ctx.repos.items()}
        flags = ctx.state.accepted_flags
    else:
        trees = {name: content_tree(repo.repo) for name, repo in ctx.repos.items()}
        flags = ctx.state.flags
    return {"repos": dict(sorted(trees.items())), "flags": dict(sorted(flags.items())), "image": image_digest(ctx)}


def fingerprint_of(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def fingerprint(ctx: RunContext, accepted: bool = False) -> str:
    config = configuration(ctx, accepted)
    name = fingerprint_of(config)
    ctx.state.configs.setdefault(name, config)
    return name


def sync_accepted(ctx: RunContext) -> str:
    """Record which configuration is the accepted one now (after a start, an accept or a revert)."""
    ctx.state.accepted_config = fingerprint(ctx, accepted=True)
    return ctx.state.accepted_config


def harness(item: registry.Declared) -> str:
    """The check as defined (spec, workload) and porter's version: samples compare only within one harness."""
    material = {"check": item.key, "spec": item.spec.model_dump(mode="json"), "porter": __version__}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]


def measure(ctx: RunContext, kind_name: str, extra: int | None = None, config: str | None = None) -> dict[str, dict]:
    """Run one kind of check against the live server; results keyed "throughput", "quality:<name>", ...

    A configuration measured for the first time gets the kind's minimum number of samples (cached ones
    count); afterwards each call adds one new sample (or `extra`). `config` names the configuration the
    running server must be on, when it is not the current one (the accepted flags served for a check).
    """
    from porter.loop.run_context import ToolError

    items = registry.declared(ctx.task, kind_name)
    if not items:
        raise ToolError(f"the task declares no {kind_name} check")
    if config is None:
        base_url = ctx.require_server()
        config = ctx.server_fingerprint  # require_server checked it is the tree's and the flags' as they are now
    else:
        base_url = _server_on(ctx, config)
    sync_accepted(ctx)
    results = {}
    for item in items:
        have = len(ctx.state.samples_on(config, item.key))
        if have == 0:
            have = _reuse_cached(ctx, item, config)
            wanted = item.kind.min_samples - have
        else:
            wanted = max(1, item.kind.min_samples - have)
        wanted = max(wanted, extra or 0)
        for _ in range(wanted):
            _record(ctx, item, config, _run(ctx, item, base_url), cached=False)
        results[item.key] = ctx.state.checks_on(config)[item.key]
    return results


def _run(ctx: RunContext, item: registry.Declared, base_url: str) -> dict:
    """One sample, under the node's lock. Whatever stops a check (a missing dataset, the server dying
    mid-sweep, a client error) becomes a ToolError the agent reads; a check that did not finish leaves
    no sample, and neither does one that finished after its server died (its late requests failed)."""
    from porter.loop.run_context import ToolError

    server = ctx.server.process if ctx.server else None
    try:
        with measure_cache.measurement_lock(f"porter run {ctx.state.run_id}: {item.key}"):
            result = item.kind.run(base_url, item.spec, ctx.task)
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
    from porter.loop.run_context import ToolError

    server = ctx.server
    if server is None or not server.healthy or not server.process.alive() or ctx.server_fingerprint != config:
        raise ToolError(f"no healthy server runs configuration {config}; call serve first")
    return ctx.sandbox.endpoint(ctx.task.serve.port)


def _cache_key(ctx: RunContext, item: registry.Declared, config: str) -> str:
    return measure_cache.cache_key(ctx.state.configs[config], item.key, item.spec.model_dump(mode="json"))


def _reuse_cached(ctx: RunContext, item: registry.Declared, config: str) -> int:
    """Samples of this exact configuration and check from earlier runs, as many as a decision needs."""
    if ctx.state.fresh:
        return 0
    cached = measure_cache.cached_samples(_cache_key(ctx, item, config))[-item.kind.min_samples :]
    for result in cached:
        _record(ctx, item, config, result, cached=True)
    return len(cached)


def _record(ctx: RunContext, item: registry.Declared, config: str, result: dict, cached: bool) -> None:
    state = ctx.state
    result = {**result, "fingerprint": config}
    pending = config != state.accepted_config
    sample = {
        "key": item.key,
        "config": config,
        "harness": harness(item),
        "step": state.step,
        "value": registry.headline_value(item, result),
        "result": result,
        "cached": cached,
    }
    state.samples.append(sample)
    if not cached:
        measure_cache.store_sample(_cache_key(ctx, item, config), result)
    line = {"step": state.step, "check": item.key, "pending": pending, "config": config, "cached": cached}
    with open(ctx.run_dir / "metrics.jsonl", "a", encoding="utf-8") as metrics:
        metrics.write(json.dumps({**line, "flags": state.flags, "result": result}, default=str) + "\n")
    ctx.transcript.record(
        "check", step=state.step, name=item.key, pending=pending, config=config, cached=cached, result=result
    )


def refresh_stale(ctx: RunContext) -> list[str]:
    """Measure every target the accepted configuration has no figure for, if the server runs that configuration.

    Returns the keys measured. Called after an accept that changed the configuration and before a run
    declares success, so no target is ever judged on another configuration's figure.
    """
    from porter.ledger.state import stale_targets

    accepted = sync_accepted(ctx)
    if ctx.server is None or not ctx.server.healthy or ctx.server_fingerprint != accepted:
        return []
    stale = stale_targets(ctx.task, ctx.state)
    kinds = list(dict.fromkeys(registry.by_key(ctx.task, key).kind.name for key in stale))
    for kind_name in kinds:
        measure(ctx, kind_name, config=accepted)
    return stale
