"""Evidence as records: which check definition a sample belongs to, a new sample, and the samples a decision reads.

Covers the harness of a check (its spec and porter's version: samples compare only within one harness),
turning one check result into a `Sample` of the configuration it ran on (its headline read by its kind),
the cache key of a configuration's check, and the samples of one configuration a decision may compare.
Pure: the loop (porter/loop/measuring.py) runs the checks, holds the lock and writes the records.
"""

from __future__ import annotations

import hashlib
import json

from porter import __version__
from porter.checks import registry
from porter.ledger import measure_cache
from porter.ledger.records import Configuration, Sample
from porter.ledger.state import RunState


def harness(item: registry.Declared) -> str:
    """The check as defined (spec, workload) and porter's version: samples compare only within one harness."""
    material = {"check": item.key, "spec": item.spec.model_dump(mode="json"), "porter": __version__}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]


def new_sample(item: registry.Declared, config: str, step: int, result: dict, cached: bool) -> Sample:
    """One check result as a sample of configuration `config` (the result names its configuration too)."""
    result = {**result, "fingerprint": config}
    value = registry.headline_value(item, result)
    return Sample(item.key, config, harness(item), step, value, result, cached)


def cache_key(config: Configuration, item: registry.Declared) -> str:
    return measure_cache.cache_key(config.to_dict(), item.key, item.spec.model_dump(mode="json"))


def comparable(state: RunState, item: registry.Declared, config: str | None) -> list[Sample]:
    """The samples of one configuration a decision may compare: this check's harness, with a headline figure."""
    current = harness(item)
    return [s for s in state.samples_on(config, item.key) if s.harness == current and s.value is not None]
