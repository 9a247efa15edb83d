"""The SQLite store's lease statements, each run on the store's worker connection.

A lease is a row of the `leases` table with a wall-clock expiry (processes on one machine
share the clock): taking one is one upsert that only replaces an expired row, so it is atomic
even when several processes share the file. `probe` writes a large row there and removes it
again, to learn whether writes go through (`proxy.store.base.WriteHealth`).
"""

from __future__ import annotations

import sqlite3
from time import time as wall_clock


def take(conn: sqlite3.Connection, lease_id: str, token: str, ttl: float) -> bool:
    """Take the lease for `ttl` seconds unless someone holds it unexpired."""
    now = wall_clock()
    cur = conn.execute(
        "INSERT INTO leases (id, token, expires) VALUES (?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET token = excluded.token,"
        " expires = excluded.expires WHERE leases.expires <= ?",
        (lease_id, token, now + ttl, now),
    )
    return cur.rowcount == 1


def extend(conn: sqlite3.Connection, lease_id: str, token: str, ttl: float) -> bool:
    """Keep the lease `ttl` seconds more, if `token` still holds it."""
    now = wall_clock()
    cur = conn.execute(
        "UPDATE leases SET expires = ? WHERE id = ? AND token = ? AND expires > ?",
        (now + ttl, lease_id, token, now),
    )
    return cur.rowcount == 1


def drop(conn: sqlite3.Connection, lease_id: str, token: str) -> None:
    conn.execute("DELETE FROM leases WHERE id = ? AND token = ?", (lease_id, token))


def left(conn: sqlite3.Connection, lease_id: str) -> float | None:
    """Seconds the lease has left, None when nobody holds it."""
    row = conn.execute("SELECT expires FROM leases WHERE id = ?", (lease_id,)).fetchone()
    remaining = None if row is None else float(row[0]) - wall_clock()
    return remaining if remaining is not None and remaining > 0 else None


# The probe's row: its id is never a session's (22 URL-safe characters), its size a state's.
PROBE_ID = "\0probe"
PROBE_BYTES = 64 * 2**10


def probe(conn: sqlite3.Connection) -> None:
    """Write a row of `PROBE_BYTES` and remove it, in one transaction: it needs new pages and
    WAL space as a session's write does, so it fails as that would when the database or its
    disk is full, and leaves nothing behind."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "INSERT OR REPLACE INTO leases (id, token, expires) VALUES (?, zeroblob(?), 0)",
            (PROBE_ID, PROBE_BYTES),
        )
        conn.execute("DELETE FROM leases WHERE id = ?", (PROBE_ID,))
        conn.execute("COMMIT")
    finally:
        if conn.in_transaction:  # SQLite may have rolled it back already
            conn.execute("ROLLBACK")
