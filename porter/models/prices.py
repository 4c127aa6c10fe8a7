"""What a model call costs: the price table (prices.yaml), the task's override, and the arithmetic.

Covers finding the $/Mtok of an agent (task `agent.price` first, then prices.yaml) and turning a
`Usage` into dollars. Does not cover enforcing the budget: the loop sums `Usage.cost_usd` and must
say the dollar limit cannot be enforced when a cost is None (price unknown), never count it as 0.
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

from porter.models.base import Usage
from porter.task import AgentSpec, PriceSpec

PRICES_PATH = Path(__file__).with_name("prices.yaml")
PRICE_FIELDS = ("input", "output", "cache_read", "cache_write")


@functools.lru_cache(maxsize=4)
def load_price_table(path: Path = PRICES_PATH) -> dict[str, dict[str, dict]]:
    """provider -> model -> entry (the PriceSpec fields plus as_of, source, estimate)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    for provider, models in data.items():
        for model, entry in models.items():
            missing = [name for name in ("input", "output", "as_of", "source") if entry.get(name) is None]
            if missing:
                raise ValueError(f"{path}: {provider}.{model} lacks {missing}; every price needs a date and a source")
    return data


def price_entry(provider: str, model: str, table: dict[str, dict[str, dict]] | None = None) -> dict | None:
    """The table entry for `model`, preferring the `provider` section; None when no section lists it."""
    table = load_price_table() if table is None else table
    sections = [table.get(provider, {})] + [models for name, models in table.items() if name != provider]
    for models in sections:
        if model in models:
            return models[model]
    for models in sections:
        # Dated snapshots and suffixed variants (claude-sonnet-4-5-20250929) price like their base name.
        prefixes = [name for name in models if model.startswith(name + "-")]
        if prefixes:
            return models[max(prefixes, key=len)]
    return None


def price_for(spec: AgentSpec) -> PriceSpec | None:
    """The task's `agent.price`, else the table's price of `agent.model`, else None (unknown)."""
    if spec.price is not None:
        return spec.price
    if not spec.model:
        return None
    provider = spec.provider.split(":", 1)[0]
    entry = price_entry(provider, spec.model)
    if entry is None:
        return None
    return PriceSpec(**{name: entry.get(name) for name in PRICE_FIELDS})


def cost_usd(usage: Usage, price: PriceSpec | None) -> float | None:
    """Dollars of one call; None when the price is unknown. Cache rates the price leaves out are
    billed at the input rate (what the tokens would cost uncached)."""
    if price is None:
        return None
    cache_read = price.input if price.cache_read is None else price.cache_read
    cache_write = price.input if price.cache_write is None else price.cache_write
    dollars_per_million = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * cache_read
        + usage.cache_write_tokens * cache_write
    )
    return dollars_per_million / 1_000_000
