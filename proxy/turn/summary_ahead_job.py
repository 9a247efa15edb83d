"""The background job of a summary prepared ahead (`proxy.turn.summary_ahead` decides when).

It takes the session's summary slot (a lease of its own key, so turns never wait on it and
only one replica writes a session's summary), writes the summary with the same request the
crossing turn would make, and stores the finished summary in the session state with a digest
of the messages it covers (`proxy.session.prepared.Prepared`, compare-and-set). Only finished
summaries are ever stored, so nothing half-written is used after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field, replace
from time import monotonic
from typing import Any

from proxy.compaction.summarizer import Summarizer
from proxy.session.prepared import Prepared, base_of
from proxy.store.base import SessionKey, Store, StoreError, VersionConflict
from proxy.turn.lease import LEASE_TTL_S
from proxy.turn.persist import parse_state
from proxy.turn.summary_ahead_limits import AheadTasks
from proxy.wire.base import Usage

log = logging.getLogger("proxy.ahead")

# The summary slot's lease: a key of its own, so turns never wait on it.
SLOT_SUFFIX = "\0summary-ahead"
PUBLISH_ATTEMPTS = 20


@dataclass
class Job:
    """One summary to write in the background, and where its result goes."""

    key: SessionKey
    store: Store
    summarizer: Summarizer
    request: list[dict[str, Any]]  # the conversation to summarise when not sent as cached
    prepared: Prepared  # the record to store, its summary still empty
    tasks: AheadTasks
    bills: list[Usage | None] = field(default_factory=list)  # what its requests were billed

    def count(self, outcome: str) -> None:
        self.tasks.count(outcome)
        if outcome == "failed":
            self.tasks.backoff.failed(self.key.id)
        elif outcome == "ready":
            self.tasks.backoff.succeeded(self.key.id)


async def prepare(job: Job) -> None:
    """Write the summary under the session's summary slot and store it when finished."""
    slot = SessionKey(job.key.tenant, job.key.session + SLOT_SUFFIX)
    try:
        token = await job.store.acquire(slot, LEASE_TTL_S)
    except StoreError as exc:
        log.warning("summary slot unavailable: %s", exc)
        job.count("failed")
        return
    if token is None:
        job.count("busy")  # another request or replica writes it
        return
    renewer = asyncio.create_task(_keep(job.store, slot, token))
    try:
        if await _prepared_already(job):
            job.count("busy")
            return
        started = monotonic()
        summary = await job.summarizer(job.request)
        if not summary:
            log.warning("summary written ahead came back empty; the crossing will try again")
            job.count("failed")
            return
        took = monotonic() - started
        job.tasks.seconds[job.summarizer.model] = took
        spent = [
            sum(getattr(u, name) or 0 for u in job.bills if u is not None)
            for name in ("prompt", "cached", "written", "output")
        ]
        done = replace(job.prepared, summary=summary, at=time.time(), seconds=took, billed=spent)
        job.count("ready" if await publish(job.store, job.key, done) else "unused")
    finally:
        renewer.cancel()
        with contextlib.suppress(StoreError, asyncio.CancelledError):
            await job.store.release(slot, token)


async def _keep(store: Store, slot: SessionKey, token: str) -> None:
    while True:
        await asyncio.sleep(LEASE_TTL_S / 4)
        try:
            if not await store.renew(slot, token, LEASE_TTL_S):
                return
        except StoreError:
            return


async def _prepared_already(job: Job) -> bool:
    """Whether another replica stored a summary over the same compaction meanwhile."""
    stored = await job.store.get(job.key)
    state = None if stored is None else parse_state(stored.data)
    prepared = Prepared.of(state.ahead) if state is not None else None
    return prepared is not None and prepared.base == job.prepared.base


async def publish(store: Store, key: SessionKey, prepared: Prepared) -> bool:
    """Put a finished summary into the session state (compare-and-set); False when the state
    moved on to another summary meanwhile (then it is never used)."""
    for _ in range(PUBLISH_ATTEMPTS):
        stored = await store.get(key)
        state = None if stored is None else parse_state(stored.data)
        if stored is None or state is None or base_of(state) != prepared.base:
            return False
        current = Prepared.of(state.ahead)
        if current is not None and current.at > prepared.at:
            return False
        state.ahead = prepared.to_dict()
        try:
            await store.put(key, state.to_bytes(), stored.meta, expected_version=stored.version)
            return True
        except VersionConflict:
            await asyncio.sleep(0.005)
    return False
