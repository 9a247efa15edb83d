"""A summary prepared ahead of the turn that needs it, as the session state keeps it. Pure.

The proxy may write a session's next summary in the background, a turn or two before the
strategy would summarise (`proxy.turn.summary_ahead`). The result is kept in the state
(`SessionState.ahead`) with what makes it safe to use later:

- `covers`: how many of the client's messages it summarises, and `digest`, the prefix-chain
  hash of those messages (`proxy.session.fingerprint.PrefixChain`): it is used only while
  the client's request still starts with exactly them (an edit, retry or branch before their
  end makes it stale);
- `base`: the compaction it was written over (the summary in force and its cut): once
  another summary replaced that one, it no longer continues the conversation as sent.

Only a finished summary is ever stored: one still being written exists nowhere but in the
process writing it, so a restart loses it and nothing half-written is used.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from proxy.session.fingerprint import PrefixChain
    from proxy.session.state import SessionState


@dataclass(frozen=True)
class Prepared:
    """A finished summary of a session's first `covers` client messages."""

    summary: str
    covers: int
    digest: str
    base: str
    at: float  # when it was written (time.time())
    seconds: float = 0.0  # how long the summary request took
    # The prefix hash of a request that began with the covered messages (`vouch`): a later
    # request that continues that one is checked without hashing its history again.
    verified: str = ""
    # What the summary request was billed: prompt, cached, written, output tokens (the turn
    # that uses it counts them in its savings).
    billed: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, data: Any) -> Prepared | None:
        """The record stored in a state, or None when there is none (or it is damaged)."""
        if not isinstance(data, dict):
            return None
        try:
            prepared = cls(
                summary=str(data["summary"]),
                covers=int(data["covers"]),
                digest=str(data["digest"]),
                base=str(data["base"]),
                at=float(data["at"]),
                seconds=float(data.get("seconds") or 0.0),
                verified=str(data.get("verified") or ""),
                billed=[int(n) for n in data.get("billed") or []][:4],
            )
        except (KeyError, TypeError, ValueError):
            return None
        return prepared if prepared.summary.strip() and prepared.covers > 0 else None

    def fits(self, state: SessionState, chain: PrefixChain) -> bool:
        """Whether it still applies to a request: written over the compaction in force, and
        the request starts with the very messages it summarises."""
        if self.base != base_of(state) or self.covers > len(chain):
            return False
        if self.verified:  # vouched for by a request this one continues, or by this one
            if state.prefix_hash == self.verified:
                if chain.matches(state.prefix_len, state.prefix_hash):  # (the rebuild's check)
                    return True
            elif chain.prefix(len(chain)) == self.verified:
                return True
        return chain.matches(self.covers, self.digest)

    def vouch(self, chain: PrefixChain) -> dict[str, Any]:
        """The record, noting that the request of `chain` begins with the covered messages
        (its whole history's hash, which the state keeps as its prefix once it is saved)."""
        return {**self.to_dict(), "verified": chain.prefix(len(chain))}


def base_of(state: SessionState) -> str:
    """The compaction a summary is written over: the summary in force and its cut."""
    text = f"{state.cut}\0{state.cut_hash or ''}\0{state.summary or ''}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def carried(merged: SessionState, *sides: SessionState) -> dict[str, Any] | None:
    """The prepared summary a merged state keeps: the newest of both sides' that was written
    over the merged state's compaction (one written over a summary the merge replaced, or
    already used for it, is dropped)."""
    base = base_of(merged)
    best: Prepared | None = None
    for side in sides:
        prepared = Prepared.of(side.ahead)
        if prepared is None or prepared.base != base:
            continue
        if best is None or prepared.at > best.at:
            best = prepared
    return None if best is None else best.to_dict()
