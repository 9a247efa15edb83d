"""The SQLite store's worker thread: it owns the main connection, opens it (WAL mode, the
schema, the disk reserve), runs every statement that may wait, and deletes sessions not
written for `ttl_seconds` (and expired leases) when it connects and then at most once an hour.

The standard library's `sqlite3` blocks, so every such statement runs here, off the event loop
and serialised; its errors become `StoreError` (`StoreFull` on a full disk).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

from proxy.store.base import StoreError, StoreFull
from proxy.store.sqlite_reserve import make_reserve
from proxy.store.sqlite_rows import SCHEMA, add_columns

T = TypeVar("T")

PURGE_EVERY = 3600.0
# Once a write has waited out the busy timeout (another process holds the database), the next
# ones wait this long only, until one gets through: a held lock costs one request the full
# wait, not every request while it lasts.
_HELD_UP_TIMEOUT_S = 0.1


class SQLiteWorker:
    """The worker thread and the connection it owns; `SQLiteStore` builds on it."""

    def __init__(
        self, path: str | Path, *, ttl_seconds: int | None, read_only: bool, busy_timeout: float
    ) -> None:
        self.path = str(path)
        self.ttl_seconds = ttl_seconds
        self.read_only = read_only
        self.busy_timeout = busy_timeout
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="xun-sqlite")
        # Touched only from the worker thread.
        self._conn: sqlite3.Connection | None = None
        self._purged_at = 0.0
        self._held_up = False  # the last write timed out on a lock: wait briefly only
        self._closed = False

    # Plumbing: every call goes through the worker thread, errors become StoreError.

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StoreError("the SQLite store is closed")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._call, fn)
        except (sqlite3.Error, OSError) as exc:
            full = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
            error = StoreFull if full else StoreError
            raise error(f"SQLite store {self.path}: {exc}") from exc

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._conn is None:
            self._conn = self._connect()
            self._held_up = False
        conn = self._conn
        changes = conn.total_changes
        try:
            result = fn(conn)
        except sqlite3.OperationalError as exc:
            if not self._held_up and "locked" in str(exc):
                self._held_up = True
                self._set_busy_timeout(conn, _HELD_UP_TIMEOUT_S)
            raise
        if self._held_up and conn.total_changes != changes:  # a write got through
            self._held_up = False
            self._set_busy_timeout(conn, self.busy_timeout)
        return result

    @staticmethod
    def _set_busy_timeout(conn: sqlite3.Connection, seconds: float) -> None:
        conn.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            target, uri = f"file:{quote(self.path)}?mode=ro", True
        else:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            target, uri = self.path, False
        conn = sqlite3.connect(
            target,
            uri=uri,
            timeout=self.busy_timeout,
            isolation_level=None,  # autocommit: each statement is its own transaction
            check_same_thread=False,
        )
        try:
            self._set_busy_timeout(conn, self.busy_timeout)
            if not self.read_only:
                if self.path != ":memory:":
                    make_reserve(self.path)  # room to delete sessions on a full disk
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.executescript(SCHEMA)
                add_columns(conn)
                self._purge(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _purge(self, conn: sqlite3.Connection) -> None:
        now = time.time()
        if self.ttl_seconds is not None and now - self._purged_at >= PURGE_EVERY:
            conn.execute("DELETE FROM sessions WHERE updated_at < ?", (now - self.ttl_seconds,))
            conn.execute("DELETE FROM leases WHERE expires < ?", (now,))
            self._purged_at = now

    def _lock_freed(self, conn: sqlite3.Connection) -> None:
        if self._held_up:
            self._held_up = False
            self._set_busy_timeout(conn, self.busy_timeout)
