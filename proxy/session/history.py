"""The neutral history as the core reads it: which histories it understands, the keys its
tool results are reclaimed under, where the client's system messages end, and the size
estimate every trigger starts from. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.conversation_message import message_chars
from proxy.errors import DegradeError

SYSTEM_ROLES = frozenset({"system", "developer"})
# Set by a wire adapter on the neutral message that carries a provider's own compaction
# (a Responses `compaction` item, a Messages `compaction` block): see `provider_floor`.
X_PROVIDER_COMPACTION = "x_provider_compaction"
KNOWN_ROLES = SYSTEM_ROLES | {"user", "assistant", "tool", "function"}
_ANSWERS = ("tool", "function")  # the roles that leave the calls before them open
# Keys of the proxy's hidden extract results (`proxy.session.rebuild`): no client key starts so.
HIDDEN_KEY_PREFIX = "xun-extract:"
_ESCAPE = "xun-client:"


class UnrecognisedHistory(DegradeError, ValueError):
    """The messages are not a history the proxy can reason about; send them on unchanged."""


def validate(messages: Any, start: int = 0) -> list[dict[str, Any]]:
    """Check the history is one the proxy understands; raise UnrecognisedHistory if not.

    `start`: the messages before it were checked already (the previous turn's, resent
    unchanged); only the calls they leave open are read from them."""
    if not isinstance(messages, list):
        raise UnrecognisedHistory("messages is not a list")
    start = max(0, min(start, len(messages)))
    open_calls: Any = _open_calls(messages, start)
    for i in range(start, len(messages)):
        msg = messages[i]
        role = msg.get("role") if isinstance(msg, dict) else None
        if role == "tool":
            if msg.get("tool_call_id") not in open_calls:
                raise UnrecognisedHistory(f"message {i}: tool result without a matching call")
        elif role == "assistant":
            calls = msg.get("tool_calls")
            if calls is None:
                open_calls = ()
            elif not isinstance(calls, list):
                raise UnrecognisedHistory(f"message {i}: tool_calls is not a list")
            elif len(calls) == 1 and isinstance(calls[0], dict):
                open_calls = (calls[0].get("id"),)
            else:
                open_calls = {c.get("id") for c in calls if isinstance(c, dict)}
        elif role not in KNOWN_ROLES:
            raise UnrecognisedHistory(f"message {i} has no known role")
        elif role != "function":
            open_calls = ()
    return messages


def _open_calls(messages: list[Any], start: int) -> Any:
    """The tool call ids a tool message at `start` may answer: those of the assistant message
    before the tool (and function) messages just before it."""
    i = start - 1
    while i >= 0 and isinstance(messages[i], dict) and messages[i].get("role") in _ANSWERS:
        i -= 1
    msg = messages[i] if i >= 0 else None
    if not isinstance(msg, dict) or msg.get("role") != "assistant":
        return ()
    calls = msg.get("tool_calls")
    return {c.get("id") for c in calls if isinstance(c, dict)} if isinstance(calls, list) else ()


def reclaim_keys(messages: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """Client index -> reclaim key of every tool message, each key distinct.

    A tool message's key is its `tool_call_id` (with `xun-client:` before it when it starts
    with that or with the hidden results' `xun-extract:`, so no client key is ever one of
    theirs), unless an earlier tool message holds that key already: then with the first
    free `#n` (n = 2, 3, ...) after it. So ids `a`, `a#2`, `a` give
    `a`, `a#2`, `a#3`, and `a`, `a`, `a#2` give `a`, `a#2`, `a#2#2`: no client id can make two
    results share a key. A key depends only on the messages up to its own, so it never
    changes as the history grows; where no id looks like `x#n`, keys are those of the
    earlier count-based scheme, so stored states keep naming the same results.
    """
    return tool_results(messages)[0]


def tool_results(messages: Sequence[Mapping[str, Any]]) -> tuple[dict[int, str], dict[str, Any]]:
    """`reclaim_keys`, and each key's content as the client sent it, in one pass."""
    keys: dict[int, str] = {}
    contents: dict[str, Any] = {}
    next_n: dict[str, int] = {}  # id -> the first `#n` suffix not yet tried for it
    for i, msg in enumerate(messages):
        if msg.get("role") != "tool":
            continue
        base = key = str(msg.get("tool_call_id"))
        if base.startswith((HIDDEN_KEY_PREFIX, _ESCAPE)):
            base = key = _ESCAPE + base
        if key in contents:
            n = next_n.get(base, 2)
            while (key := f"{base}#{n}") in contents:
                n += 1
            next_n[base] = n + 1
        keys[i] = key
        contents[key] = msg.get("content")
    return keys, contents


def leading_system_count(messages: Sequence[Mapping[str, Any]]) -> int:
    n = 0
    while n < len(messages) and messages[n].get("role") in SYSTEM_ROLES:
        n += 1
    return n


def provider_floor(
    messages: Sequence[Mapping[str, Any]], known: int | None = None, start: int = 0
) -> tuple[int, int]:
    """(the last message that carries a provider's compaction, or -1; where the proxy's own
    compaction may begin: just after it and the tool results that answer its calls, or 0).

    The wire adapter marks such messages (`X_PROVIDER_COMPACTION`). The provider's compaction
    is the session's new beginning: the messages before the floor go upstream as the client
    sent them, never summarised, reordered or reclaimed. `known`: the last mark among the
    first `start` messages, which the caller knows unchanged since it found it there; only
    the messages after them are then looked at (None, or a mark not among them: all are)."""
    if known is None or known >= start:
        known, start = -1, 0
    last = known
    for i in range(len(messages) - 1, start - 1, -1):
        if X_PROVIDER_COMPACTION in messages[i]:
            last = i
            break
    if last < 0:
        return -1, 0
    n = last + 1
    while n < len(messages) and messages[n].get("role") == "tool":
        n += 1
    return last, n


def estimate_chars(messages: Sequence[Any]) -> int:
    """Characters the model reads in these messages (content, tool-call arguments, reasoning)."""
    return sum(message_chars(m) for m in messages if isinstance(m, dict))


def estimate_tokens(messages: Sequence[Any]) -> int:
    return (estimate_chars(messages) + 3) // 4 + 4 * len(messages)


# The largest usage number believed: what JSON carries exactly everywhere (2**53). An
# upstream's larger count is not one: summed over turns it would outgrow what the state can
# be written with, and it reads as exabytes of prompt.
MAX_TOKEN_COUNT = 2**53


def token_count(value: Any) -> int | None:
    """A usage number as reported, when it is one: an int from 0 to `MAX_TOKEN_COUNT` (not
    a bool, string or float)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN_COUNT:
        return value
    return None
