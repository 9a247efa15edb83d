"""The SQLite store's inline connections, used from the event loop's thread directly.

- `InlineReader`: a read-only connection, so that checking a session's version never waits
  for the worker thread (WAL readers do not wait for a writer).
- `InlineWriter`: a connection that writes a small state in place of the worker thread, whose
  two thread hops cost more than the write itself (0.14 ms for a 53 KB state; the hops 0.2-0.45
  ms of CPU a request on a busy machine). It never waits: busy_timeout 0, so when another
  connection holds the write lock the caller asks the worker, which waits; and no automatic
  checkpoint, so the WAL is copied back by the worker, off the loop (`checkpoint_due`), once
  it holds 4 MB: read from the WAL index, since a state overwritten in place adds only the
  pages it changed (`proxy.store.sqlite_rows.padded`), or counted from the states' sizes
  where the index cannot be read.
"""

from __future__ import annotations

import os
import sqlite3
import struct
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote

T = TypeVar("T")


def shrink(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA shrink_memory")


class _LoopConnection:
    """A connection of the event loop's thread: opened on first use, used from that thread
    only, never on an in-memory database (private to the worker's connection)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._thread: int | None = None

    def _usable(self) -> bool:
        if self.path == ":memory:":
            return False
        if self._thread is None:
            self._thread = threading.get_ident()
        return self._thread == threading.get_ident()

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
            self._conn = None


class InlineReader(_LoopConnection):
    """A read-only connection used on one thread only (the event loop's), that never waits.

    `fetchone` answers (True, row), or (False, None) when the caller should ask the worker:
    an in-memory database, a call from another thread, a busy database or any error.
    """

    def fetchone(self, sql: str, args: tuple[Any, ...]) -> tuple[bool, Any]:
        if not self._usable():
            return False, None
        try:
            if self._conn is None:
                self._conn = sqlite3.connect(
                    f"file:{quote(self.path)}?mode=ro",
                    uri=True,
                    timeout=0,  # busy: let the worker wait instead
                    isolation_level=None,
                    check_same_thread=False,  # closed from whichever thread closes the store
                )
            return True, self._conn.execute(sql, args).fetchone()
        except sqlite3.Error:
            self.close()
            return False, None

    def release_memory(self) -> None:
        """Drop the page cache; from the loop's thread only, like every other use."""
        if self._conn is not None and self._thread == threading.get_ident():
            try:
                shrink(self._conn)
            except sqlite3.Error:
                self.close()


# Bytes written inline before the worker is asked to checkpoint the WAL (SQLite's own
# automatic checkpoint comes at 1,000 pages, about 4 MB).
CHECKPOINT_BYTES = 4 * 2**20
# While a checkpoint runs, inline writes go on until the WAL holds this much; then they go to
# the worker, after it, so that writes faster than it can finish do not grow the WAL further.
WAL_LIMIT_BYTES = CHECKPOINT_BYTES * 3 // 2
# The WAL index (the "-shm" file) begins with its header: `mxFrame`, the frames the WAL holds
# since it last started over, is the native-endian u32 at offset 16 (sqlite.org/walformat.html).
_MX_FRAME = struct.Struct("=I")
_MX_FRAME_AT = 16
_FRAME_BYTES = 4096 + 24  # a default page and its frame header


def wal_frames(fd: int) -> int | None:
    """The frames of the WAL whose index `fd` is open on; None when it cannot be read."""
    try:
        raw = os.pread(fd, _MX_FRAME.size, _MX_FRAME_AT)
    except OSError:
        return None
    return _MX_FRAME.unpack(raw)[0] if len(raw) == _MX_FRAME.size else None


class InlineWriter(_LoopConnection):
    """A read-write connection used on one thread only (the event loop's), that never waits.

    `run(fn)` answers (True, fn's result), or (False, None) when the caller should ask the
    worker: an in-memory database, a call from another thread, a write lock held by another
    connection, or any other SQLite error (the worker then reports it). Errors that are not
    SQLite's (a compare-and-set conflict) go to the caller.
    """

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._since_checkpoint = 0
        # `PRAGMA data_version` as last read on this connection (None: not read on it yet),
        # and how many times it was seen to change (see `outside_writes`).
        self._data_version: int | None = None
        self._outside = 0
        self._index: int | None = None  # the WAL index, read-only (`checkpoint_due`)
        self._asked = False  # a checkpoint was asked for this WAL already

    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(
                self.path, timeout=0, isolation_level=None, check_same_thread=False
            )
            self._conn = conn  # closed from whichever thread closes the store
            self._data_version = None  # a new connection's count starts afresh
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        return self._conn

    def run(self, fn: Callable[[sqlite3.Connection], T], size: int) -> tuple[bool, T | None]:
        if not self._usable():
            return False, None
        try:
            result = fn(self._open())
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):  # a held lock leaves the connection as it was
                self.close()
            return False, None
        except sqlite3.Error:
            self.close()
            return False, None
        self._since_checkpoint += size
        return True, result

    def outside_writes(self) -> int | None:
        """How many times a commit by another connection (another process's, or the store's
        worker) was seen, from `PRAGMA data_version`: the same number twice means nobody else
        wrote in between. A reopened connection counts as a change. None when this connection
        cannot tell."""
        if not self._usable():
            return None
        try:
            version = int(self._open().execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            self.close()
            return None
        if version != self._data_version:
            self._data_version = version
            self._outside += 1
        return self._outside

    def outside_seen(self) -> int | None:
        """`outside_writes` as last seen, without looking again."""
        return self._outside if self._data_version is not None else None

    def checkpoint_due(self) -> bool:
        """True once the WAL holds `CHECKPOINT_BYTES`; then again only when it did not start
        over after that checkpoint and holds `WAL_LIMIT_BYTES`, or as much more was written
        (a checkpoint that another process's reader held back, or that could not restart
        the WAL). Where the WAL index cannot be read, each time that much was written. The
        caller asks for one checkpoint at a time."""
        held = self.wal_bytes()
        if held is None:
            due = self._since_checkpoint >= CHECKPOINT_BYTES
        elif held < CHECKPOINT_BYTES:
            self._asked = False  # a WAL started over since
            return False
        else:
            again = held >= WAL_LIMIT_BYTES or self._since_checkpoint >= CHECKPOINT_BYTES
            due = not self._asked or again
        if due:
            self._since_checkpoint = 0
            self._asked = True
        return due

    def wal_bytes(self) -> int | None:
        """What the WAL holds since it last started over, from its index; None when unknown."""
        if self._index is None and sys.platform != "win32":
            try:
                self._index = os.open(f"{self.path}-shm", os.O_RDONLY)
            except OSError:
                return None
        frames = None if self._index is None else wal_frames(self._index)
        return None if frames is None else frames * _FRAME_BYTES

    def close(self) -> None:
        super().close()
        if self._index is not None:
            try:
                os.close(self._index)
            except OSError:
                pass
            self._index = None


def checkpoint(conn: sqlite3.Connection) -> None:
    """Copy the WAL back, then have the next write start it over. PASSIVE first, which lets
    the loop's inline writes go on while it copies and syncs (1.7-2 ms for a WAL of 150 turns
    here); then RESTART, which holds the write lock (an inline write that meets it goes to the
    worker, after it) but has only what was written meanwhile left to copy (0.3-0.5 ms). A
    passive checkpoint alone would never catch up with steady writes, and the WAL would grow
    with every one."""
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()


__all__ = ["WAL_LIMIT_BYTES", "InlineReader", "InlineWriter", "checkpoint", "shrink"]
