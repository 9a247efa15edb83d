"""Rebuilding a `Conversation` from a client's request and the session's state.

Every request carries the whole history, so the proxy keeps only what it decided (reclaimed
ids, the summary and its cut, hidden extract rounds, the last usage) and re-applies it to
each request. The client is the source of truth: originals of reclaimed results are read
back from its own messages. Histories understood and sizes: `proxy.session.history`. Pure: no I/O.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from proxy.compact import format_compacted_summary
from proxy.conversation import Conversation
from proxy.conversation_message import RawOpenAIMessage, SystemPrompt
from proxy.session.extract_tool import content_text
from proxy.session.fingerprint import PrefixChain, raw_digests
from proxy.session.hidden_rounds import Unmerge, result_key
from proxy.session.history import (
    HIDDEN_KEY_PREFIX,
    UnrecognisedHistory,
    estimate_chars,
    estimate_tokens,
    leading_system_count,
    provider_floor,
    reclaim_keys,
    token_count,
    tool_results,
    validate,
)
from proxy.session.json_limits import Written
from proxy.session.state import (
    CHAIN_SCHEME,
    HiddenExtract,
    Resolved,
    SessionState,
    hidden_in,
    seal_hidden,
)

_Results = tuple[dict[int, str], dict[str, Any]]  # tool results: keys, originals by key


@dataclass
class Outgoing:
    """The rebuilt conversation to send, in neutral messages.

    `messages` is the whole list as Chat Completions sends it (the summary, if any, in the
    first system message); `system` (the client's own system messages, verbatim), `summary`
    (the rendered summary text or None) and `rest` are its parts, for APIs that place the
    summary elsewhere. `unchanged`: these are the client's messages exactly as it sent them
    (nothing reclaimed, summarised or hidden applies), so a wire may send its own request's
    history as it came instead of converting the neutral messages back.
    """

    messages: list[dict[str, Any]]
    system: list[dict[str, Any]]
    summary: str | None
    rest: list[dict[str, Any]]
    unchanged: bool = False
    # With `unchanged`: the client's history as orjson wrote it, if it was (for a wire that
    # can answer a question about it from its bytes, as Messages counts cache breakpoints).
    history_json: bytes | None = None


@dataclass
class Rebuild:
    """A client's request rebuilt into a Conversation under a session's state. It and the
    tool results' `keys` and `originals` are built when first asked for: a session with nothing
    compacted sends the client's messages as they are, and needs them only to compact."""

    messages: list[dict[str, Any]]
    state: SessionState
    chain: PrefixChain
    system_count: int
    new_from: int
    raw_hash: str
    chars: int  # what estimate_chars counts in messages
    hidden: dict[int, HiddenExtract]  # hidden extract calls by the client message they join
    reset_reason: str | None = None
    resolved: dict[int, Resolved] = field(default_factory=dict)  # what `hidden` puts back
    floor: int = 0  # messages before it go up as sent (`proxy.session.history.provider_floor`)
    level1: bool = True  # False: the client owns the extract tool's name, so no placeholders
    _conversation: Conversation | None = field(default=None, init=False, repr=False)
    _as_built: list[object] = field(default_factory=list, init=False, repr=False)
    _origin: dict[int, int] = field(default_factory=dict, init=False, repr=False)
    _results: _Results | None = field(default=None, init=False, repr=False)

    @property
    def keys(self) -> dict[int, str]:
        """Client index -> reclaim key of every tool message
        (`proxy.session.history.reclaim_keys`)."""
        return self._tool_results()[0]

    @property
    def originals(self) -> dict[str, Any]:
        """Reclaim key -> the content the client sent, hidden extract results' included."""
        return self._tool_results()[1]

    def _tool_results(self) -> tuple[dict[int, str], dict[str, Any]]:
        if self._results is None:  # (set by `rebuild` when hidden rounds apply)
            self._results = tool_results(self.messages)
        return self._results

    @property
    def conversation(self) -> Conversation:
        if self._conversation is None:
            self._conversation = self._build()
        return self._conversation

    @property
    def origin(self) -> dict[int, int]:
        """id() of each conversation message -> index of the client message it comes from."""
        _ = self.conversation
        return self._origin

    def _build(self) -> Conversation:
        state, messages, keys = self.state, self.messages, self.keys
        conv = Conversation()
        conv.toolcall_enabled = self.level1
        if state.summary:
            system = conv.set_system_message_content(state.summary, is_compressed=True)
            system.trail = state.trail  # the artifact trail, shown with the summary
        for i in range(self.system_count):
            conv.set_persistent_section(
                f"client_system_{i}", content_text(messages[i].get("content"))
            )
        start = max(state.cut if state.summary else self.system_count, self.floor)
        order = list(range(start, len(messages)))
        if state.summary and state.moved_user is not None and state.moved_user < start:
            order.insert(0, state.moved_user)
        origin, hidden, append = self._origin, self.hidden, conv.messages.append
        for i in order:  # every tool message has its key: `conv.append` would only append
            if i not in hidden:
                msg = RawOpenAIMessage(messages[i], keys.get(i))  # copies the dict
                append(msg)
                origin[id(msg)] = i
                continue
            for m in self.resolved[i]:  # hidden rounds, the client's message, hidden answers
                msg = RawOpenAIMessage(m, result_key(m) if m.get("role") == "tool" else None)
                append(msg)
                origin[id(msg)] = i
        if state.reclaimed:
            present = {m.key for m in conv.messages if isinstance(m, RawOpenAIMessage) and m.key}
            conv.reclaim([k for k in state.reclaimed if k in present])
        self._as_built = _identities(conv)
        conv.total_tokens = state.total_tokens
        conv.compaction_counter.summary_rounds = state.summary_rounds
        conv.compaction_counter.toolcall_rounds = state.toolcall_rounds
        conv.compaction_counter.toolcall_reclaimed = state.toolcall_reclaimed
        return conv

    def unchanged(self) -> bool:
        """True when nothing applies to the client's messages: they go up as sent (also when
        the conversation was built but not changed since, as by a compactor that waits)."""
        if self.state.summary or self.state.reclaimed or self.hidden:
            return False
        return self._conversation is None or _identities(self._conversation) == self._as_built

    def upstream_messages(self) -> list[dict[str, Any]]:
        """The message list to send upstream."""
        if self.unchanged():
            return list(self.messages)  # nothing to apply: the client's messages as sent
        params = self.conversation.completion_params()
        fixed = self.messages[self.system_count : self.floor]  # a provider's compaction
        if self.state.summary:
            return [params[0], *fixed, *params[1:]]
        # Without a summary the client's system messages go up verbatim, exactly as sent.
        rest = [
            p
            for m, p in zip(self.conversation.messages, params, strict=True)
            if not isinstance(m, SystemPrompt)
        ]
        return [*self.messages[: self.system_count], *fixed, *rest]

    def outgoing(self) -> Outgoing:
        """The messages to send upstream, whole and in parts (see `proxy.wire.base`)."""
        unchanged = self.unchanged()
        messages = self.upstream_messages()
        system = self.messages[: self.system_count]
        if self.state.summary:
            summary = format_compacted_summary(self.state.summary, self.state.trail)
            return Outgoing(messages, system, summary, messages[1:])
        rest = messages[self.system_count :]
        return Outgoing(messages, system, None, rest, unchanged=unchanged)

    def projected_tokens(self) -> int:
        """The previous usage plus an estimate of what the client added since then, the
        estimate scaled by what this session's upstream bills per estimated token."""
        ratio = self.state.calibration or 1.0
        if self.state.total_tokens is None:
            return int(estimate_tokens(self.messages) * ratio)
        new = estimate_tokens(self.messages[self.new_from :])
        return self.state.total_tokens + int(new * ratio)

    def sent_estimate(self) -> int:
        """The proxy's estimate of the messages it sends upstream, in tokens."""
        if self.unchanged():
            return (self.chars + 3) // 4 + 4 * len(self.messages)  # the client's, as sent
        return estimate_tokens(self.upstream_messages())


def _identities(conv: Conversation) -> list[object]:  # what changing a conversation replaces
    return [m.raw if isinstance(m, RawOpenAIMessage) else m for m in conv.messages]


def _upgrade(state: SessionState, chain: PrefixChain) -> None:
    """Re-hash a state saved under the earlier chain scheme against these messages."""

    def rehash(n: int, expected: str | None) -> str | None:
        if expected is None or not 0 <= n <= len(chain) or chain.legacy_prefix(n) != expected:
            return None
        return chain.prefix(n)

    state.prefix_hash = rehash(state.prefix_len, state.prefix_hash)
    state.cut_hash = rehash(state.cut, state.cut_hash)
    state.prefix_raw, state.chain = None, CHAIN_SCHEME


def _reconcile(
    messages: list[dict[str, Any]], chain: PrefixChain, state: SessionState | None
) -> tuple[SessionState, int, str | None]:
    if state is None:
        return SessionState(), 0, None
    if state.chain != CHAIN_SCHEME:
        _upgrade(state, chain)
    if chain.matches(state.prefix_len, state.prefix_hash):
        return state, state.prefix_len, None
    # The client edited, retried, branched or truncated. Keep what still holds.
    keep_summary = bool(state.summary) and chain.matches(state.cut, state.cut_hash)
    fresh = SessionState(
        resets=state.resets + 1,
        turn_log=state.turn_log,
        context_window=state.context_window,
        calibration=state.calibration,
        pending_summary=state.pending_summary,  # an operator's request outlives an edit
        savings=state.savings,  # what the session saved stays counted
    )
    if keep_summary:
        fresh.summary, fresh.cut, fresh.cut_hash = state.summary, state.cut, state.cut_hash
        fresh.trail = state.trail
        fresh.moved_user = state.moved_user
        fresh.summary_rounds = state.summary_rounds
    keys = set(reclaim_keys(messages).values())
    fresh.reclaimed = [k for k in state.reclaimed if k in keys]
    fresh.toolcall_reclaimed = state.toolcall_reclaimed
    fresh.hidden = list(state.hidden)
    if state.total_tokens is not None and state.prefix_chars > 0:
        ratio = estimate_chars(messages) / state.prefix_chars
        fresh.total_tokens = int(state.total_tokens * ratio)
    reason = "diverged_after_summary" if keep_summary else "diverged"
    return fresh, len(messages), reason


def rebuild(
    messages: Any,
    state: SessionState | None,
    written: bytes | Written | None = None,
    received: list[Any] | None = None,
    unmerge: Unmerge | None = None,
) -> Rebuild:
    """Rebuild the Conversation the upstream should see for this request.

    The prefix hash reads `received` (one entry per message: what the wire adapter says
    determines it, see `Wire.as_received`) or else the messages; `written` is that list as
    orjson wrote it already, if it did, as bytes or as a `Written` that carries the hash on
    from the session's last request. `unmerge` is the wire's (`Wire.unmerge`): without it,
    only-extract rounds the client saw a part of are not put back."""
    if not isinstance(messages, list):
        raise UnrecognisedHistory("messages is not a list")
    hashed = messages if received is None else received
    n = state.prefix_len if state else 0
    if isinstance(written, Written):
        raw_prefix, raw_hash = raw_digests(
            hashed, n, written.history_json, resume=written.resume, keep=written.keep_hash
        )
    else:
        raw_prefix, raw_hash = raw_digests(hashed, n, written)
    trusted = None
    if (
        state is not None
        and state.chain == CHAIN_SCHEME
        and state.prefix_hash is not None
        and raw_prefix is not None
        and state.prefix_raw == raw_prefix
    ):
        trusted = (state.prefix_len, state.prefix_hash)  # resent unchanged: hash only the rest
    # A prefix resent unchanged was checked when it came: only what follows it is checked.
    messages = validate(messages, trusted[0] if trusted else 0)
    chain = PrefixChain(messages, trusted=trusted)
    state, new_from, reason = _reconcile(messages, chain, state)
    if reason is None and new_from == state.prefix_len and state.prefix_chars:
        chars = state.prefix_chars + estimate_chars(messages[new_from:])
    else:
        chars = estimate_chars(messages)
    system_count = leading_system_count(messages)
    mark, floor = provider_floor(messages, None if reason else state.provider_mark, new_from)
    state.provider_mark = mark
    if state.cut < max(system_count, floor) or state.cut > len(messages):
        state.summary, state.cut, state.cut_hash, state.moved_user = None, 0, None, None
        state.trail = None
    start = max(state.cut if state.summary else system_count, floor)
    hidden, resolved, results = hidden_in(messages, chain, state, start, unmerge)
    rb = Rebuild(
        messages=messages,
        state=state,
        chain=chain,
        system_count=system_count,
        new_from=new_from,
        raw_hash=raw_hash,
        chars=chars,
        hidden=hidden,
        reset_reason=reason,
        resolved=resolved,
        floor=floor,
    )
    rb._results = results
    return rb


def apply_compaction(rb: Rebuild) -> None:
    """Read what the compactor did to the conversation back into the session state."""
    conv, state = rb.conversation, rb.state
    system = (
        conv.messages[0] if conv.messages and isinstance(conv.messages[0], SystemPrompt) else None
    )
    if system is not None and system.is_compressed and system.content != state.summary:
        idx = [rb.origin[id(m)] for m in conv.messages if not isinstance(m, SystemPrompt)]
        j = len(idx) - 1
        while j > 0 and idx[j - 1] in (idx[j], idx[j] - 1):
            j -= 1
        state.summary = system.content
        state.trail = system.trail
        state.cut = idx[j] if idx else len(rb.messages)
        state.moved_user = idx[j - 1] if j > 0 else None
        state.cut_hash = rb.chain.prefix(state.cut)
        state.hidden = [h for h in state.hidden if h.anchor >= state.cut]
    # Keys of summarised results are kept: after an edit before the cut they stay reclaimed.
    known = set(rb.keys.values()) | {k for k in rb.originals if k.startswith(HIDDEN_KEY_PREFIX)}
    merged = dict.fromkeys([*state.reclaimed, *conv.reclaimed_keys()])
    state.reclaimed = [k for k in merged if k in known]
    counter = conv.compaction_counter
    state.summary_rounds = counter.summary_rounds
    state.toolcall_rounds = counter.toolcall_rounds
    state.toolcall_reclaimed = counter.toolcall_reclaimed


def cover(rb: Rebuild) -> None:
    """The state now describes this request's whole history."""
    state = rb.state
    state.prefix_len = len(rb.messages)
    state.prefix_hash = rb.chain.prefix(len(rb.messages))
    state.prefix_raw = rb.raw_hash
    state.prefix_chars = rb.chars
    seal_hidden(state, rb.chain)


def record_turn(
    rb: Rebuild,
    *,
    total_tokens: Any,
    prompt_tokens: Any = None,
    cached_tokens: Any = None,
    written_tokens: Any = None,
    compaction: str = "none",
    now: float | None = None,
    keep_view: bool = True,
    extra: dict[str, Any] | None = None,
) -> SessionState:
    """Note that the upstream answered this request: the prefix covered and the usage.

    The usage numbers come from the upstream's reply as they were: one that is not a token
    count (a string, a float, a negative number) is ignored for this turn, never stored. Cache
    writes (the cost model's observed write share) are kept only where the upstream reports them.
    `extra` joins the turn's record (a shadow turn's `shadow` and `projected_prompt_tokens`; the
    turn's `savings`: `proxy.session.savings_record`).
    """
    state = rb.state
    total_tokens, prompt_tokens = token_count(total_tokens), token_count(prompt_tokens)
    cached_tokens, written_tokens = token_count(cached_tokens), token_count(written_tokens)
    cover(rb)
    if keep_view:
        state.set_view(rb.messages, valid=rb.new_from if rb.reset_reason is None else 0)
    if total_tokens is not None:
        state.total_tokens = total_tokens
    state.turn_log.append(
        {
            "at": time.time() if now is None else now,
            "messages": len(rb.messages),
            "total_tokens": total_tokens,
            "prompt_tokens": prompt_tokens,
            "cached_tokens": cached_tokens,
            **({} if written_tokens is None else {"cache_write_tokens": written_tokens}),
            "compaction": compaction,
            **(extra or {}),
        }
    )
    return state
