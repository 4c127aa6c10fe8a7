"""Secrets porter can know of, and their removal, by value, from everything porter writes or sends.

Covers which host variables count as secrets (by name: *KEY*, *TOKEN*, *SECRET*, *PASSWORD*,
*CREDENTIAL*, cloud credentials), collecting their values once at the start of a run together with
the task's key variable whatever its name, replacing those values (and `sk-...` bearer keys) in text,
in bytes and in files (streamed, so a large log is never read whole), in JSON-like data and in the
conversation sent to a model, and the problems that make a sandbox environment or a task unacceptable
(a secret by name, by value, or by `${VAR}` reference). The sweep of a run's files reads none past
MAX_SCRUB_BYTES (a larger file is left alone and named) and keeps holes as holes, so a sparse file never
becomes allocated disk. Does not decide where text goes: each writer calls `redact`, and a run's outputs
are swept by `scrub_tree` when it closes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

# Names whose values are secrets. Matched anywhere in the upper-cased name, so ZAI_APIKEY, HF_TOKEN,
# DB_PASSWORD and GOOGLE_APPLICATION_CREDENTIALS are all caught; cloud credentials by their prefixes.
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|PRIVATE|^AWS_|^AZURE_|^GCP_|^GOOGLE_|_PAT$")
# sk-... (OpenAI, Anthropic sk-ant-...) and similar bearer keys that porter was never told about; 16+
# characters so prose like "sk-learn" is left alone, at most 200 so a streamed file needs a bounded overlap.
KEY_PATTERN = r"\bsk-[A-Za-z0-9][A-Za-z0-9_\-]{15,200}"
MIN_SECRET_LENGTH = 8  # shorter values ("1", "true", "us") would blank out ordinary words
_VAR_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_CHUNK = 1 << 20
# What the run-end sweep reads of one file at most. What porter writes as it goes (transcript, server logs, the
# exec log) is redacted as it is written; the sweep is the backstop, and a file past this is not one porter wrote.
MAX_SCRUB_MIB = 256
MAX_SCRUB_BYTES = MAX_SCRUB_MIB << 20


class ScrubTooLarge(OSError):
    """A file over the sweep's cap: it was not read past the cap, nor rewritten."""


class Sweep(NamedTuple):
    rewritten: list[Path]  # files that held a secret and were rewritten without it
    too_large: list[Path]  # files over MAX_SCRUB_BYTES, left as they were


def looks_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name.upper()))


class Secrets:
    """The secret values of one run, each with the name of the variable it came from."""

    def __init__(self, named_values: Mapping[str, str]):
        values: dict[str, str] = {}
        for name, value in named_values.items():
            if value and len(value) >= MIN_SECRET_LENGTH:
                # A value with quotes or backslashes appears escaped inside JSON lines: mask that spelling too.
                for spelling in (value, json.dumps(value, ensure_ascii=False)[1:-1]):
                    values.setdefault(spelling, name)
        self.names = dict(values)
        spellings = sorted(values, key=len, reverse=True)  # longest first: one value may contain another
        alternatives = [re.escape(spelling) for spelling in spellings] + [KEY_PATTERN]
        self.pattern = re.compile("|".join(alternatives))
        self.bytes_pattern = re.compile(b"|".join(a.encode() for a in alternatives))
        self.overlap = max([len(s.encode()) for s in spellings] + [220])
        # The regex tries every alternative at every position (a few MB/s); `in` is a C substring search
        # (GB/s): text that holds none of the values and no "sk-" skips the regex.
        self.spellings = spellings + ["sk-"]
        self.byte_spellings = [spelling.encode() for spelling in self.spellings]

    def _label(self, found: str) -> str:
        name = self.names.get(found)
        return f"[REDACTED:{name}]" if name else "sk-[REDACTED]"

    def redact(self, text: str) -> str:
        if not any(spelling in text for spelling in self.spellings):
            return text
        return self.pattern.sub(lambda match: self._label(match.group(0)), text)

    def redact_bytes(self, data: bytes) -> bytes:
        if not any(spelling in data for spelling in self.byte_spellings):
            return data
        return self.bytes_pattern.sub(lambda match: self._label(match.group(0).decode()).encode(), data)

    def value_names(self, text: str) -> list[str]:
        """Names of the secrets whose values occur in `text` (bearer keys as `sk-...`)."""
        return sorted({self.names.get(match.group(0), "sk-...") for match in self.pattern.finditer(text)})

    def scrub_file(self, path: Path, limit: int = MAX_SCRUB_BYTES) -> bool:
        """Rewrite `path` without secrets (streamed, atomically, holes kept); False when it had none and was left
        alone. A file over `limit` bytes (or growing past it) is read no further: ScrubTooLarge."""
        with open(path, "rb") as source:
            if not self.copy_redacted(source, None, limit):
                return False
        temporary = path.with_name(f".{path.name}.redacting")
        try:
            with open(path, "rb") as source, open(temporary, "wb") as target:
                self.copy_redacted(source, target, limit)
            os.chmod(temporary, path.stat().st_mode & 0o7777)
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)
        return True

    def copy_redacted(self, source, target, max_bytes: int | None = None) -> bool:
        """Copy source to target redacted (target None: only look; a chunk of zeros becomes a hole); True when a
        secret was found. With `max_bytes`, a source longer than that is ScrubTooLarge, read no further."""
        found, carry, read = False, b"", 0
        while True:
            chunk = source.read(_CHUNK)
            read += len(chunk)
            if max_bytes is not None and read > max_bytes:
                raise ScrubTooLarge(f"{getattr(source, 'name', 'the file')} is over {max_bytes} bytes")
            data = carry + chunk
            # Keep back the last `overlap` bytes: a secret may straddle two chunks.
            limit = len(data) if not chunk else len(data) - self.overlap
            out, position = bytearray(), 0
            suspect = any(spelling in data for spelling in self.byte_spellings)
            for match in self.bytes_pattern.finditer(data) if suspect else ():
                if match.start() >= limit:
                    break
                found = True
                out += data[position : match.start()] + self._label(match.group(0).decode()).encode()
                position = match.end()
            end = max(position, limit, 0)
            out += data[position:end]
            carry = data[end:]
            if target is not None and out.count(0) == len(out):
                target.seek(len(out), os.SEEK_CUR)  # zeros (a sparse file's hole) stay a hole
            elif target is not None:
                target.write(out)
            if not chunk:
                if target is not None:
                    target.truncate()  # the length, when the copy ends in a hole
                return found


class RedactingWriter:
    """A binary file written redacted as data arrives (a server's output streamed into its log), so a porter
    killed before its run is swept leaves no secret behind. Whole lines go out at once and a partial last line
    waits for its end, so no chunk boundary splits a secret; a line longer than _CHUNK goes out all but its
    last `overlap` bytes."""

    def __init__(self, target, secrets: Secrets | None = None):
        self.target, self.secrets, self.carry = target, secrets or known(), b""

    def write(self, data: bytes) -> None:
        data = self.carry + data
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) > _CHUNK:
            end = len(data) - self.secrets.overlap
        self.target.write(self.secrets.redact_bytes(data[:end]))
        self.carry = data[end:]

    def flush(self) -> None:
        self.target.flush()

    def close(self) -> None:
        self.target.write(self.secrets.redact_bytes(self.carry))
        self.carry = b""
        self.target.close()


def _existing_path(value: str) -> bool:
    return value.startswith("/") and os.path.exists(value)


_known: Secrets | None = None


def collect(environ: Mapping[str, str] | None = None, key_names: Iterable[str | None] = ()) -> Secrets:
    """Gather the secrets of this process (and the task's key variable) once; `redact` uses them from then on."""
    global _known
    environ = os.environ if environ is None else environ
    # A path to an existing file (AWS_CA_BUNDLE, GOOGLE_APPLICATION_CREDENTIALS) names a secret, is not one.
    named = {name: value for name, value in environ.items() if looks_secret(name) and not _existing_path(value)}
    named.update({name: environ[name] for name in key_names if name and name in environ})
    _known = Secrets(named)
    return _known


def known() -> Secrets:
    return _known if _known is not None else collect()


def redact(text: str) -> str:
    """`text` with every known secret value replaced by `[REDACTED:NAME]` and bearer keys by `sk-[REDACTED]`."""
    return known().redact(text)


def redact_data(data: object) -> object:
    """JSON-like `data` (tool-call arguments, facts) with every string in it, keys included, redacted."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, dict):
        return {redact(str(key)): redact_data(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [redact_data(item) for item in data]
    return data


def redact_conversation(messages: list) -> list:
    """The messages (porter.models.Message) as they may go to a provider: text, reasoning, tool-call arguments
    and facts redacted, in copies, so the calls porter runs keep their arguments. A message without a secret
    is the same object. Anthropic's thinking blocks are sent back as they came: they are signed by the
    provider, and one changed block makes it refuse the whole turn."""
    redacted = []
    for message in messages:
        calls = [dataclasses.replace(call, arguments=redact_data(call.arguments)) for call in message.tool_calls]
        clean = dataclasses.replace(
            message,
            content=redact(message.content),
            reasoning=redact(message.reasoning),
            tool_calls=calls,
            facts=redact_data(message.facts),
        )
        redacted.append(message if clean == message else clean)
    return redacted


def scrub_tree(root: Path, skip: Iterable[Path] = ()) -> Sweep:
    """Redact every regular file under `root` (not following links, not under `skip`), none read past
    MAX_SCRUB_BYTES; returns those rewritten and those too large to sweep."""
    skipped = {Path(path).resolve() for path in skip}
    secrets, sweep = known(), Sweep([], [])
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [d for d in subdirectories if Path(directory, d).resolve() not in skipped]
        for name in files:
            path = Path(directory, name)
            if path.is_symlink() or not path.is_file():
                continue
            try:
                if path.stat().st_size > MAX_SCRUB_BYTES:
                    raise ScrubTooLarge(path)
                if secrets.scrub_file(path):
                    sweep.rewritten.append(path)
            except ScrubTooLarge:
                sweep.too_large.append(path)
    return sweep


def environment_problems(env: Mapping[str, str], key_name: str | None = None) -> list[str]:
    """Why `env` must not reach a sandbox: secret-looking names, the task's key, secret values, `${SECRET}`."""
    secrets, problems = known(), []
    for name, value in env.items():
        if looks_secret(name) or name == key_name:
            problems.append(f"{name} (a secret by its name)")
        elif secrets.value_names(value):
            problems.append(f"{name} (its value is the secret {', '.join(secrets.value_names(value))})")
        else:
            references = [ref for ref in _VAR_REFERENCE.findall(value) if looks_secret(ref) or ref == key_name]
            if references:
                problems.append(f"{name} (refers to the secret variable {', '.join(references)})")
    return problems


def secret_fields(data: object, path: str = "") -> list[str]:
    """Dotted paths of the fields of `data` (a task as plain data) whose text holds a known secret value."""
    if isinstance(data, dict):
        return [found for key, value in data.items() for found in secret_fields(value, f"{path}.{key}".lstrip("."))]
    if isinstance(data, list):
        return [found for index, value in enumerate(data) for found in secret_fields(value, f"{path}[{index}]")]
    if isinstance(data, str) and known().value_names(data):
        return [f"{path} (holds the value of {', '.join(known().value_names(data))})"]
    return []
