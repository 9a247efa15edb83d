"""SQLite-specific behaviour: persistence, WAL, retention and failures surfacing as StoreError."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proxy.store import (
    SessionKey,
    SessionTooLarge,
    StoreError,
    StoreFull,
    VersionConflict,
    open_store,
    sqlite_reader,
)
from proxy.store.sqlite import SQLiteStore
from proxy.store.sqlite_reserve import RESERVE_BYTES, release_reserve, reserve_path
from tests.store.conftest import FullSQLite

KEY = SessionKey("tenant", "session")


async def test_sessions_survive_close_and_reopen(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nested' / 'dirs' / 'sessions.db'}"
    store = open_store(url)
    await store.put(KEY, b"kept", {"messages": 2}, expected_version=None)
    await store.put(KEY, b"kept v2", {"messages": 4}, expected_version=1)
    await store.close()

    reopened = open_store(url)
    try:
        got = await reopened.get(KEY)
        assert got is not None
        assert (got.data, got.meta, got.version) == (b"kept v2", {"messages": 4}, 2)
        assert await reopened.get_by_id(KEY.id) == got
        assert await reopened.put(KEY, b"v3", {}, expected_version=2) == 3
    finally:
        await reopened.close()


async def test_wal_mode_and_indexes(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    store = SQLiteStore(path)
    await store.put(KEY, b"x", {}, expected_version=None)
    await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(sessions)")}
    conn.close()
    assert {"sessions_by_time", "sessions_by_tenant"} <= indexes


async def test_read_only_mode_reads_but_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    writer = SQLiteStore(path)
    await writer.put(KEY, b"x", {}, expected_version=None)
    await writer.close()
    reader = open_store(f"sqlite:///{path}?mode=ro")
    try:
        got = await reader.get(KEY)
        assert got is not None and got.data == b"x"
        with pytest.raises(StoreError, match="readonly") as info:
            await reader.put(KEY, b"y", {}, expected_version=1)
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        assert await reader.ping() is True
    finally:
        await reader.close()


ROOT = Path(__file__).resolve().parents[2]
READ_ONLY_CHECK = """
import asyncio, sys
from proxy.store.base import SessionKey, StoreError
from proxy.store import sqlite_reader
from proxy.store.sqlite import SQLiteStore

async def main() -> int:
    store = SQLiteStore(sys.argv[1])
    try:
        await store.put(SessionKey("t", "s"), b"y", {}, expected_version=1)
    except StoreError:
        return 0
    finally:
        await store.close()
    return 1

sys.exit(asyncio.run(main()))
"""


def test_read_only_file_is_a_store_error(tmp_path: Path) -> None:
    # File permissions do not bind root, and the tests run as root in CI: then the writer is
    # a child process without the capabilities that let root write anyway (util-linux setpriv).
    path = tmp_path / "sessions.db"

    async def create() -> None:
        writer = SQLiteStore(path)
        await writer.put(SessionKey("t", "s"), b"x", {}, expected_version=None)
        await writer.close()

    asyncio.run(create())
    path.chmod(0o444)
    tmp_path.chmod(0o555)  # no journal next to it either
    command = [sys.executable, "-c", READ_ONLY_CHECK, str(path)]
    if os.geteuid() == 0:
        command = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", *command]
    try:
        child = subprocess.run(command, capture_output=True, timeout=60, cwd=ROOT)
    finally:
        tmp_path.chmod(0o755)
    assert child.returncode == 0, child.stderr.decode()


async def test_locked_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    store = SQLiteStore(path, busy_timeout=0.05)
    await store.put(KEY, b"x", {}, expected_version=None)
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreError, match="locked"):
            await store.put(KEY, b"y", {}, expected_version=1)
        blocker.execute("ROLLBACK")
        assert await store.put(KEY, b"y", {}, expected_version=1) == 2  # recovers
    finally:
        blocker.close()
        await store.close()


async def test_a_held_lock_costs_the_full_busy_timeout_once(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    store = SQLiteStore(path, busy_timeout=1.0)
    await store.put(KEY, b"x", {}, expected_version=None)
    blocker = sqlite3.connect(path, isolation_level=None)

    async def failing_put() -> float:
        started = time.monotonic()
        with pytest.raises(StoreError, match="locked"):
            await store.put(KEY, b"y", {}, expected_version=1)
        return time.monotonic() - started

    async def busy_ms() -> int:
        """The busy timeout the store's connection waits with now (not a clock's reading)."""
        return int(await store._run(lambda c: c.execute("PRAGMA busy_timeout").fetchone()[0]))

    try:
        assert await busy_ms() == 1000
        blocker.execute("BEGIN EXCLUSIVE")
        assert await failing_put() >= 0.9  # the whole busy timeout (a lower bound: no flake)
        for _ in range(3):  # then only briefly while the lock stays
            assert await busy_ms() == 100
            with pytest.raises(StoreError, match="locked"):
                await store.put(KEY, b"y", {}, expected_version=1)
        assert await busy_ms() == 100
        assert await store.version(KEY) == 1  # reads never waited
        blocker.execute("ROLLBACK")
        assert await store.put(KEY, b"y", {}, expected_version=1) == 2
        assert await busy_ms() == 1000  # a write got through: the full timeout again
        blocker.execute("BEGIN EXCLUSIVE")
        started = time.monotonic()
        with pytest.raises(StoreError, match="locked"):
            await store.put(KEY, b"z", {}, expected_version=2)
        assert time.monotonic() - started >= 0.9
    finally:
        blocker.close()
        await store.close()


async def test_unusable_path_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    store = SQLiteStore(tmp_path / "a-file" / "sessions.db")
    try:
        with pytest.raises(StoreError):
            await store.get(KEY)
        assert await store.ping() is False
    finally:
        await store.close()


async def test_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    path.write_bytes(b"this is not a database file" * 100)
    store = SQLiteStore(path)
    try:
        with pytest.raises(StoreError):
            await store.put(KEY, b"x", {}, expected_version=None)
        assert await store.ping() is False
    finally:
        await store.close()


async def test_closed_store_raises_store_error(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sessions.db")
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        await store.get(KEY)
    assert await store.ping() is False


async def test_sessions_past_their_ttl_are_purged_on_open(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    store = SQLiteStore(path, ttl_seconds=3600)
    await store.put(KEY, b"old", {}, expected_version=None)
    await store.put(SessionKey("tenant", "fresh"), b"new", {}, expected_version=None)
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE sessions SET updated_at = 0 WHERE id = ?", (KEY.id,))
    conn.close()

    kept = SQLiteStore(path, ttl_seconds=None)
    assert await kept.count() == 2  # no ttl: nothing is purged
    await kept.close()
    purged = SQLiteStore(path, ttl_seconds=3600)
    try:
        assert await purged.get(KEY) is None
        assert await purged.count() == 1
    finally:
        await purged.close()


async def test_in_memory_sqlite(tmp_path: Path) -> None:
    store = open_store("sqlite:///:memory:")
    try:
        await store.put(KEY, b"x", {}, expected_version=None)
        assert await store.count() == 1
    finally:
        await store.close()


async def test_version_is_read_without_waiting_for_the_writer_thread(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sessions.db")
    await store.put(KEY, b"x", {}, expected_version=None)
    release = asyncio.Event()
    loop = asyncio.get_running_loop()
    busy = loop.run_in_executor(
        store._executor, lambda: asyncio.run_coroutine_threadsafe(release.wait(), loop).result()
    )
    try:
        # The worker is held up; the version still comes back, and is the committed one.
        assert await asyncio.wait_for(store.version(KEY), 1) == 1
        assert await asyncio.wait_for(store.version(SessionKey("other", "session")), 1) is None
    finally:
        release.set()
        await busy
    # A writer holding the database does not stop it either (WAL readers never wait).
    blocker = sqlite3.connect(tmp_path / "sessions.db", isolation_level=None)
    try:
        blocker.execute("BEGIN EXCLUSIVE")
        blocker.execute("UPDATE sessions SET version = 9")
        assert await asyncio.wait_for(store.version(KEY), 1) == 1  # not committed yet
        blocker.execute("COMMIT")
        assert await store.version(KEY) == 9
    finally:
        blocker.close()
        await store.close()


async def test_version_from_another_thread_goes_through_the_worker(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sessions.db")
    await store.put(KEY, b"x", {}, expected_version=None)
    assert await store.version(KEY) == 1  # this thread now owns the inline reader
    other = await asyncio.to_thread(lambda: asyncio.run(store.version(KEY)))
    assert other == 1
    await store.close()


async def test_releasing_memory_waits_for_a_busy_worker_only_so_long(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sessions.db")
    await store.put(KEY, b"x" * 100_000, {}, expected_version=None)
    assert await store.version(KEY) == 1  # the inline reader is open on this thread
    release = asyncio.Event()
    loop = asyncio.get_running_loop()
    busy = loop.run_in_executor(
        store._executor, lambda: asyncio.run_coroutine_threadsafe(release.wait(), loop).result()
    )
    try:
        started = loop.time()
        store.release_memory()  # the worker is held up: gives up after its bounded wait
        assert loop.time() - started < 5  # its 1 s wait, with 5x margin
    finally:
        release.set()
        await busy
    store.release_memory()
    got = await store.get(KEY)
    assert got is not None and got.data == b"x" * 100_000
    await store.close()
    store.release_memory()  # closed: nothing to do, and no error


async def test_small_states_are_written_from_the_loop_and_the_wal_stays_bounded(
    tmp_path: Path,
) -> None:
    """A state of up to 256 KB is written on the event loop's own connection (no trip through
    the worker), a larger one by the worker; the inline connection never checkpoints, so the
    worker is asked to every 4 MB, and the WAL does not grow with what was written."""
    path = tmp_path / "sessions.db"
    store = SQLiteStore(path)
    try:
        version = await store.put(KEY, b"x", {}, expected_version=None)  # the worker opens
        worker_writes = 0
        real_run = store._run

        async def counting_run(fn: object) -> object:
            nonlocal worker_writes
            worker_writes += 1
            return await real_run(fn)  # type: ignore[arg-type]

        store._run = counting_run  # type: ignore[method-assign,assignment]
        for _ in range(240):  # 12 MB, each state new (unchanged pages are not written again)
            version = await store.put(KEY, os.urandom(50_000), {}, expected_version=version)
        # Only writes that met a checkpoint (the lock held by the worker) went to the worker.
        assert worker_writes <= 12, worker_writes
        wal = await asyncio.to_thread(os.path.getsize, f"{path}-wal")
        assert wal < 8 * 2**20, wal
        before = worker_writes
        version = await store.put(KEY, os.urandom(300_000), {}, expected_version=version)
        assert worker_writes == before + 1  # over 256 KB: the worker's
        with pytest.raises(StoreError):  # compare-and-set holds on the inline path too
            await store.put(KEY, b"y", {}, expected_version=version - 1)
        found = await store.get(KEY)
        assert found is not None and found.version == version and len(found.data) == 300_000
    finally:
        await store.close()


def _wal_frames(path: Path) -> int:
    """Frames in the WAL file since it last started over (each 4 KiB page + a 24-byte header)."""
    size = os.path.getsize(f"{path}-wal")
    return max(0, size - 32) // (4096 + 24)


async def test_a_growing_state_is_rewritten_only_where_it_changed(tmp_path: Path) -> None:
    """A state of 16 KiB or more is stored padded to its size class, so a turn that appends
    keeps the row's size and SQLite overwrites only the pages that changed; what is read back
    is the state, not the padding."""
    path = tmp_path / "sessions.db"
    store = SQLiteStore(path)
    state = b'{"log":"' + b"x" * 80_000
    try:
        version = await store.put(KEY, state + b'"}', {}, expected_version=None)
        with sqlite3.connect(path) as conn:
            (stored,) = conn.execute("SELECT length(data) FROM sessions").fetchone()
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # count the frames from here
        conn.close()
        assert 80_010 < stored <= 80_010 * 9 // 8
        for turn in range(20):  # 220 bytes a turn: the size class holds
            state += f"turn {turn:03} ".encode() * 20
            version = await store.put(KEY, state + b'"}', {}, expected_version=version)
        frames = await asyncio.to_thread(_wal_frames, path)
        # Whole rows: over 20 pages a turn (400+ frames); in place, the pages a turn changed
        # (its end of the state, the row's cell, the time index: 6-8), and one whole row
        # when the state outgrows its size class.
        assert frames < 20 * 10, frames
        found = await store.get(KEY)
        assert found is not None and found.data == state + b'"}'
        assert [info.size for info in (await store.list())[0]] == [len(state) + 2]
    finally:
        await store.close()


async def test_padding_never_takes_a_row_past_the_size_cap(tmp_path: Path) -> None:
    """States from 16 KiB up are padded to their size class (steps of 2 KiB between 16 and
    32 KiB), but a row never holds more than `max_session_bytes`: near the cap the padding
    stops at it, and a state of the cap's size is stored as it is."""
    cap = 20_000
    path = tmp_path / "sessions.db"
    store = SQLiteStore(path, max_session_bytes=cap)
    # size -> the row's length: 17,000 pads to 9 x 2,048 = 18,432; 19,000 and up would pad
    # to 10 x 2,048 = 20,480, over the cap, so they stop at 20,000.
    expected = {16_384: 16_384, 17_000: 18_432, 19_000: 20_000, 19_999: 20_000, 20_000: 20_000}
    try:
        for n, size in enumerate(expected):
            state = b'{"log":"' + b"x" * (size - 10) + b'"}'
            assert len(state) == size
            await store.put(SessionKey("tenant", f"s{n}"), state, {}, expected_version=None)
            found = await store.get(SessionKey("tenant", f"s{n}"))
            assert found is not None and found.data == state
        with pytest.raises(SessionTooLarge):
            await store.put(SessionKey("t", "over"), b"x" * (cap + 1), {}, expected_version=None)
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        rows = dict(conn.execute("SELECT session, length(data) FROM sessions").fetchall())
    conn.close()
    assert rows == {f"s{n}": length for n, length in enumerate(expected.values())}


async def test_a_row_written_without_the_size_columns_is_read_whole(tmp_path: Path) -> None:
    """A table of an earlier version gains the columns on open; a row an older writer updated
    afterwards (its size columns left as they were) is read whole, padding and all."""
    path = tmp_path / "sessions.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE sessions (id TEXT PRIMARY KEY, tenant TEXT NOT NULL,"
            " session TEXT NOT NULL, data BLOB NOT NULL, meta TEXT NOT NULL,"
            " version INTEGER NOT NULL, updated_at REAL NOT NULL);"
        )
        conn.execute(
            "INSERT INTO sessions VALUES (?, ?, ?, ?, '{}', 1, ?)",
            (KEY.id, KEY.tenant, KEY.session, b'{"old":1}', time.time()),
        )
    conn.close()
    store = SQLiteStore(path)
    big = b'{"new":"' + b"y" * 20_000 + b'"}'
    try:
        found = await store.get(KEY)
        assert found is not None and found.data == b'{"old":1}'
        assert await store.put(KEY, big, {}, expected_version=1) == 2
        found = await store.get(KEY)
        assert found is not None and found.data == big
        with sqlite3.connect(path) as conn:  # an older proxy's write: data and version only
            (padded,) = conn.execute("SELECT data FROM sessions").fetchone()
            conn.execute("UPDATE sessions SET data = ?, version = 3", (padded,))
        conn.close()
        found = await store.get(KEY)
        assert found is not None and found.version == 3
        assert found.data.startswith(big) and found.data.strip() == big
    finally:
        await store.close()


async def test_the_checkpoint_is_paced_by_the_pages_the_wal_holds(tmp_path: Path) -> None:
    """The worker is asked to checkpoint once the WAL holds 4 MB, read from its index: a
    state overwritten in place adds only its changed pages, so 100 turns of an 80 KB state
    (8 MB of states) ask for none, and 100 states rewritten whole ask for one each 4 MB."""
    path = tmp_path / "sessions.db"
    store = SQLiteStore(path)
    asked = 0
    real_due = store._writer.checkpoint_due

    def due() -> bool:
        nonlocal asked
        answer = real_due()
        asked += answer
        return answer

    store._writer.checkpoint_due = due  # type: ignore[method-assign]
    state = b'{"log":"' + b"x" * 80_000
    try:
        version = await store.put(KEY, state + b'"}', {}, expected_version=None)  # the worker's
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        for turn in range(100):
            state += f"turn {turn:03} ".encode() * 20
            version = await store.put(KEY, state + b'"}', {}, expected_version=version)
        assert asked == 0
        index = os.open(f"{path}-shm", os.O_RDONLY)
        try:
            frames = sqlite_reader.wal_frames(index)
        finally:
            os.close(index)
        assert frames == await asyncio.to_thread(_wal_frames, path)  # a WAL never restarted
        assert frames is not None and frames * 4096 < 4 * 2**20
        for _ in range(100):  # 20 new pages each
            version = await store.put(KEY, os.urandom(80_000), {}, expected_version=version)
        assert 1 <= asked <= 3, asked
    finally:
        await store.close()


# -- issue 34, item 6: a full database ----------------------------------------------------


async def test_a_full_database_fails_writes_until_room_is_made(tmp_path: Path) -> None:
    """The store still pings while every write fails; `write_failure` says so (its probe
    fails too), deleting sessions works meanwhile, and once they made room it clears."""
    store = FullSQLite(tmp_path / "full.db")
    try:
        keys = [SessionKey("t", f"s{n}") for n in range(3)]
        for key in keys:
            await store.put(key, b"x" * 40_000, {}, expected_version=None)
        assert await store.write_failure() is None
        store.full = True
        new = SessionKey("t", "new")
        with pytest.raises(StoreFull, match="full"):
            await store.put(new, b"y" * 40_000, {}, expected_version=None)
        assert await store.ping()  # what /readyz asked, and all it asked
        failure = await store.write_failure()
        assert failure is not None and "full" in failure
        assert await store.write_failure() == failure  # the probe fails as the write did
        with pytest.raises(VersionConflict):  # a lost compare-and-set does not clear it
            await store.put(keys[2], b"z" * 40_000, {}, expected_version=5)
        assert await store.write_failure() is not None
        assert await store.delete(keys[0]) and await store.delete(keys[1])  # while full
        assert await store.write_failure() is None  # the probe fits in the freed pages
        assert await store.put(new, b"y" * 40_000, {}, expected_version=None) == 1
        assert [row.key for row in (await store.list())[0]] == [new, keys[2]]
    finally:
        await store.close()


async def test_a_read_only_store_reports_no_write_failure(tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    writer = SQLiteStore(path)
    await writer.put(SessionKey("t", "s"), b"x", {}, expected_version=None)
    await writer.close()
    reader = SQLiteStore(path, read_only=True)
    try:
        with pytest.raises(StoreError):
            await reader.put(SessionKey("t", "s2"), b"x", {}, expected_version=None)
        assert await reader.write_failure() is None  # read-only by the operator's choice
    finally:
        await reader.close()


def reserve_of(path: Path) -> tuple[int, int] | None:
    """The reserve file's size and the bytes of disk it takes, or None when there is none."""
    try:
        found = os.stat(reserve_path(str(path)))
    except FileNotFoundError:
        return None
    return found.st_size, found.st_blocks * 512


async def test_the_store_keeps_disk_space_in_reserve(tmp_path: Path) -> None:
    """A file beside the database holds `RESERVE_BYTES` (real blocks, not a sparse file),
    made when the store opens the file; freed for a delete on a full disk
    (tests/reliability/test_store_full.py), made again by the next start. A read-only or
    in-memory store keeps none."""
    path = tmp_path / "kept.db"
    store = SQLiteStore(path)
    await store.put(SessionKey("t", "s"), b"x", {}, expected_version=None)
    kept = reserve_of(path)
    assert kept is not None and kept[0] == RESERVE_BYTES and kept[1] >= RESERVE_BYTES
    await store.close()
    assert release_reserve(str(path)) and reserve_of(path) is None
    assert not release_reserve(str(path))
    again = SQLiteStore(path)
    assert await again.count() == 1
    assert reserve_of(path) == kept
    await again.close()
    assert release_reserve(str(path))
    reader = SQLiteStore(path, read_only=True)
    assert await reader.count() == 1
    await reader.close()
    memory = SQLiteStore(":memory:")
    assert await memory.count() == 0
    await memory.close()
    assert reserve_of(path) is None and reserve_of(Path(":memory:")) is None
