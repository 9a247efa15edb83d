"""`Conversation`: the typed message list, both compaction levels, and its saved form.

Level 1 (`compact_toolcall`) replaces old tool results in place by a placeholder and keeps
the originals by key; level 2 (`compact` / `acompact`) replaces the head of the conversation
by a summary held in the system prompt. When to use which is `proxy.compact`'s business.
Roles, not classes, identify messages: a `RawOpenAIMessage` may carry any role.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from proxy.conversation_message import (
    Content,
    ConversationFormatError,
    Message,
    RawOpenAIMessage,
    SystemPrompt,
    UserMessage,
    content_to_text,
    measure,
    message_from_json,
    tool_result_text,
    unreclaimed_param,
)
from proxy.rules import (
    CompactStatus,
    CutPlan,
    Summarizer,
    SummaryCompactResult,
    ToolCallCompactResult,
    placeholder_for,
    plan_cut,
)
from proxy.trail import update as update_trail

__all__ = ["FORMAT_VERSION", "CompactionCounter", "Conversation", "ConversationFormatError"]

# 1.3.0 gave every message `kind`; 1.4.0 adds tool-result keys and the reclaimed originals.
FORMAT_VERSION = "1.4.0"

JSONDict = dict[str, Any]
_M = TypeVar("_M", bound=Message)
SyncSummarizer = Callable[[list[JSONDict]], str | None]


@dataclass
class CompactionCounter:
    """`toolcall_rounds` counts consecutive cheap rounds since the last summary."""

    summary_rounds: int = 0
    toolcall_rounds: int = 0
    toolcall_reclaimed: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, saved: Any) -> CompactionCounter:
        if not isinstance(saved, dict):
            raise ConversationFormatError("'compaction_counter' must be an object")
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in saved.items() if k in names}
        if not all(isinstance(v, int) for v in values.values()):
            raise ConversationFormatError("'compaction_counter' values must be integers")
        return cls(**values)


class Conversation:
    """The messages of one session, with token usage, compaction counters and originals."""

    content_to_text = staticmethod(content_to_text)

    def __init__(self, messages: Iterable[Message] = (), *, total_tokens: int | None = None):
        self.messages: list[Message] = []
        self.total_tokens = total_tokens
        self.compaction_counter = CompactionCounter()
        self._originals: dict[str, Content] = {}
        self.trail_budget: int | None = None  # tokens of the artifact trail; None: the default
        self.toolcall_enabled = True  # False: level 1 off (the client owns the tool's name)
        for message in messages:
            self.append(message)

    # -- building ------------------------------------------------------------------------

    @property
    def system_prompt(self) -> SystemPrompt | None:
        first = self.messages[0] if self.messages else None
        return first if isinstance(first, SystemPrompt) else None

    def completion_params(self) -> list[JSONDict]:
        return [message.completion_param() for message in self.messages]

    def set_system_message_content(self, content: str, is_compressed: bool = False) -> SystemPrompt:
        system = self.system_prompt
        if system is None:
            system = SystemPrompt()
            self.messages.insert(0, system)
        system.content, system.is_compressed = content, is_compressed
        return system

    def set_persistent_section(self, name: str, content: str) -> None:
        system = self.system_prompt
        if not content:
            if system is not None:
                system.persist_sections.pop(name, None)
            return
        if system is None:
            system = self.set_system_message_content("")
        system.persist_sections[name] = content

    def add_user_message(self, content: Content, images: list[Any] | None = None) -> UserMessage:
        message = UserMessage.create(content, images)
        self.messages.append(message)
        return message

    def set_response_schema(self, schema: Any) -> None:
        """Attach a JSON schema (a dict, or a pydantic model class) to the last user message."""
        if not self.messages or self.messages[-1].role != "user":
            raise ValueError("set_response_schema needs the last message to be a user message")
        if schema is None or isinstance(schema, dict):
            resolved = schema
        elif callable(getattr(schema, "model_json_schema", None)):
            resolved = schema.model_json_schema()
        else:
            raise TypeError(f"expected a dict or a pydantic model, got {type(schema).__name__}")
        last = self.messages[-1]
        if not isinstance(last, UserMessage):
            last = self.messages[-1] = UserMessage.from_param(last.completion_param())
        last.response_schema = resolved

    def add_agent_message(self, message: Any) -> RawOpenAIMessage:
        """Append an assistant reply (a dict or an OpenAI SDK message object)."""
        if isinstance(message, Mapping):
            raw = dict(message)
        elif callable(getattr(message, "model_dump", None)):
            raw = dict(message.model_dump(exclude_none=True))
        else:
            raise TypeError(f"expected a message dict, got {type(message).__name__}")
        raw.setdefault("role", "assistant")
        # Some servers reject `tool_calls: []`; it means the same as no tool calls.
        if "tool_calls" in raw and not raw["tool_calls"]:
            del raw["tool_calls"]
        return self.append(RawOpenAIMessage(raw))

    def add_tool_result(self, tool_call_id: str, content: Any) -> RawOpenAIMessage:
        raw = {"role": "tool", "tool_call_id": tool_call_id, "content": tool_result_text(content)}
        return self.append(RawOpenAIMessage(raw))

    def append(self, message: _M) -> _M:
        """Append any message as is, giving a keyless tool result its reclaim key."""
        if isinstance(message, RawOpenAIMessage) and message.role == "tool":
            if message.key is None and message.tool_call_id is not None:
                message.key = self._free_key(message.tool_call_id)
        self.messages.append(message)
        return message

    def _free_key(self, tool_call_id: str) -> str:
        # Real traffic repeats tool_call ids; a suffix keeps every original retrievable.
        used = set(self._originals)
        used.update(m.key for m in self.messages if isinstance(m, RawOpenAIMessage) and m.key)
        key, n = tool_call_id, 2
        while key in used:
            key, n = f"{tool_call_id}#{n}", n + 1
        return key

    def pop_last_message_if_user(self) -> Message | None:
        if self.messages and self.messages[-1].role == "user":
            return self.messages.pop()
        return None

    def pop_from_last_user_message(self, inclusive: bool = True) -> list[Message]:
        """Pop back to the last user message (with it when `inclusive`); return the popped."""
        for index in range(len(self.messages) - 1, -1, -1):
            if self.messages[index].role == "user":
                start = index if inclusive else index + 1
                popped = self.messages[start:]
                del self.messages[start:]
                return popped
        return []

    def clear(self) -> None:
        """Drop everything but the leading system message(s); reset usage and compaction."""
        keep = 0
        while keep < len(self.messages) and self.messages[keep].role in ("system", "developer"):
            keep += 1
        del self.messages[keep:]
        self.total_tokens = None
        self.compaction_counter = CompactionCounter()
        self._originals.clear()

    def estimated_message_length(self) -> int:
        return sum(measure(message.completion_param()) for message in self.messages)

    # -- level 1: reclaim old tool results -----------------------------------------------

    def compact_toolcall(self, keep_max: int = 12) -> ToolCallCompactResult:
        """Replace all but the newest `keep_max` tool results by placeholders."""
        if keep_max < 0:
            raise ValueError(f"keep_max must be >= 0, got {keep_max}")
        tools = [m for m in self.messages if m.role == "tool"]
        old = tools[: max(0, len(tools) - keep_max)]
        before = self.estimated_message_length()
        count = sum(self._reclaim_one(m) for m in old if isinstance(m, RawOpenAIMessage))
        self.compaction_counter.toolcall_reclaimed += count
        fraction = (before - self.estimated_message_length()) / before if before else 0.0
        return ToolCallCompactResult(count, fraction)

    def reclaim(self, keys: Iterable[str]) -> int:
        """Reclaim the tool results with these keys (restoring saved state; counters untouched)."""
        wanted = set(keys)
        return sum(
            self._reclaim_one(m)
            for m in self.messages
            if isinstance(m, RawOpenAIMessage) and m.role == "tool" and m.key in wanted
        )

    def _reclaim_one(self, message: RawOpenAIMessage) -> bool:
        key = message.key
        if key is None or not self.toolcall_enabled:
            return False
        placeholder = placeholder_for(key)
        original = message.content
        if original == placeholder or len(placeholder) >= len(content_to_text(original)):
            return False
        self._originals[key] = original
        message.replace_content(placeholder)
        return True

    def reclaimed_keys(self) -> list[str]:
        return list(self._originals)

    def compacted_toolcall_result(self, key: str) -> Content | None:
        """The original content of a reclaimed tool result, exactly as it was."""
        return self._originals.get(key)

    # -- level 2: summarise the head -----------------------------------------------------

    def compact(self, summarize: SyncSummarizer, keep_recent: int = 16) -> SummaryCompactResult:
        """Summarise all but the newest `keep_recent` messages with a sync summariser."""
        plan = plan_cut([m.role for m in self.messages], keep_recent)
        if plan is None:
            return self._nothing_to_condense()
        request = self._summary_input(plan)
        try:
            summary: Any = summarize(request)
        except Exception:
            return SummaryCompactResult(CompactStatus.SUMMARIZE_FAILED)
        if inspect.isawaitable(summary):
            if inspect.iscoroutine(summary):
                summary.close()
            raise TypeError("compact() got an async summarizer; use acompact()")
        return self._apply_summary(plan, summary)

    async def acompact(self, summarize: Summarizer, keep_recent: int = 16) -> SummaryCompactResult:
        """Like `compact`, for a sync or async summariser."""
        plan = plan_cut([m.role for m in self.messages], keep_recent, summarize)
        if plan is None:
            return self._nothing_to_condense()
        request = self._summary_input(plan)
        # A failed summary must never fail the request it was meant to shrink.
        try:
            summary: Any = summarize(request)
            if inspect.isawaitable(summary):
                summary = await summary
        except Exception:
            return SummaryCompactResult(CompactStatus.SUMMARIZE_FAILED)
        return self._apply_summary(plan, summary)

    def _nothing_to_condense(self) -> SummaryCompactResult:
        kept = sum(1 for m in self.messages if not isinstance(m, SystemPrompt))
        return SummaryCompactResult(CompactStatus.NOTHING_TO_CONDENSE, kept_count=kept)

    def _summary_input(self, plan: CutPlan) -> list[JSONDict]:
        request: list[JSONDict] = []
        system = self.system_prompt
        # The earlier summary (or the prompt itself) goes along so nothing it held is lost;
        # persist sections stay out: they survive compaction anyway.
        if system is not None and system.content:
            request.append({"role": "system", "content": system.text(with_sections=False)})
        request.extend(self.messages[i].completion_param() for i in plan.summarized_indices())
        return request

    def _apply_summary(self, plan: CutPlan, summary: Any) -> SummaryCompactResult:
        if not isinstance(summary, str) or not summary.strip():
            return SummaryCompactResult(CompactStatus.SUMMARIZE_FAILED)
        kept = [self.messages[i] for i in plan.kept_indices(len(self.messages))]
        span = plan.summarized_indices()
        dropped = [unreclaimed_param(self.messages[i], self._originals) for i in span]
        self.messages[plan.preamble :] = kept
        system = self.set_system_message_content(summary, is_compressed=True)
        system.trail = update_trail(system.trail, dropped, budget=self.trail_budget)
        self.total_tokens = None
        self.compaction_counter.summary_rounds += 1
        self.compaction_counter.toolcall_rounds = 0
        moved = plan.moved_user is not None
        return SummaryCompactResult(CompactStatus.SUCCESS, len(dropped), len(kept), summary, moved)

    # -- display and storage -------------------------------------------------------------

    def to_history(self, truncate: bool = False) -> list[dict[str, str]]:
        """`{role, content}` records for display; tool calls shown as `[tool call]` lines."""
        history = []
        for message in self.messages:
            param = message.completion_param()
            lines = [content_to_text(param.get("content"), truncate)]
            for call in param.get("tool_calls") or []:
                function = (call.get("function") if isinstance(call, dict) else None) or {}
                lines.append(f"[tool call] {function.get('name')}({function.get('arguments')})")
            text = "\n".join(line for line in lines if line)
            history.append({"role": message.role, "content": text})
        return history

    def to_saved(self) -> JSONDict:
        return {
            "version": FORMAT_VERSION,
            "messages": [message.to_json() for message in self.messages],
            "tokens_used": self.total_tokens,
            "compaction_counter": self.compaction_counter.to_dict(),
            "compacted_originals": dict(self._originals),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_saved(), ensure_ascii=False)

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(self.dumps(), encoding="utf-8")

    @classmethod
    def loads(cls, text: str | bytes) -> Conversation:
        try:
            saved = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConversationFormatError(f"a saved conversation must be JSON: {exc}") from exc
        return cls.from_saved(saved)

    @classmethod
    def load(cls, path: str | Path) -> Conversation:
        return cls.loads(Path(path).read_text(encoding="utf-8"))

    @classmethod
    def from_saved(cls, saved: Any) -> Conversation:
        """Read a save of any known format; pre-1.3.0 saves (bare OpenAI dicts) are migrated."""
        if not isinstance(saved, dict) or not isinstance(saved.get("messages"), list):
            raise ConversationFormatError(
                "a saved conversation must be a JSON object with a 'messages' list"
            )
        _check_version(saved.get("version"))
        items: list[Any] = saved["messages"]
        if all(isinstance(item, dict) and "kind" in item for item in items):
            messages = [message_from_json(item) for item in items]
        elif all(isinstance(item, dict) and isinstance(item.get("role"), str) for item in items):
            messages = _migrate_bare(items)
        else:
            raise ConversationFormatError(
                "saved messages must all be 1.3.0+ messages (with 'kind') or all be bare "
                "OpenAI message dicts (pre-1.3.0, with 'role')"
            )
        tokens = saved.get("tokens_used")
        originals = saved.get("compacted_originals")
        originals = {} if originals is None else originals
        if tokens is not None and not isinstance(tokens, int):
            raise ConversationFormatError("'tokens_used' must be an integer or null")
        if not isinstance(originals, dict):
            raise ConversationFormatError("'compacted_originals' must be an object")
        # Messages first: keys of keyless (1.3.0) tool results must not dodge stored originals.
        conversation = cls(messages, total_tokens=tokens)
        counter = saved.get("compaction_counter")
        conversation.compaction_counter = CompactionCounter.from_dict(
            {} if counter is None else counter
        )
        conversation._originals = {str(k): v for k, v in originals.items()}
        return conversation


def _check_version(version: Any) -> None:
    if version is None:
        return
    major = str(version).split(".", 1)[0]
    if not isinstance(version, str) or not major.isdigit():
        raise ConversationFormatError(f"unreadable save format version {version!r}")
    if int(major) > int(FORMAT_VERSION.split(".", 1)[0]):
        raise ConversationFormatError(
            f"save format {version} is newer than this version reads ({FORMAT_VERSION})"
        )


def _migrate_bare(items: list[JSONDict]) -> list[Message]:
    messages: list[Message] = []
    for index, item in enumerate(items):
        if index == 0 and item["role"] == "system":
            messages.append(SystemPrompt(content_to_text(item.get("content"))))
        else:
            messages.append(RawOpenAIMessage(item))
    return messages
