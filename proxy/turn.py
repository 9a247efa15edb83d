"""One chat turn of a session: load its state, rebuild, compact, and save what was decided.

This is the orchestration between the pure core (session, compact) and the store. Every
failure here degrades to sending the client's request upstream uncompacted; it is logged and
counted, never shown to the client.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from proxy.compact import CompactionContext, CompactorAbstract
from proxy.extract_tool import TOOL_DEFINITION, client_defines_tool, inject
from proxy.session import Rebuild, SessionState, UnrecognisedHistory, apply_compaction, rebuild
from proxy.store.base import SessionKey, Store, StoreError, VersionConflict
from proxy.summarizer import PostFn, Summarizer

log = logging.getLogger("xun.turn")

_MAX_CONTEXT = re.compile(r"maximum context length is (\d+)")


def tenant_of(authorization: str | None) -> str:
    """A short, stable, non-reversible tag of the client's credentials."""
    if not authorization:
        return "anonymous"
    return hashlib.sha256(authorization.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def learned_window(error_body: Any) -> int | None:
    err = error_body.get("error") if isinstance(error_body, dict) else None
    text = str(err.get("message") if isinstance(err, dict) else error_body)
    m = _MAX_CONTEXT.search(text)
    return int(m.group(1)) if m else None


@dataclass
class Turn:
    """What the proxy decided for one request of a session."""

    key: SessionKey
    store: Store
    body: dict[str, Any]
    rb: Rebuild | None = None
    version: int | None = None
    compaction: str = "none"
    degraded: str | None = None
    injected: bool = False
    summarizer: Summarizer | None = None
    reports: list[dict[str, Any]] = field(default_factory=list)
    store_errors: int = 0

    @property
    def state(self) -> SessionState | None:
        return self.rb.state if self.rb else None

    async def load(self) -> None:
        """Read the session's state and rebuild the conversation; degrade on any failure."""
        stored = None
        try:
            stored = await self.store.get(self.key)
        except StoreError as exc:
            self.store_errors += 1
            self.degraded = "store_unavailable"
            log.warning("store read failed, passing through uncompacted: %s", exc)
            return
        state = None
        if stored is not None:
            self.version = stored.version
            try:
                state = SessionState.from_bytes(stored.data)
            except Exception:  # a corrupt or foreign record must not fail the request
                log.exception("unreadable session state, starting afresh")
        try:
            self.rb = rebuild(self.body.get("messages"), state)
        except UnrecognisedHistory as exc:
            self.degraded = "unrecognised_history"
            log.info("history not understood, passing through unchanged: %s", exc)

    async def compact(
        self,
        compactor: CompactorAbstract,
        *,
        threshold: int,
        post: PostFn,
        summary_model: str | None,
        force_tokens: int | None = None,
    ) -> None:
        """Run the compactor when the projected size crosses the threshold."""
        if self.rb is None:
            return
        conv = self.rb.conversation
        projected = self.rb.projected_tokens() if force_tokens is None else force_tokens
        if projected <= threshold:
            return
        conv.total_tokens = projected
        self.summarizer = Summarizer(
            post=post,
            model=summary_model or str(self.body.get("model") or ""),
            tools=self.summary_tools(),
        )
        agent = CompactionContext(
            conversation=conv, summarize=self.summarizer, token_threshold=threshold
        )
        try:
            report = await compactor.auto_compact(agent)
        except Exception:
            log.exception("compaction failed, sending uncompacted")
            self.rb = rebuild(
                self.body.get("messages"), SessionState.from_bytes(self.rb.state.to_bytes())
            )
            self.compaction = "failed"
            return
        apply_compaction(self.rb)
        self.reports.append(report.to_dict())
        if report.level != "none":
            self.compaction = (
                report.level if self.compaction in ("none", "toolcall") else self.compaction
            )
            self.rb.state.last_compaction = report.to_dict()

    def summary_tools(self) -> list[dict[str, Any]] | None:
        tools = self.body.get("tools")
        base = list(tools) if isinstance(tools, list) else []
        if self.rb is not None and self.rb.state.compacted and not client_defines_tool(base):
            base.append(TOOL_DEFINITION)
        return base or None

    def upstream_body(self) -> dict[str, Any]:
        """The client's body with the rebuilt messages and, once anything is compacted, our tool."""
        if self.rb is None:
            return self.body
        body = dict(self.body)
        body["messages"] = self.rb.upstream_messages()
        n = body.get("n")
        self.injected = (
            self.rb.state.compacted
            and not client_defines_tool(body.get("tools"))
            and (n is None or n == 1)
        )
        if self.injected:
            body["tools"] = inject(body.get("tools"))
        return body

    async def save(self) -> None:
        """Write the state with compare-and-set; on a conflict the newest turn's view wins."""
        if self.rb is None or self.degraded:
            return
        state = self.rb.state
        data = state.to_bytes()
        meta = state.meta(len(self.rb.messages))
        for _ in range(3):
            try:
                self.version = await self.store.put(
                    self.key, data, meta, expected_version=self.version
                )
                return
            except VersionConflict:
                try:
                    latest = await self.store.get(self.key)
                except StoreError as exc:
                    self.store_errors += 1
                    log.warning("store re-read failed, state not saved: %s", exc)
                    return
                if latest is None:
                    self.version = None
                    continue
                other = SessionState.from_bytes(latest.data)
                if (
                    other.prefix_len > state.prefix_len
                    and other.summary_rounds >= state.summary_rounds
                ):
                    return  # a later turn already recorded more than we know
                self.version = latest.version
            except StoreError as exc:
                self.store_errors += 1
                log.warning("store write failed, state not saved: %s", exc)
                return
        log.warning("state not saved after repeated conflicts")
