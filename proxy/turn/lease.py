"""The compaction lease of a session, as one request takes, keeps and releases it.

A compaction runs only under the session's lease (`Store.acquire`), renewed while it runs
and released once its result is saved, so one state is never summarised twice:

- a request that finds the lease taken waits (polling with backoff, at most `lease_wait`
  seconds), re-reading the state whenever its version moves; once the holder's compaction
  is saved it usually applies to this request too, which then goes upstream without
  compacting again;
- a request that gets the lease after waiting, and finds the state unchanged, leaves it when
  the holder released it (it tried that state and failed or found nothing to do), and
  compacts when the lease had run down unrenewed first (its holder died);
- a request that cannot get the lease in time goes upstream without compacting;
- a request whose compactor says it would not compact now (`would_compact`: the cost-aware
  strategy waiting for a compaction to pay for itself) takes no lease at all, so a session
  over the threshold that is not compacted never queues its requests.

`Turn.lease` records how it went (none, held, waited, abandoned, timeout or error).
"""

from __future__ import annotations

import asyncio
import logging
from time import monotonic
from typing import Protocol

from proxy.store.base import SessionKey, Store, StoreError

log = logging.getLogger("proxy.lease")

# A lease lasts a few seconds and is renewed every quarter of that while the compaction runs:
# the lease of a process that died is free again soon, and is seen running down before that.
LEASE_TTL_S = 4.0
LEASE_WAIT_S = 60.0  # how long a request waits for another one's compaction


class Turn(Protocol):
    """What taking a lease needs of the request (`proxy.turn.session_turn.Turn`)."""

    key: SessionKey
    store: Store
    version: int | None
    lease: str
    lease_ttl: float
    lease_wait: float

    def store_failed(self, what: str, exc: StoreError) -> None: ...
    async def refresh(self) -> bool: ...
    def over(self, threshold: int, force_tokens: int | None) -> int | None: ...


async def take_lease(turn: Turn, threshold: int, force_tokens: int | None) -> str | None:
    """The lease token, or None when this request should not compact (see module doc)."""
    deadline = monotonic() + turn.lease_wait
    delay = 0.01
    seen: int | None = None  # the version when the lease was first found taken
    waited = False
    left: float | None = None  # the holder's lease time left, when last looked at
    try:
        while True:
            token = await turn.store.acquire(turn.key, turn.lease_ttl)
            if token is not None:
                # A live holder renews: a lease seen below half its time was abandoned.
                abandoned = left is not None and left < turn.lease_ttl / 2
                return await _holding(turn, token, waited, seen, abandoned)
            if not waited:
                waited, seen = True, turn.version
            left = await turn.store.lease_left(turn.key) or left
            if monotonic() >= deadline:
                turn.lease = "timeout"
                log.warning(
                    "session busy compacting for %.0fs, sending uncompacted", turn.lease_wait
                )
                await turn.refresh()  # still take whatever the holder saved so far
                return None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)
            if await turn.refresh() and turn.over(threshold, force_tokens) is None:
                turn.lease = "waited"  # another request's compaction covers this one
                return None
    except StoreError as exc:
        turn.store_failed("lease", exc)
        turn.lease = "error"
        return None


async def _holding(
    turn: Turn, token: str, waited: bool, seen: int | None, abandoned: bool
) -> str | None:
    """Just took the lease: re-read the state, and keep the lease if there is work."""
    turn.lease = "abandoned" if abandoned else "waited" if waited else "held"
    try:
        await turn.refresh()  # a compaction saved since this request's read counts
    except StoreError:
        await release_lease(turn, token)
        raise
    if waited and not abandoned and turn.version == seen:
        # The holder had this very state and left it as it was (it failed, or found
        # nothing to do): trying again right away would repeat its work.
        await release_lease(turn, token)
        return None
    return token


async def release_lease(turn: Turn, token: str) -> None:
    try:
        await turn.store.release(turn.key, token)
    except StoreError as exc:  # it expires by itself
        turn.store_failed("lease release", exc)


async def keep_lease(turn: Turn, token: str) -> None:
    """Renew the lease every quarter of its time until cancelled (or lost)."""
    while True:
        await asyncio.sleep(turn.lease_ttl / 4)
        try:
            if not await turn.store.renew(turn.key, token, turn.lease_ttl):
                log.warning("compaction lease lost; another request may compact too")
                return
        except StoreError as exc:
            turn.store_failed("lease renewal", exc)
