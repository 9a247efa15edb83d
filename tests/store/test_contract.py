"""The store contract, run against memory, SQLite and Redis alike (see conftest.backend)."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.store import (
    SessionKey,
    SessionTooLarge,
    Store,
    StoreError,
    VersionConflict,
)
from tests.store.conftest import DamageMeta, MakeStore

KEY = SessionKey("tenant-a", "session-1")


async def put_new(store: Store, key: SessionKey, data: bytes = b"state", **meta: object) -> int:
    return await store.put(key, data, dict(meta), expected_version=None)


async def list_all(store: Store, **filters: Any) -> list[SessionKey]:
    rows, cursor = await store.list(**filters)
    assert cursor is None
    return [row.key for row in rows]


async def test_get_missing_is_none(store: Store) -> None:
    assert await store.get(KEY) is None
    assert await store.get_by_id(KEY.id) is None


async def test_put_new_then_get(store: Store) -> None:
    before = time.time()
    assert await put_new(store, KEY, b"\x00bytes\xff", messages=3, total_tokens=1200) == 1
    got = await store.get(KEY)
    assert got is not None
    assert (got.key, got.data, got.version) == (KEY, b"\x00bytes\xff", 1)
    assert got.meta == {"messages": 3, "total_tokens": 1200}
    assert before - 1 <= got.updated_at <= time.time() + 1


async def test_new_when_exists_conflicts(store: Store) -> None:
    await put_new(store, KEY, b"first")
    with pytest.raises(VersionConflict):
        await put_new(store, KEY, b"second")
    got = await store.get(KEY)
    assert got is not None and (got.data, got.version) == (b"first", 1)


async def test_stale_or_missing_version_conflicts(store: Store) -> None:
    with pytest.raises(VersionConflict):
        await store.put(KEY, b"x", {}, expected_version=1)
    assert await store.get(KEY) is None
    await put_new(store, KEY)
    assert await store.put(KEY, b"v2", {}, expected_version=1) == 2
    with pytest.raises(VersionConflict):
        await store.put(KEY, b"stale", {}, expected_version=1)
    with pytest.raises(VersionConflict):
        await store.put(KEY, b"future", {}, expected_version=3)
    got = await store.get(KEY)
    assert got is not None and (got.data, got.version) == (b"v2", 2)


async def test_conflict_is_a_store_error() -> None:
    assert issubclass(VersionConflict, StoreError)
    assert issubclass(SessionTooLarge, StoreError)


async def test_versions_increment_and_data_replaced(store: Store) -> None:
    version = await put_new(store, KEY, b"0", n=0)
    for n in range(1, 5):
        version = await store.put(KEY, str(n).encode(), {"n": n}, expected_version=version)
        assert version == n + 1
    got = await store.get(KEY)
    assert got is not None and (got.data, got.meta, got.version) == (b"4", {"n": 4}, 5)


async def test_delete(store: Store) -> None:
    await put_new(store, KEY)
    assert await store.delete(KEY) is True
    assert await store.delete(KEY) is False
    assert await store.get(KEY) is None
    assert await store.get_by_id(KEY.id) is None
    assert await list_all(store) == []
    assert await store.count() == 0
    assert await put_new(store, KEY) == 1  # starts afresh


async def test_count(store: Store) -> None:
    assert await store.count() == 0
    for n in range(3):
        await put_new(store, SessionKey("t", f"s{n}"))
    assert await store.count() == 3


async def test_list_rows_and_tenant_filter(store: Store) -> None:
    a1, a2, b1 = SessionKey("a", "1"), SessionKey("a", "2"), SessionKey("b", "1")
    for key in (a1, a2, b1):
        await put_new(store, key, b"x" * 10, tokens=len(key.session))
        await asyncio.sleep(0.002)
    assert await list_all(store) == [b1, a2, a1]  # newest first
    assert await list_all(store, tenant="a") == [a2, a1]
    assert await list_all(store, tenant="b") == [b1]
    assert await list_all(store, tenant="nobody") == []
    rows, _ = await store.list(tenant="b")
    row = rows[0]
    assert (row.id, row.version, row.size, row.meta) == (b1.id, 1, 10, {"tokens": 1})
    stored = await store.get(b1)
    assert stored is not None and row.updated_at == stored.updated_at


async def test_list_updated_after(store: Store) -> None:
    old, new = SessionKey("t", "old"), SessionKey("t", "new")
    await put_new(store, old)
    await asyncio.sleep(0.002)
    await put_new(store, new)
    stored = await store.get(old)
    assert stored is not None
    assert await list_all(store, updated_after=stored.updated_at) == [new]
    assert await list_all(store, updated_after=stored.updated_at - 60) == [new, old]
    assert await list_all(store, updated_after=time.time() + 60) == []
    assert await list_all(store, tenant="t", updated_after=stored.updated_at) == [new]


async def test_a_write_moves_a_session_to_the_front(store: Store) -> None:
    first, second = SessionKey("t", "first"), SessionKey("t", "second")
    await put_new(store, first)
    await asyncio.sleep(0.002)
    await put_new(store, second)
    await asyncio.sleep(0.002)
    await store.put(first, b"again", {}, expected_version=1)
    assert await list_all(store) == [first, second]


async def paginate(store: Store, limit: int, **filters: Any) -> list[SessionKey]:
    seen: list[SessionKey] = []
    cursor: str | None = None
    for _ in range(100):
        rows, cursor = await store.list(limit=limit, cursor=cursor, **filters)
        assert len(rows) <= limit
        seen += [row.key for row in rows]
        if cursor is None:
            return seen
        assert len(rows) == limit
    raise AssertionError("pagination did not end")


async def test_pagination_covers_every_session_once(store: Store) -> None:
    keys = [SessionKey("t" if n % 3 else "u", f"s{n}") for n in range(23)]
    for key in keys:
        await put_new(store, key)
    full = await list_all(store, limit=1000)
    assert sorted(full, key=repr) == sorted(keys, key=repr)
    for limit in (1, 5, 7, 23, 50):
        assert await paginate(store, limit) == full
    only_t = [key for key in full if key.tenant == "t"]
    assert await paginate(store, 4, tenant="t") == only_t


async def test_pagination_with_equal_timestamps(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sessions written within one clock tick tie on updated_at; the id breaks the tie.
    module = sys.modules[type(store).__module__]
    monkeypatch.setattr(module, "time", SimpleNamespace(time=lambda: 1_700_000_000.25))
    keys = [SessionKey("t", f"s{n}") for n in range(9)]
    for key in keys:
        await put_new(store, key)
    expected = sorted(keys, key=lambda key: key.id, reverse=True)
    for limit in (1, 2, 4, 9):
        assert await paginate(store, limit) == expected


async def test_list_rejects_bad_arguments(store: Store) -> None:
    with pytest.raises(ValueError, match="cursor"):
        await store.list(cursor="not a cursor!")
    with pytest.raises(ValueError, match="limit"):
        await store.list(limit=0)


async def test_get_by_id(store: Store) -> None:
    other = SessionKey("tenant-a", "session-2")
    await put_new(store, KEY, b"one")
    await put_new(store, other, b"two")
    got = await store.get_by_id(KEY.id)
    assert got is not None and (got.key, got.data) == (KEY, b"one")
    assert SessionKey.is_valid_id(KEY.id)
    assert await store.get_by_id(SessionKey("x", "y").id) is None
    assert await store.get_by_id("../../etc/passwd") is None
    assert await store.get_by_id("") is None


async def test_size_cap(make_store: MakeStore) -> None:
    store = await make_store(max_session_bytes=1000)
    assert await put_new(store, KEY, b"x" * 1000) == 1
    with pytest.raises(SessionTooLarge):
        await store.put(KEY, b"x" * 1001, {}, expected_version=1)
    with pytest.raises(SessionTooLarge):
        await put_new(store, SessionKey("t", "big"), b"x" * 5000)
    got = await store.get(KEY)
    assert got is not None and (len(got.data), got.version) == (1000, 1)
    assert await store.get(SessionKey("t", "big")) is None


async def test_meta_is_copied_and_must_be_json(store: Store) -> None:
    meta = {"counters": {"summary_rounds": 1}, "tags": ["a"]}
    await store.put(KEY, b"x", meta, expected_version=None)
    meta["tags"].append("mutated")
    got = await store.get(KEY)
    assert got is not None and got.meta == {"counters": {"summary_rounds": 1}, "tags": ["a"]}
    got.meta["tags"].append("mutated")
    again = await store.get(KEY)
    assert again is not None and again.meta["tags"] == ["a"]
    with pytest.raises(TypeError):
        await store.put(SessionKey("t", "bad"), b"x", {"when": object()}, expected_version=None)


async def test_ping(store: Store) -> None:
    assert await store.ping() is True


async def test_releasing_memory_loses_nothing(store: Store) -> None:
    """What an idle proxy does before trimming its heap (proxy.server.allocator): only caches go."""
    keys = [SessionKey("tenant-a", f"session-{n}") for n in range(20)]
    for n, key in enumerate(keys):
        await put_new(store, key, b"state %d " % n * 500, n=n)
    store.release_memory()
    store.release_memory()  # twice in a row is fine too
    for n, key in enumerate(keys):
        got = await store.get(key)
        assert got is not None and (got.data, got.meta, got.version) == (
            b"state %d " % n * 500,
            {"n": n},
            1,
        )
        assert await store.version(key) == 1
    assert await store.put(keys[0], b"next", {}, expected_version=1) == 2


async def test_tenants_are_isolated(store: Store) -> None:
    alice, bob = SessionKey("alice", "shared-id"), SessionKey("bob", "shared-id")
    assert alice.id != bob.id
    await put_new(store, alice, b"alice's")
    assert await store.get(bob) is None
    await put_new(store, bob, b"bob's")
    got_a, got_b = await store.get(alice), await store.get(bob)
    assert got_a is not None and got_a.data == b"alice's"
    assert got_b is not None and got_b.data == b"bob's"
    assert await store.delete(bob) is True
    assert await store.get(alice) is not None
    # the separator cannot be forged by moving characters between tenant and session
    assert SessionKey("a:b", "c").id != SessionKey("a", "b:c").id


AWKWARD = {
    "path": "../../etc/passwd/ and \\windows\\",
    "colons": "xun:session:other:tenant:*",
    "glob": "*?[a-z]%25%",
    "unicode": "会话-ünïcødé-🚀",
    "long": "L" * 10_240,
    "empty": "",
    "spaces": " leading and trailing ",
}


@pytest.mark.parametrize("session", AWKWARD.values(), ids=AWKWARD.keys())
async def test_awkward_session_ids(store: Store, session: str) -> None:
    key = SessionKey("tenant:with/odd chars", session)
    decoy = SessionKey("tenant", session)
    await put_new(store, key, b"awkward")
    await put_new(store, decoy, b"decoy")
    got = await store.get(key)
    assert got is not None and (got.key, got.data) == (key, b"awkward")
    by_id = await store.get_by_id(key.id)
    assert by_id is not None and by_id.key == key
    rows, _ = await store.list(tenant=key.tenant)
    assert [row.key for row in rows] == [key]
    assert await store.put(key, b"v2", {}, expected_version=1) == 2
    assert await store.delete(key) is True
    assert await store.get(key) is None
    assert await store.get(decoy) is not None


async def test_concurrent_read_modify_write_loses_nothing(store: Store) -> None:
    await put_new(store, KEY, b"0")
    conflicts = 0

    async def increment() -> None:
        nonlocal conflicts
        while True:
            current = await store.get(KEY)
            assert current is not None
            await asyncio.sleep(0)  # let the other writers read the same version
            value = int(current.data) + 1
            try:
                await store.put(KEY, str(value).encode(), {}, expected_version=current.version)
                return
            except VersionConflict:
                conflicts += 1

    await asyncio.gather(*(increment() for _ in range(20)))
    final = await store.get(KEY)
    assert final is not None and (final.data, final.version) == (b"20", 21)
    assert conflicts > 0  # the writers did collide


@pytest.mark.parametrize("backend", ["sqlite", "redis", "cached-redis"])  # memory is private
async def test_two_instances_share_sessions(make_store: MakeStore) -> None:
    first, second = await make_store(), await make_store()
    await put_new(first, KEY, b"from first")
    got = await second.get(KEY)
    assert got is not None and got.data == b"from first"
    await second.put(KEY, b"from second", {}, expected_version=1)
    with pytest.raises(VersionConflict):
        await first.put(KEY, b"stale", {}, expected_version=1)


@pytest.mark.parametrize("backend", ["sqlite", "redis", "cached-sqlite"])
async def test_concurrent_writers_on_two_instances(make_store: MakeStore) -> None:
    # Two replicas (two connections) racing on one session: still exactly 20 increments.
    stores = [await make_store(), await make_store()]
    await put_new(stores[0], KEY, b"0")

    async def increment(store: Store) -> None:
        while True:
            current = await store.get(KEY)
            assert current is not None
            await asyncio.sleep(0)
            value = str(int(current.data) + 1).encode()
            try:
                await store.put(KEY, value, {}, expected_version=current.version)
                return
            except VersionConflict:
                continue

    await asyncio.gather(*(increment(stores[n % 2]) for n in range(20)))
    final = await stores[1].get(KEY)
    assert final is not None and (final.data, final.version) == (b"20", 21)


# -- issue 34, item 3: a row whose metadata cannot be read --------------------------------

DAMAGED_META = {
    "not-json": b"{not json",
    "not-an-object": b"[1, 2]",
    "not-utf8": b"\xff\xfe{}",
    "missing": None,
}


@pytest.mark.parametrize("backend", ["sqlite", "redis", "cached-sqlite", "cached-redis"])
@pytest.mark.parametrize("damage", list(DAMAGED_META))
async def test_a_row_whose_meta_cannot_be_read_starts_afresh(
    make_store: MakeStore,
    damage_meta: DamageMeta,
    damage: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only that row is affected: it reads as damaged (its version kept, so that a write over
    it replaces it), listings leave it out and the log names it."""
    store = await make_store()
    other = SessionKey("tenant-a", "session-2")
    await put_new(store, KEY, b"damaged-state", messages=3)
    await put_new(store, other, b"other-state", messages=5)
    await damage_meta(KEY, DAMAGED_META[damage])
    caplog.set_level(logging.WARNING, logger="proxy.store")
    reader = await make_store()  # a fresh instance: nothing of the row in a cache

    found = await reader.get(KEY)
    assert found is not None and found.damaged and found.version == 1
    by_id = await reader.get_by_id(KEY.id)
    assert by_id is not None and by_id.damaged and by_id.key == KEY
    assert any(KEY.id in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert await list_all(reader) == [other]
    assert await list_all(reader, tenant="tenant-a") == [other]
    assert await paginate(reader, 1) == [other]
    healthy = await reader.get(other)
    assert healthy is not None and not healthy.damaged and healthy.meta == {"messages": 5}

    # The session's next write replaces the row, which is then whole again.
    version = await reader.put(KEY, b"fresh", {"messages": 1}, expected_version=found.version)
    assert version == 2
    again = await store.get(KEY)
    assert again is not None and not again.damaged
    assert (again.data, again.meta) == (b"fresh", {"messages": 1})
    assert sorted(await list_all(reader), key=lambda k: k.session) == [KEY, other]
