"""A real prefix cache: prompts are cut into 16-token blocks, each block keyed by a hash chained over its
predecessors (like sglang's radix cache pages), kept in LRU order up to a token budget.

A request's cached tokens are the blocks of its prompt already present, counted from the start until the
first miss. Does not cover eviction of blocks still used by running requests (the pool never runs out:
the budget is large, and a block evicted early only makes a later request slower, never wrong).
"""

import hashlib
from collections import OrderedDict

BLOCK_TOKENS = 16


def block_keys(token_ids: list[int]) -> list[bytes]:
    keys, previous = [], b""
    for start in range(0, len(token_ids) - BLOCK_TOKENS + 1, BLOCK_TOKENS):
        block = token_ids[start : start + BLOCK_TOKENS]
        previous = hashlib.blake2b(previous + repr(block).encode(), digest_size=16).digest()
        keys.append(previous)
    return keys


def content_key(token_ids: list[int]) -> str:
    """The last block's own hash (not chained): the same text ends the same way whatever precedes it."""
    return hashlib.blake2b(repr(token_ids[-BLOCK_TOKENS:]).encode(), digest_size=8).hexdigest()


class PrefixCache:
    def __init__(self, capacity_tokens: int):
        self.capacity_blocks = max(capacity_tokens // BLOCK_TOKENS, 1)
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def cached_tokens(self, keys: list[bytes]) -> int:
        hits = 0
        for key in keys:
            if key not in self._blocks:
                break
            self._blocks.move_to_end(key)
            hits += 1
        return hits * BLOCK_TOKENS

    def insert(self, keys: list[bytes]) -> None:
        for key in keys:
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def flush(self) -> None:
        self._blocks.clear()

    def __len__(self) -> int:
        return len(self._blocks) * BLOCK_TOKENS
