"""The embedded default store: one SQLite file (WAL mode), so sessions survive a restart.

A worker thread owns the main connection and runs every statement that may wait, off the event
loop and serialised; it also deletes old sessions (`proxy.store.sqlite_worker`). Two run on the
loop's thread, where the trip through the worker (two thread wake-ups) costs more than they
do (`proxy.store.sqlite_reader`): the read of a session's version on every request's path (a
WAL reader never waits), and the write of a state of up to 256 KB while the write lock is
free (busy timeout 0; the worker checkpoints the WAL). Either goes to the worker when it
cannot answer at once. Compare-and-set is one statement (`UPDATE ... WHERE version = ?`,
`INSERT ... ON CONFLICT DO NOTHING`), atomic even when processes share the file. States of
16 KiB or more are stored padded to a size class, so that SQLite rewrites only the pages a
turn changed (`proxy.store.sqlite_rows`, with the table's schema). Leases have their own
table with a wall-clock expiry; taking one is one upsert that only replaces an expired row
(`proxy.store.sqlite_leases`). A full disk: the store notes whether its writes go through
(`write_failure`, for /readyz), and keeps some space in reserve for deleting sessions
(`proxy.store.sqlite_reserve`).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from pathlib import Path
from typing import Any

import proxy.store.sqlite_leases as leases
from proxy.store.base import (
    DEFAULT_MAX_SESSION_BYTES,
    DEFAULT_TTL_SECONDS,
    SessionInfo,
    SessionKey,
    SessionPage,
    StoredSession,
    StoreError,
    StoreFull,
    VersionConflict,
    WriteHealth,
    check_limit,
    check_size,
    check_ttl,
    decode_cursor,
    encode_cursor,
    encode_meta,
    new_token,
    read_meta,
)
from proxy.store.sqlite_reader import (
    WAL_LIMIT_BYTES,
    InlineReader,
    InlineWriter,
    checkpoint,
    shrink,
)
from proxy.store.sqlite_reserve import release_reserve
from proxy.store.sqlite_rows import LIST_COLUMNS, padded, select
from proxy.store.sqlite_worker import PURGE_EVERY, SQLiteWorker

log = logging.getLogger("proxy.store")

# States up to this size are written from the loop (0.14 ms per 53 KB), larger ones by the worker.
INLINE_WRITE_MAX_BYTES = 256 * 2**10
# How long an idle proxy waits for the worker to drop its page cache (it is idle too).
_RELEASE_WAIT_S = 1.0


class SQLiteStore(SQLiteWorker):
    """Sessions in one SQLite file; `path` may be ":memory:" for a private in-memory db."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_session_bytes: int = DEFAULT_MAX_SESSION_BYTES,
        ttl_seconds: int | None = DEFAULT_TTL_SECONDS,
        read_only: bool = False,
        busy_timeout: float = 5.0,
    ) -> None:
        super().__init__(
            path, ttl_seconds=ttl_seconds, read_only=read_only, busy_timeout=busy_timeout
        )
        self.max_session_bytes = max_session_bytes
        # The checkpoint handed to the worker and not yet done (one at a time). Inline writes go
        # on meanwhile, up to `WAL_LIMIT_BYTES` in the WAL: only its short last part holds the
        # write lock (`checkpoint`), and a write that meets it goes to the worker, after it.
        self._checkpointing: Future[Any] | None = None
        self._health = WriteHealth()
        self._reader = InlineReader(self.path)
        self._writer = InlineWriter(self.path)

    @property
    def where(self) -> str:
        return f"sqlite:///{self.path}"

    # The Store protocol.

    async def get(self, key: SessionKey) -> StoredSession | None:
        found = await self._run(lambda conn: select(conn, key.id))
        return found if found is not None and found.key == key else None

    async def get_by_id(self, session_id: str) -> StoredSession | None:
        return await self._run(lambda conn: select(conn, session_id))

    async def version(self, key: SessionKey) -> int | None:
        sql = "SELECT version, tenant, session FROM sessions WHERE id = ?"

        def answer(row: Any) -> int | None:
            if row is None or SessionKey(row[1], row[2]) != key:
                return None
            return int(row[0])

        if self._conn is not None and not self._closed:  # the schema exists
            answered, row = self._reader.fetchone(sql, (key.id,))
            if answered:
                return answer(row)
        return await self._run(lambda conn: answer(conn.execute(sql, (key.id,)).fetchone()))

    def outside_writes(self) -> int | None:
        """Commits by others seen so far (`InlineWriter.outside_writes`): while it reads the
        same, what this process last read or wrote is still stored, and `proxy.store.cache`
        skips the version read. None when it cannot tell."""
        if self._conn is None or self._closed or self.read_only:
            return None
        return self._writer.outside_writes()

    def outside_seen(self) -> int | None:
        return None if self._closed or self.read_only else self._writer.outside_seen()

    async def put(
        self,
        key: SessionKey,
        data: bytes,
        meta: dict[str, Any],
        *,
        expected_version: int | None,
        updated_at: float | None = None,
    ) -> int:
        try:
            version = await self._put(key, data, meta, expected_version, updated_at)
        except StoreError as exc:
            self._health.note(exc)
            raise
        self._health.note(None)
        return version

    async def _put(
        self,
        key: SessionKey,
        data: bytes,
        meta: dict[str, Any],
        expected_version: int | None,
        updated_at: float | None,
    ) -> int:
        check_size(data, self.max_session_bytes)
        meta_json = encode_meta(meta)
        size, stored = len(data), padded(data, self.max_session_bytes)

        def write(conn: sqlite3.Connection) -> int:
            now = time.time() if updated_at is None else updated_at
            if expected_version is None:
                cur = conn.execute(
                    "INSERT INTO sessions"
                    " (id, tenant, session, data, meta, version, updated_at, size, size_of)"
                    " VALUES (?, ?, ?, ?, ?, 1, ?, ?, 1) ON CONFLICT (id) DO NOTHING",
                    (key.id, key.tenant, key.session, stored, meta_json, now, size),
                )
            else:
                cur = conn.execute(
                    "UPDATE sessions SET data = ?, meta = ?, version = version + 1,"
                    " updated_at = ?, size = ?, size_of = version + 1"
                    " WHERE id = ? AND version = ?",
                    (stored, meta_json, now, size, key.id, expected_version),
                )
            if cur.rowcount != 1:
                row = conn.execute(
                    "SELECT version FROM sessions WHERE id = ?", (key.id,)
                ).fetchone()
                found = None if row is None else row[0]
                raise VersionConflict(f"expected version {expected_version}, found {found}")
            self._purge(conn)
            return 1 if expected_version is None else expected_version + 1

        if self._inline_write_allowed(len(data)):
            written, version = self._writer.run(write, len(data))
            if written and version is not None:
                if self._held_up:  # a write got through: the worker waits in full again
                    self._executor.submit(self._call, self._lock_freed)
                if not self._checkpoint_running() and self._writer.checkpoint_due():
                    # the WAL, copied off the loop
                    self._checkpointing = self._executor.submit(self._call, checkpoint)
                return version
        return await self._run(write)

    def _checkpoint_running(self) -> bool:
        return self._checkpointing is not None and not self._checkpointing.done()

    def _inline_write_allowed(self, size: int) -> bool:
        """A small state, a store the worker has opened (the schema exists), no purge due
        (the worker runs it, with the next write it is given), and unless a checkpoint is
        running, a WAL under `WAL_LIMIT_BYTES`."""
        purge_due = self.ttl_seconds is not None and time.time() - self._purged_at >= PURGE_EVERY
        if self._checkpoint_running():
            held = self._writer.wal_bytes()
            if held is None or held >= WAL_LIMIT_BYTES:
                return False
        return (
            size <= INLINE_WRITE_MAX_BYTES
            and self._conn is not None
            and not (self.read_only or self._closed or purge_due)
        )

    async def delete(self, key: SessionKey) -> bool:
        def remove(conn: sqlite3.Connection) -> bool:
            cur = conn.execute("DELETE FROM sessions WHERE id = ?", (key.id,))
            return cur.rowcount > 0

        try:
            try:
                removed = await self._run(remove)
            except StoreFull:
                if not release_reserve(self.path):
                    raise
                log.warning("disk full: the space held in reserve is freed to delete sessions")
                removed = await self._run(remove)
        except StoreError as exc:
            self._health.note(exc)
            raise
        self._health.note(None)
        return removed

    async def list(
        self,
        *,
        tenant: str | None = None,
        updated_after: float | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> SessionPage:
        check_limit(limit)
        where: list[str] = []
        args: list[Any] = []
        if tenant is not None:
            where.append("tenant = ?")
            args.append(tenant)
        if updated_after is not None:
            where.append("updated_at > ?")
            args.append(updated_after)
        if cursor is not None:
            stamp, last_id = decode_cursor(cursor)
            where.append("(updated_at < ? OR (updated_at = ? AND id < ?))")
            args += [stamp, stamp, last_id]
        sql = f"SELECT {LIST_COLUMNS} FROM sessions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY updated_at DESC, id DESC LIMIT ?"
        args.append(limit + 1)
        rows = await self._run(lambda conn: conn.execute(sql, args).fetchall())
        page = rows[:limit]
        infos = [
            SessionInfo(SessionKey(t, s), sid, meta, v, u, size)
            for sid, t, s, m, v, u, size in page
            if (meta := read_meta(m, sid)) is not None  # a damaged row is left out
        ]
        more = len(rows) > limit
        next_cursor = encode_cursor(page[-1][5], page[-1][0]) if more else None
        return infos, next_cursor

    async def count(self) -> int:
        row = await self._run(lambda conn: conn.execute("SELECT count(*) FROM sessions").fetchone())
        return int(row[0])

    async def acquire(self, key: SessionKey, ttl_s: float) -> str | None:
        token = new_token()
        taken = await self._run(partial(leases.take, lease_id=key.id, token=token, ttl=_ttl(ttl_s)))
        return token if taken else None

    async def renew(self, key: SessionKey, token: str, ttl_s: float) -> bool:
        return await self._run(
            partial(leases.extend, lease_id=key.id, token=token, ttl=_ttl(ttl_s))
        )

    async def release(self, key: SessionKey, token: str) -> None:
        await self._run(partial(leases.drop, lease_id=key.id, token=token))

    async def lease_left(self, key: SessionKey) -> float | None:
        return await self._run(partial(leases.left, lease_id=key.id))

    async def ping(self) -> bool:
        try:
            await self._run(lambda conn: conn.execute("SELECT 1").fetchone())
        except StoreError:
            return False
        return True

    async def write_failure(self) -> str | None:
        """None while writes go through (a read-only store: always), else why they fail."""
        if self.read_only:
            return None
        return await self._health.check(lambda: self._run(leases.probe))

    def release_memory(self) -> None:
        """Empty both connections' page caches (up to 2 MiB each by SQLite's default, filled
        with the pages a burst of writes touched); the next reads come from the OS's cache."""
        self._reader.release_memory()
        self._writer.close()  # reopened by the next write, with an empty page cache
        if self._closed or self._conn is None:
            return
        try:
            self._executor.submit(self._call, shrink).result(timeout=_RELEASE_WAIT_S)
        except (FutureTimeout, RuntimeError, sqlite3.Error, OSError):
            pass  # busy, or closing: the next lull tries again

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._reader.close()
        self._writer.close()

        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, shut)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store {self.path}: {exc}") from exc
        finally:
            self._executor.shutdown(wait=False)


def _ttl(ttl_s: float) -> float:
    return check_ttl(ttl_s) / 1000  # whole milliseconds, at least one
