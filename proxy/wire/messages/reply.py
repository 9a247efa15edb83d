"""Messages replies: usage as the trigger reads it, several rounds merged into one reply.

When the model calls the proxy's extract tool, the proxy answers and asks again; the client
must still get one message. `merge_messages` joins non-streamed rounds (extract calls gone,
usage summed, the last round's stop reason); `reply_round` reads one reply as the pipeline's
`Round` (`proxy.wire.base`); `summary_reply` reads a summary request's reply as the Chat
Completions completion the summariser expects. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import UnreadableInput
from proxy.session.history import token_count
from proxy.wire.base import Round, Usage
from proxy.wire.messages.bodies import is_extract_use
from proxy.wire.messages.to_neutral import X_ITEMS, assistant_to_neutral, reply_to_neutral
from proxy.wire.usage import MESSAGES, usage_sum

TOKEN_FIELDS = tuple(name for name, _ in MESSAGES.counts)  # input, cache writes, reads, output


def usage_total(usage: Any) -> int | None:
    """input + cache creation + cache read + output tokens: the size the trigger compares.

    None when the usage is missing or malformed (input or output not a count, or a cache
    field present but not a count).
    """
    if not isinstance(usage, dict):
        return None
    total = 0
    for name in TOKEN_FIELDS:
        value = usage.get(name)
        if value is None and name.startswith("cache_"):
            continue
        counted = token_count(value)
        if counted is None:
            return None
        total += counted
    return total


def usage_of(usage: Any) -> Usage | None:
    """Messages usage as the trigger and the cost model read it (None when unreadable).

    The prompt is every input token, cached or not: Anthropic counts cache reads and cache
    writes (`cache_creation_input_tokens`, 5-minute and 1-hour together) apart from
    `input_tokens`.
    """
    total = usage_total(usage)
    if total is None:
        return None
    read = token_count(usage.get("cache_read_input_tokens")) or 0
    written = token_count(usage.get("cache_creation_input_tokens"))
    prompt = usage["input_tokens"] + read + (written or 0)
    output = usage["output_tokens"]
    return Usage(total=total, prompt=prompt, cached=read, output=output, written=written)


# Ends a turn that stopped on the proxy's own calls (its rounds ran out) with no text: an
# assistant message must not be empty nor end in a thinking block, or the client's next
# request would be refused.
UNFINISHED = "[Retrieving compacted tool results did not finish in this turn.]"
_THINKING = ("thinking", "redacted_thinking")


def needs_text(last_kind: Any) -> bool:
    """Whether a turn ending here needs a text block (nothing shown yet, or thinking last)."""
    return last_kind is None or last_kind in _THINKING


def split_hidden(content: list[Any], hide: bool = True) -> tuple[list[Any], list[Any]]:
    """(the blocks the client sees, the proxy's extract calls)."""
    hidden = [b for b in content if hide and is_extract_use(b)]
    return [b for b in content if not any(b is h for h in hidden)], hidden


def client_stop_reason(reason: Any, content: list[Any], hidden: list[Any]) -> Any:
    """A turn whose only tool calls were the proxy's ends normally for the client."""
    visible = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)
    return "end_turn" if reason == "tool_use" and hidden and not visible else reason


def merge_messages(rounds: list[dict[str, Any]], hide: bool = True) -> dict[str, Any]:
    """Non-streamed rounds as the one message the client sees (`id` of the first)."""
    if not rounds:
        raise ValueError("merge_messages needs at least one round")
    parts = [split_hidden(r.get("content") or [], hide) for r in rounds]
    if len(rounds) == 1 and not parts[0][1]:
        return rounds[0]
    last = rounds[-1]
    merged = {**rounds[0], "content": [b for visible, _ in parts for b in visible]}
    for name in ("stop_reason", "stop_sequence", "stop_details", "container"):
        if name in last:
            merged[name] = last[name]
    merged["stop_reason"] = client_stop_reason(merged.get("stop_reason"), *parts[-1])
    content = merged["content"]
    if merged["stop_reason"] != last.get("stop_reason") and needs_text(
        content[-1].get("type") if content and isinstance(content[-1], dict) else None
    ):
        merged["content"] = [*content, {"type": "text", "text": UNFINISHED}]
    usage = usage_sum([r.get("usage") for r in rounds], MESSAGES)
    if usage is not None:
        merged["usage"] = usage
    return merged


class UnreadableReply(UnreadableInput, ValueError):
    """An upstream reply that is not a Messages `message` (no content list)."""


def as_round(reply: dict[str, Any], hide: bool = True) -> Round:
    """A whole reply (streamed or not) as the pipeline's round."""
    visible, hidden = split_hidden(reply.get("content") or [], hide)
    own_calls = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in visible)
    only = reply.get("stop_reason") == "tool_use" and bool(hidden) and not own_calls
    return Round(
        message=reply_to_neutral(reply),
        usage=usage_of(reply.get("usage")),
        only_extract=only,
        raw=reply,
    )


def reply_round(data: Any) -> Round:
    """A non-streamed reply as the pipeline's round: neutral message, usage, the reply itself."""
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise UnreadableReply("the reply has no content list")
    return as_round(data)


def hidden_round(rnd: Round) -> tuple[dict[str, Any], list[Any] | None]:
    """An only-extract round as later requests carry it: the assistant message exactly as
    `continue_body` sent it (thinking, signatures and the extract `tool_use` included), and
    the types of the blocks the client saw of it (`merge_messages` keeps them in front)."""
    raw = rnd.raw if isinstance(rnd.raw, dict) else {}
    content = raw.get("content") or []
    visible, _ = split_hidden(content)
    shown = [b.get("type") for b in visible if isinstance(b, dict)]
    return assistant_to_neutral({"role": "assistant", "content": content}), shown or None


def unmerge(message: dict[str, Any], shown: Any) -> list[dict[str, Any]] | None:
    """The client's echoed assistant message without the blocks it saw of a hidden round."""
    items = message.get(X_ITEMS)
    if not (isinstance(items, list) and len(items) == 1 and isinstance(items[0], dict)):
        return None
    original = items[0]
    content = original.get("content")
    if not isinstance(shown, list) or not isinstance(content, list) or len(content) < len(shown):
        return None
    for block, kind in zip(content, shown, strict=False):
        if not isinstance(block, dict) or block.get("type") != kind:
            return None
    rest = content[len(shown) :]
    return [assistant_to_neutral({**original, "content": rest})] if rest else []


def client_reply(rounds: list[Round], *, injected: bool) -> dict[str, Any]:
    """The one reply the client sees for non-streamed rounds."""
    return merge_messages([r.raw for r in rounds], hide=injected)


_FINISH = {"max_tokens": "length", "tool_use": "tool_calls", "refusal": "content_filter"}


def summary_reply(data: Any) -> dict[str, Any]:
    """A reply to a summary request as the Chat Completions completion the summariser reads."""
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise UnreadableReply("the reply has no content list")
    text = "".join(
        b["text"]
        for b in data["content"]
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    )
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": _FINISH.get(str(data.get("stop_reason")), "stop"),
    }
    completion: dict[str, Any] = {
        "id": data.get("id"),
        "object": "chat.completion",
        "model": data.get("model"),
        "choices": [choice],
    }
    usage = usage_of(data.get("usage"))
    if usage is not None:
        completion["usage"] = {
            "prompt_tokens": usage.prompt,
            "completion_tokens": usage.output,
            "total_tokens": usage.total,
        }
    return completion
