"""The tokenizer: every match of `\\w+|[^\\w\\s]` is exactly one token.

So counts are exact and easy to predict: a lower-case dictionary word is one token, "####" is four, and
" 17." is two. Ids are a stable hash of the token text (not invertible; the engine never needs to decode
prompt ids). Output text is produced as pieces, one token each, keeping the whitespace before the token.
Does not cover chat templates (see openai_api.py).
"""

import re
import zlib

VOCAB_SIZE = 154880
TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")
_PIECE_PATTERN = re.compile(r"\s*(?:\w+|[^\w\s])")


def tokenize(text: str) -> list[str]:
    return TOKEN_PATTERN.findall(text)


def token_ids(text: str) -> list[int]:
    return [zlib.crc32(token.encode()) % VOCAB_SIZE for token in TOKEN_PATTERN.findall(text)]


def pieces(text: str) -> list[str]:
    """Output pieces, one token each, with the whitespace that precedes the token kept in the piece."""
    return _PIECE_PATTERN.findall(text)
