"""Bounds on summaries written ahead across the process's sessions (issue 34).

- `AheadTasks`: the process's summaries in flight, one per session, with the two bounds
  below and each model's last summary time.

- `Share`: how many summaries written ahead may wait on the upstream at once. They share the
  upstream connection pool with the clients' requests; a summary model that hangs would
  otherwise hold a connection per session until the pool is full and clients get the
  proxy's 503. A summary over the share is not started: the session's next turn asks again.
  Its request also never waits for a pool connection (`proxy.upstream.pool.BACKGROUND`): a
  full pool defers it, never a client's request.
- `Backoff`: after a summary written ahead failed, the session's next tries are spaced out,
  1, 2, 4 and then at most `BACKOFF_CAP_TURNS` turns apart, so a summary model that is down
  is not asked again on every turn of every session; a summary that came back resets it, and
  a short outage leaves the session without its summary for at most that many turns more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

# Turns a session skips, at most, between two tries after failures in a row.
BACKOFF_CAP_TURNS = 8
# Sessions whose failures are remembered (the oldest are forgotten first).
SESSIONS_KEPT = 4096


def share_of(pool_limit: int, setting: int | None) -> int:
    """The summaries written ahead in flight at once: the setting, else a quarter of the
    upstream connections (at least one)."""
    if setting is not None:
        return setting
    return max(1, pool_limit // 4)


class Share:
    """A count of the summaries in flight against their limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running = 0

    def take(self) -> bool:
        """One more in flight, unless the share is full."""
        if self.running >= self.limit:
            return False
        self.running += 1
        return True

    def give(self) -> None:
        self.running = max(0, self.running - 1)


class Backoff:
    """Per session: the failures in a row, and the turns still to skip before the next try."""

    def __init__(self, cap: int = BACKOFF_CAP_TURNS, kept: int = SESSIONS_KEPT) -> None:
        self.cap = cap
        self.kept = kept
        self._sessions: dict[str, tuple[int, int]] = {}  # id -> (failures, turns to skip)

    def wait(self, session_id: str) -> bool:
        """Whether this turn of the session skips its try (it is counted as skipped)."""
        entry = self._sessions.get(session_id)
        if entry is None or entry[1] <= 0:
            return False
        self._sessions[session_id] = (entry[0], entry[1] - 1)
        return True

    def failed(self, session_id: str) -> None:
        failures = self._sessions.pop(session_id, (0, 0))[0] + 1
        self._sessions[session_id] = (failures, min(self.cap, 2 ** (failures - 1)))
        while len(self._sessions) > self.kept:
            del self._sessions[next(iter(self._sessions))]

    def succeeded(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)


Count = Callable[[str], None]


class AheadTasks:
    """The process's summaries in flight, one per session; dropped at shutdown.

    `count(outcome)` feeds the metric: started, ready, used, unused, waiting (a turn that
    would have summarised went up without), busy (another replica writes it), failed,
    deferred (the share of the upstream pool was full, `proxy.turn.summary_ahead_limits`),
    backoff (a turn that skipped its try after failures).
    """

    def __init__(self, count: Count | None = None, share: int = 1 << 30) -> None:
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.count: Count = count or (lambda outcome: None)
        self.share = Share(share)  # summaries waiting on the upstream at once, at most
        self.backoff = Backoff()
        # How long the last summary of each model took here: a session's first summary
        # starts as far ahead as that needs (the session's own is kept in its state).
        self.seconds: dict[str, float] = {}

    def busy(self, session_id: str) -> bool:
        task = self.tasks.get(session_id)
        return task is not None and not task.done()

    def start(self, session_id: str, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks[session_id] = task
        task.add_done_callback(lambda t: self._done(session_id, t))

    def _done(self, session_id: str, task: asyncio.Task[None]) -> None:
        if self.tasks.get(session_id) is task:
            del self.tasks[session_id]

    async def idle(self) -> None:
        """Wait for the summaries in flight (tests)."""
        while self.tasks:
            await asyncio.wait(list(self.tasks.values()))

    async def close(self) -> None:
        """Drop the summaries in flight: a restart loses them, nothing half-written stays."""
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self.tasks.clear()
