"""Saving a session's state: compare-and-set, merged with whatever another writer saved.

A turn saves with compare-and-set (`save_turn`). On a `VersionConflict` it re-reads the stored
state and writes the merge of both (`proxy.session.merge`: the further compaction and the longer
prefix win, a summary is never dropped, both turn logs are kept), retrying until it gets
through: every lost round means another writer's save went through, so a burst of N writers
is saved within N rounds (bounded by `SAVE_ATTEMPTS` and `SAVE_DEADLINE_S`). A state over
the store's size cap is saved without its inspection view (then with a shorter turn log)
rather than not at all.

Within one process, `SessionWriter` keeps one write in flight per session. Saves that arrive
while it runs wait, and are then folded into one state in memory, exactly as if each had
saved in turn over the one before (`fold`), and written once: requests of one session that
run at once (an agent's sub-calls, retries) no longer race each other through the store,
each losing compare-and-set rounds to all the others. A turn's last save need not be
awaited (`submit`): the client's answer goes out while the write lands, and the session's
next request (`settled`) and the admin API wait for it before they read.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from time import monotonic
from typing import Protocol

from proxy.session.merge import merge_states
from proxy.session.rebuild import Rebuild
from proxy.session.state import SessionState, seal_hidden
from proxy.store.base import (
    SessionKey,
    SessionTooLarge,
    Store,
    StoredSession,
    StoreError,
    VersionConflict,
)

log = logging.getLogger("proxy.saving")

# Compare-and-set rounds before a save gives up. A lost round means another writer's save
# went through, so N writers at once all get through within N rounds; the bound and the
# deadline only stop a writer that something keeps overtaking (each round backs off a little).
SAVE_ATTEMPTS = 500
SAVE_DEADLINE_S = 15.0
SAVE_BACKOFF_MAX_S = 0.05
TURNS_KEPT_WHEN_TOO_LARGE = 20
# How long a session's next request waits for the saves before it (they land in a few ms; a
# store held up by another process must not hold up the client's next turn as well: past
# this, the request reads what is stored, and its own save merges with the late one).
SETTLE_WAIT_S = 1.0


class Turn(Protocol):
    """What saving needs of the request whose state it writes (`proxy.turn.session_turn.Turn`)."""

    key: SessionKey
    store: Store
    rb: Rebuild | None
    version: int | None
    saved: bytes | None
    degraded: str | None
    store_errors: int

    def store_failed(self, what: str, exc: StoreError) -> None: ...


def parse_state(data: bytes) -> SessionState | None:
    try:
        return SessionState.from_bytes(data)
    except Exception:  # a corrupt or foreign record must not fail the request
        log.exception("unreadable session state, starting afresh")
        return None


def stored_state(stored: StoredSession) -> SessionState | None:
    """The state of a stored row; None (start afresh) when it cannot be read, its state or
    the row itself (`StoredSession.damaged`: the store logged which). The session's next
    save writes over the row's version, so the damaged row is replaced."""
    return None if stored.damaged else parse_state(stored.data)


def shrink(state: SessionState) -> bool:
    """Make a state smaller for a store's size cap; False when nothing is left to drop."""
    if state.view is not None:
        state.view = None
        return True
    if len(state.turn_log) > TURNS_KEPT_WHEN_TOO_LARGE:
        state.turn_log.keep_last(TURNS_KEPT_WHEN_TOO_LARGE)
        return True
    return False


async def _backoff(attempt: int) -> None:
    """Writers still colliding after a first lost round: spread them out."""
    if attempt:
        await asyncio.sleep(random.uniform(0, min(0.005 * attempt, SAVE_BACKOFF_MAX_S)))


def _hand_on(turn: Turn, version: int | None, state: SessionState) -> None:
    """Leave the state just written, as an object, for the session's next request
    (`proxy.store.cache.CachedStore.keep_decoded`): it then skips decoding the bytes. Only
    for the last save of finished turns: nobody else holds or changes the object."""
    keep = getattr(turn.store, "keep_decoded", None)
    if keep is not None and version is not None:
        keep(turn.key, version, state)


def take_decoded(store: Store, key: SessionKey, version: int) -> SessionState | None:
    """The state a save of this process left for this version (`_hand_on`), or None."""
    take = getattr(store, "take_decoded", None)
    state = take(key, version) if take is not None else None
    return state if isinstance(state, SessionState) else None


async def save_turn(turn: Turn, *, hand_on: bool = False) -> None:
    """Write one turn's state with compare-and-set, merging with a concurrent writer's;
    `hand_on`: the turn is finished, its state may go to the next request as it is."""
    if turn.rb is None or turn.degraded:
        return
    rb = turn.rb
    seal_hidden(rb.state, rb.chain)
    deadline = monotonic() + SAVE_DEADLINE_S
    for attempt in range(SAVE_ATTEMPTS):
        if attempt and monotonic() > deadline:
            break
        data = rb.state.to_bytes()
        if data == turn.saved:
            return  # already stored by this turn
        try:
            turn.version = await turn.store.put(
                turn.key, data, rb.state.meta(len(rb.messages)), expected_version=turn.version
            )
            turn.saved = data
            if hand_on:
                _hand_on(turn, turn.version, rb.state)
            return
        except SessionTooLarge as exc:
            if not shrink(rb.state):
                turn.store_failed("write (state over the size cap)", exc)
                return
            log.info("session state over the store's size cap, saving it smaller")
        except VersionConflict:
            await _backoff(attempt)
            if not await _merge_latest(turn):
                return
        except StoreError as exc:
            turn.store_failed("write", exc)
            return
    log.warning("state not saved: other writers kept overtaking it")


async def _merge_latest(turn: Turn) -> bool:
    """After a lost compare-and-set: merge with the stored state; True to write again."""
    assert turn.rb is not None
    try:
        latest = await turn.store.get(turn.key)
    except StoreError as exc:
        turn.store_failed("re-read after a conflict", exc)
        return False
    if latest is None:  # deleted meanwhile: write ours as a new session
        turn.version = turn.saved = None
        return True
    theirs = stored_state(latest)
    merged = (
        None
        if theirs is None
        else merge_states(turn.rb.state, theirs, turn.rb.chain, turn.rb.originals)
    )
    if theirs is not None and merged is None:
        # The stored state already holds everything this turn knows. The version stays
        # stale on purpose: a later save of this turn must merge again, not overwrite.
        return False
    turn.version, turn.saved = latest.version, latest.data
    if merged is not None:
        # Later saves of this turn build on the merge, so nothing of theirs is undone.
        turn.rb.state = merged
    return True


_UNREAD = object()  # the stored state a fold starts from, when not read (see `fold`)


def fold(
    turns: list[Turn], version: int | None, stored: SessionState | object | None
) -> tuple[SessionState, Turn] | None:
    """The state N saves in a row would leave over the stored `version` (its state `stored`,
    or `_UNREAD`), and the turn whose save made it last; None when they add nothing.

    Each turn saves as `save_turn` would: one that read the version now stored writes its
    own state, one that read an older version merges with what is stored by then. Only the
    first turn, which read `version` itself, can find the stored state unread.
    """
    current: SessionState | object | None = stored
    fresh = True  # `current` is still what the store holds at `version`
    owner: Turn | None = None
    for turn in turns:
        assert turn.rb is not None
        mine = turn.rb.state
        if fresh and (turn.version == version or current is None):
            current, owner, fresh = mine, turn, False
            continue
        assert isinstance(current, SessionState), "a later turn found the stored state unread"
        merged = merge_states(mine, current, turn.rb.chain, turn.rb.originals)
        if merged is not None:
            current, owner, fresh = merged, turn, False
    if owner is None:
        return None
    assert isinstance(current, SessionState)
    return current, owner


async def save_together(turns: list[Turn], *, hand_on: bool = False) -> None:
    """Write several turns' states of one session as one (`fold`), with compare-and-set;
    `hand_on` as for `save_turn` (every turn is finished)."""
    live = [t for t in turns if t.rb is not None and not t.degraded]
    if len(live) <= 1:
        for turn in live:
            await save_turn(turn, hand_on=hand_on)
        return
    for turn in live:
        assert turn.rb is not None
        seal_hidden(turn.rb.state, turn.rb.chain)
    first = live[0]
    version: int | None = first.version
    stored: SessionState | object | None = _UNREAD
    deadline = monotonic() + SAVE_DEADLINE_S
    for attempt in range(SAVE_ATTEMPTS):
        if attempt and monotonic() > deadline:
            break
        folded = fold(live, version, stored)
        if folded is None:
            return  # the stored state holds everything these turns know
        state, owner = folded
        assert owner.rb is not None
        try:
            written, data = await _put(first, state, len(owner.rb.messages), version)
        except VersionConflict:
            await _backoff(attempt)
            try:
                latest = await first.store.get(first.key)
            except StoreError as exc:
                first.store_failed("re-read after a conflict", exc)
                return
            version = None if latest is None else latest.version
            stored = None if latest is None else stored_state(latest)
            continue
        except StoreError as exc:
            first.store_failed("write", exc)
            return
        if written is None:
            return
        # Only the turn whose own state was written may build on this version; the others
        # keep theirs, so a later save of theirs merges with it instead of overwriting.
        if state is owner.rb.state:
            owner.version, owner.saved = written, data
        if hand_on:
            _hand_on(first, written, state)
        return
    log.warning("state not saved: other writers kept overtaking it")


async def _put(
    turn: Turn, state: SessionState, messages: int, version: int | None
) -> tuple[int | None, bytes]:
    """Write `state` over `version`, smaller when over the store's size cap; the version
    written (None when even the smallest state is too large) and the bytes."""
    while True:
        data = state.to_bytes()
        try:
            written = await turn.store.put(
                turn.key, data, state.meta(messages), expected_version=version
            )
            return written, data
        except SessionTooLarge as exc:
            if not shrink(state):
                turn.store_failed("write (state over the size cap)", exc)
                return None, data
            log.info("session state over the store's size cap, saving it smaller")


class SessionWriter:
    """One process's saves, one write in flight per session; saves that arrive meanwhile
    are written together once it is done (`save_together`)."""

    def __init__(self, on_store_error: Callable[[int], None] | None = None) -> None:
        # Told how many store operations failed in saves nobody waited for (their request's
        # log line and metrics were written before they ran).
        self.on_store_error = on_store_error
        self._unawaited: dict[int, int] = {}  # id(turn) -> its store errors when submitted
        self._queued: dict[str, list[Turn]] = {}
        # Per session: resolved once the queued saves are written, and once the saves being
        # written are.
        self._queued_done: dict[str, asyncio.Future[None]] = {}
        self._writing_done: dict[str, asyncio.Future[None]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def submit(self, turn: Turn, *, awaited: bool = False) -> asyncio.Future[None]:
        """Queue the turn's save; the future resolves once it is written (or given up)."""
        if not awaited:
            self._unawaited[id(turn)] = turn.store_errors
        sid = turn.key.id
        queue = self._queued.get(sid)
        if queue is None:
            queue = self._queued[sid] = []
            self._queued_done[sid] = asyncio.get_running_loop().create_future()
        queue.append(turn)
        if sid not in self._tasks:
            self._tasks[sid] = asyncio.create_task(self._run(sid))
        return self._queued_done[sid]

    async def save(self, turn: Turn) -> None:
        """Save and wait for it; a cancelled caller leaves the save to finish."""
        await asyncio.shield(self.submit(turn, awaited=True))

    async def settled(self, session_id: str, wait: float | None = None) -> bool:
        """Wait until the saves of this session submitted so far are written, at most
        `wait` seconds; False when they are still being written."""
        done = self._queued_done.get(session_id) or self._writing_done.get(session_id)
        if done is None:
            return True
        try:
            await asyncio.wait_for(asyncio.shield(done), wait)
        except TimeoutError:
            return False
        return True

    async def idle(self) -> None:
        """Wait until every save submitted so far is written (not the ones submitted
        meanwhile: a session under constant load keeps its writer busy)."""
        pending = [*self._queued_done.values(), *self._writing_done.values()]
        if pending:
            await asyncio.shield(asyncio.gather(*pending))

    def _count_errors(self, turns: list[Turn]) -> None:
        failed = 0
        for turn in turns:
            before = self._unawaited.pop(id(turn), None)
            if before is not None:
                failed += turn.store_errors - before
        if failed and self.on_store_error is not None:
            self.on_store_error(failed)

    async def _run(self, sid: str) -> None:
        try:
            while sid in self._queued:
                turns = self._queued.pop(sid)
                done = self._writing_done[sid] = self._queued_done.pop(sid)
                # Saves nobody waits for are the last of finished turns: their state object
                # may go on to the session's next request.
                finished = all(id(turn) in self._unawaited for turn in turns)
                try:
                    await save_together(turns, hand_on=finished)
                except Exception:  # a bug here must not stop the session's later saves
                    log.exception("saving a session failed")
                finally:
                    done.set_result(None)
                    del self._writing_done[sid]
                    self._count_errors(turns)
        finally:
            del self._tasks[sid]
