"""What an upstream Chat Completions round produced, and several rounds merged into one completion.

The proxy may answer the model's `extract_compacted_tool_result` calls itself and ask upstream
again; the client must see one completion. Here: a message without its extract calls
(`visible_message`), usage as the trigger reads it (`usage_of`), a round's reply in the
pipeline's terms (`reply_round`, `proxy.wire.base`), and `client_reply`, the one non-streamed
completion (extract calls gone, usage summed). `proxy.wire.chat.stream` applies the same rules
to a stream. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import UpstreamInvalidResponse
from proxy.session.extract_tool import split_calls
from proxy.session.history import token_count
from proxy.wire.base import JSON, Round, Usage
from proxy.wire.chat.checks import checked_completion
from proxy.wire.usage import CHAT, usage_sum


def visible_message(message: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the message without extract calls, the extract calls removed)."""
    own, extract = split_calls(message.get("tool_calls"))
    if not extract:
        return message, []
    shown = dict(message)
    if own:
        shown["tool_calls"] = own
    else:
        shown.pop("tool_calls", None)
    return shown, extract


def usage_of(usage: Any) -> Usage | None:
    """Chat Completions usage as the trigger reads it; None when absent or unreadable."""
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    if not isinstance(details, dict):
        details = {}
    return Usage(
        total=token_count(usage.get("total_tokens")),
        prompt=token_count(usage.get("prompt_tokens")),
        cached=token_count(details.get("cached_tokens")),
        written=token_count(details.get("cache_write_tokens")),  # billed from GPT-5.6 on
    )


def reply_round(data: Any) -> Round:
    data = checked_completion(data)  # UpstreamInvalidResponse for wrong-typed parts
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    if not isinstance(choice, dict):
        raise UpstreamInvalidResponse()
    message = choice.get("message") or {}
    if not isinstance(message, dict):
        raise UpstreamInvalidResponse()
    shown, extract = visible_message(message)
    only = bool(extract) and not shown.get("tool_calls")
    usage = usage_of(data.get("usage"))
    return Round(message=message, usage=usage, only_extract=only, raw=data)


def client_reply(rounds: list[Round], *, injected: bool) -> JSON:
    """The last completion, extract calls removed, usage of every round added."""
    last = rounds[-1]
    completion: JSON = last.raw
    if injected:
        shown, extract = visible_message(last.message)
        if extract:
            choice = completion["choices"][0]
            if not shown.get("tool_calls") and choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"
            choice["message"] = shown
    total = usage_sum([r.raw.get("usage") or {} for r in rounds], CHAT)
    if total is not None:
        completion["usage"] = total
    return completion
