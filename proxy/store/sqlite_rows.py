"""The SQLite store's sessions table: its schema, the columns added since it was first
created, and the padding of the states it holds.

A state of `PAD_FROM_BYTES` or more is stored padded with spaces to a size class (`padded`),
so that a turn that adds to it keeps the row's size and SQLite overwrites it in place, writing
only the pages that changed instead of the whole row. The `size` column says how much of the
row is the state, for the version in `size_of`: a writer that does not know the columns (an
older version sharing the file) leaves them as they were, and its row is read whole (JSON
allows trailing spaces anyway).
"""

from __future__ import annotations

import sqlite3

from proxy.store.base import SessionKey, StoredSession, damaged_row, read_meta

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    data BLOB NOT NULL,
    meta TEXT NOT NULL,
    version INTEGER NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_time ON sessions (updated_at, id);
CREATE INDEX IF NOT EXISTS sessions_by_tenant ON sessions (tenant, updated_at, id);
CREATE TABLE IF NOT EXISTS leases (
    id TEXT PRIMARY KEY,
    token TEXT NOT NULL,
    expires REAL NOT NULL
) WITHOUT ROWID;
"""
# Columns added since the table was first created: (name, type), each added when missing.
ADDED_COLUMNS = (("size", "INTEGER"), ("size_of", "INTEGER"))
SCHEMA_VERSION = 3

STORED_SIZE = "CASE WHEN size_of = version THEN size ELSE length(data) END"
# The metadata as bytes: text that is not UTF-8 is then a damaged row (`read_meta`), not an
# error of the whole query.
META = "CAST(meta AS BLOB)"
LIST_COLUMNS = f"id, tenant, session, {META}, version, updated_at, {STORED_SIZE}"
# States from this size on are stored padded (`padded`).
PAD_FROM_BYTES = 16 * 2**10


def padded(data: bytes, limit: int | None = None) -> bytes:
    """`data` followed by spaces up to its size class: the next size of the form m * 2^k with
    8 <= m < 16 (at most 1/8 more, never past `limit`). States of a session that grow by a
    turn's record keep their class for dozens of turns, and SQLite overwrites a row of the
    same size in place, page by page, skipping the pages whose bytes did not change (a 50 KB
    session's 81 KB state: about 5 pages written to the WAL a turn instead of 27)."""
    size = len(data)
    if size < PAD_FROM_BYTES:
        return data
    step = 1 << (size.bit_length() - 4)  # an eighth of the power of two at or below size
    target = -(-size // step) * step
    if limit is not None:
        target = min(target, max(size, limit))
    return data + b" " * (target - size)


def add_columns(conn: sqlite3.Connection) -> None:
    """Bring a table created by an earlier version up to this one's columns (a concurrent
    process may add them first)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
    for name, kind in ADDED_COLUMNS:
        if name not in have:
            try:
                conn.execute(f"ALTER TABLE sessions ADD COLUMN {name} {kind}")
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):
                    raise
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def select(conn: sqlite3.Connection, session_id: str) -> StoredSession | None:
    row = conn.execute(
        f"SELECT tenant, session, data, {META}, version, updated_at, size, size_of"
        " FROM sessions WHERE id = ?",
        (session_id,),
    ).fetchone()
    if row is None:
        return None
    tenant, session, data, meta, version, updated_at, size, size_of = row
    state = data[:size] if size is not None and size_of == version else data  # not the padding
    key = SessionKey(tenant, session)
    decoded = read_meta(meta, session_id)
    if decoded is None:
        return damaged_row(key, bytes(state), version, updated_at)
    return StoredSession(key, bytes(state), decoded, version, updated_at)


__all__ = ["LIST_COLUMNS", "PAD_FROM_BYTES", "SCHEMA", "add_columns", "padded", "select"]
