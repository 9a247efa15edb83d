"""Bounds on summaries written ahead across the process's sessions (issue 34).

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
