"""Token counts for the replay: tiktoken's o200k_base when it can be loaded offline.

tiktoken downloads its BPE files on first use, which this machine cannot do. The loader tries,
in order: tiktoken's own cache (TIKTOKEN_CACHE_DIR or its default); the copy of the file that
the LiteLLM package ships (in the peers' venvs, in tiktoken's cache layout, checked by tiktoken
against the file's published SHA-256); then falls back to a clearly labelled chars/4 count.

A request's prompt tokens: 3 for the reply's priming, per message 3 + the tokens of its role,
content text, name, tool-call names and arguments and reasoning fields, plus the tokens of the
tools' JSON. Message counts are cached by the message's bytes, so a replay counts each distinct
message once.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tests.bench import peers

PER_MESSAGE = 3
PRIMING = 3


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return "" if content is None else orjson.dumps(content).decode()


def _counter(enc: Any) -> Callable[[str], int]:
    return lambda s: len(enc.encode_ordinary(s))


O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


def _bpe_openai_cache() -> Path | None:
    """A tiktoken cache folder holding o200k_base, from the copy the `bpe-openai` package
    ships (PyPI, in the bench extra); tiktoken checks the file's SHA-256 itself."""
    # Found without importing it: the package's __init__ loads its vocabularies through a
    # deprecated importlib call (a DeprecationWarning, an error in the test run).
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        packed = (
            Path(spec.submodule_search_locations[0]) / "data" / "o200k_base.tiktoken.gz"
        ).read_bytes()
    except FileNotFoundError:
        return None
    folder = Path(tempfile.gettempdir()) / "xun-bench-tiktoken"
    folder.mkdir(exist_ok=True)
    target = folder / hashlib.sha1(O200K_URL.encode()).hexdigest()
    if not target.exists():
        target.write_bytes(gzip.decompress(packed))
    return folder


def load_encoder() -> tuple[Callable[[str], int], str]:
    """(count function, description of where the encoding came from)."""
    errors: list[str] = []
    try:
        import tiktoken
    except ImportError as exc:
        return (lambda s: (len(s) + 3) // 4), f"chars/4 (tiktoken not installed: {exc})"
    shipped = [peers.tiktoken_cache(name) for name in ("litellm", "headroom")]
    candidates: list[Path | None] = [
        None,
        _bpe_openai_cache(),
        *[c for c in shipped if c is not None],
    ]
    for cache in candidates:
        old = os.environ.get("TIKTOKEN_CACHE_DIR")
        if cache is not None:
            os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
        try:
            enc = tiktoken.get_encoding("o200k_base")
        except Exception as exc:  # tiktoken raises the download's own error type
            errors.append(f"{cache or 'tiktoken default cache'}: {type(exc).__name__}: {exc}"[:300])
            continue
        finally:
            if old is None:
                os.environ.pop("TIKTOKEN_CACHE_DIR", None)
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = old
        where = "tiktoken's cache" if cache is None else f"the file shipped in {cache}"
        failed = f"; before that: {errors[0]}" if errors else ""
        return _counter(enc), f"tiktoken o200k_base ({where}{failed})"
    return (lambda s: (len(s) + 3) // 4), "chars/4 FALLBACK (o200k_base not loadable: " + "; ".join(
        errors
    ) + ")"


@dataclass
class Counter:
    count: Callable[[str], int]
    source: str
    _messages: dict[bytes, int] = field(default_factory=dict)
    _tools: dict[bytes, int] = field(default_factory=dict)

    @classmethod
    def create(cls) -> Counter:
        count, source = load_encoder()
        return cls(count, source)

    def message_key(self, message: Any) -> bytes:
        return orjson.dumps(message, option=orjson.OPT_SORT_KEYS)

    def message(self, message: Any, key: bytes | None = None) -> int:
        key = key if key is not None else self.message_key(message)
        found = self._messages.get(key)
        if found is not None:
            return found
        n = PER_MESSAGE
        if isinstance(message, dict):
            n += self.count(str(message.get("role") or ""))
            n += self.count(_text(message.get("content")))
            if message.get("name"):
                n += self.count(str(message["name"]))
            for fld in ("reasoning", "reasoning_content"):
                if isinstance(message.get(fld), str):
                    n += self.count(message[fld])
            for call in message.get("tool_calls") or []:
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict):
                    n += self.count(str(fn.get("name") or "")) + self.count(
                        str(fn.get("arguments") or "")
                    )
        self._messages[key] = n
        return n

    def tools(self, tools: Any) -> tuple[bytes, int]:
        key = orjson.dumps(tools or [], option=orjson.OPT_SORT_KEYS)
        found = self._tools.get(key)
        if found is None:
            found = self._tools[key] = self.count(key.decode()) if tools else 0
        return key, found

    def request(self, body: dict[str, Any]) -> tuple[int, list[tuple[int, int]]]:
        """(prompt tokens, the prefix sequence: (hash, tokens) of the tools block, then of
        each message) of a chat request."""
        tools_key, tools_tokens = self.tools(body.get("tools"))
        seq = [(hash(tools_key), tools_tokens + PRIMING)]
        for msg in body.get("messages") or []:
            key = self.message_key(msg)
            seq.append((hash(key), self.message(msg, key)))
        return sum(t for _, t in seq), seq


def cached_prefix(
    previous: Sequence[tuple[int, int]] | None, current: Sequence[tuple[int, int]]
) -> int:
    """Tokens of the longest common prefix (whole blocks: tools, then messages) of two requests."""
    if not previous:
        return 0
    total = 0
    for a, b in zip(previous, current, strict=False):
        if a[0] != b[0]:
            break
        total += b[1]
    return total
