"""The SQLite store's inline reader: a read-only connection the event loop reads from
directly, so that checking a session's version never waits for the worker thread (WAL
readers do not wait for a writer)."""

from __future__ import annotations

import sqlite3
import threading
from typing import Any
from urllib.parse import quote


def shrink(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA shrink_memory")


class InlineReader:
    """A read-only connection used on one thread only (the event loop's), that never waits.

    `fetchone` answers (True, row), or (False, None) when the caller should ask the worker:
    an in-memory database (private to the worker's connection), a call from another thread,
    a busy database or any error.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._thread: int | None = None

    def fetchone(self, sql: str, args: tuple[Any, ...]) -> tuple[bool, Any]:
        if self.path == ":memory:":
            return False, None
        if self._thread is None:
            self._thread = threading.get_ident()
        elif self._thread != threading.get_ident():
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

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
            self._conn = None


__all__ = ["InlineReader", "shrink"]
