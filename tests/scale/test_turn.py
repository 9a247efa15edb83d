"""`Turn` against a real store: the compaction lease, conflicting saves, oversize states."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import httpx
import pytest

from proxy.compact import AutoCompactor
from proxy.session.history import estimate_tokens
from proxy.session.identity import tenant_of
from proxy.session.rebuild import rebuild, record_turn
from proxy.session.state import SessionState
from proxy.store import SessionKey, Store, StoreError, open_store
from proxy.store.memory import MemoryStore
from proxy.turn.session_turn import Turn

KEY = SessionKey("tenant", "session")
THRESHOLD = 8_000
COMPACTOR = AutoCompactor(escalation_rounds=0)  # a reclaim round escalates to a summary


def history(turns: int = 20, size: int = 2000) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "start"},
    ]
    for i in range(turns):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"{i}:" + "x" * size})
    return msgs


class Summaries:
    """The summary endpoint: counts calls, optionally slow."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls = 0

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        await asyncio.sleep(self.delay)
        message = {"role": "assistant", "content": f"SUMMARY {self.calls}"}
        return {"choices": [{"message": message}], "usage": {"prompt_tokens": 1}}


async def seed(store: Store, msgs: list[dict[str, Any]]) -> None:
    """A stored state over the threshold, as the turn before these messages left it."""
    rb = rebuild(msgs[:-2], None)
    state = record_turn(rb, total_tokens=estimate_tokens(msgs[:-2]))
    assert state.total_tokens is not None and state.total_tokens > THRESHOLD
    await store.put(KEY, state.to_bytes(), state.meta(len(msgs) - 2), expected_version=None)


async def loaded(store: Store, msgs: list[dict[str, Any]], **kwargs: Any) -> Turn:
    turn = Turn(KEY, store, {"model": "gpt-4o", "messages": msgs}, **kwargs)
    await turn.load()
    assert turn.rb is not None
    return turn


async def compact(turn: Turn, summaries: Summaries) -> None:
    await turn.compact(COMPACTOR, threshold=THRESHOLD, post=summaries, summary_model=None)


async def stored(store: Store) -> SessionState:
    found = await store.get(KEY)
    assert found is not None
    return SessionState.from_bytes(found.data)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    opened = open_store(url)
    yield opened
    await opened.close()


async def test_concurrent_turns_share_one_summary(store: Store) -> None:
    msgs = history()
    await seed(store, msgs)
    summaries = Summaries(delay=0.2)
    turns = [await loaded(store, msgs) for _ in range(5)]
    await asyncio.gather(*(compact(turn, summaries) for turn in turns))
    assert summaries.calls == 1
    assert sorted(t.compaction for t in turns) == ["none"] * 4 + ["summary"]
    assert sorted(t.lease for t in turns) == ["held"] + ["waited"] * 4
    for turn in turns:  # the waiters go upstream with the holder's summary
        system = turn.upstream_body()["messages"][0]["content"]
        assert "SUMMARY 1" in system
    assert (await stored(store)).summary == "SUMMARY 1"


async def test_a_busy_lease_times_out_into_an_uncompacted_request(store: Store) -> None:
    msgs = history()
    await seed(store, msgs)
    holder = await store.acquire(KEY, 30)
    assert holder
    summaries = Summaries()
    turn = await loaded(store, msgs, lease_wait=0.3)
    await compact(turn, summaries)
    assert (turn.compaction, turn.lease, summaries.calls) == ("none", "timeout", 0)
    assert turn.upstream_body()["messages"] == msgs
    await store.release(KEY, holder)


async def test_a_holder_that_changed_nothing_is_not_repeated(store: Store) -> None:
    msgs = history()
    await seed(store, msgs)
    holder = await store.acquire(KEY, 30)
    assert holder

    async def fail_and_release() -> None:  # another request tried this state and gave up
        await asyncio.sleep(0.1)
        await store.release(KEY, holder)

    summaries = Summaries()
    turn = await loaded(store, msgs)
    await asyncio.gather(fail_and_release(), compact(turn, summaries))
    assert (turn.compaction, turn.lease, summaries.calls) == ("none", "waited", 0)
    assert await store.acquire(KEY, 30)  # and it gave the lease back


async def test_an_abandoned_lease_is_taken_over_and_compacted(store: Store) -> None:
    msgs = history()
    await seed(store, msgs)
    dead = await store.acquire(KEY, 0.8)  # its holder died: never renewed, never released
    assert dead
    summaries = Summaries()
    turn = await loaded(store, msgs, lease_ttl=1.0)
    await compact(turn, summaries)
    assert (turn.compaction, turn.lease, summaries.calls) == ("summary", "abandoned", 1)
    assert (await stored(store)).summary == "SUMMARY 1"


async def test_the_lease_is_renewed_while_a_slow_summary_runs(store: Store) -> None:
    msgs = history()
    await seed(store, msgs)
    turn = await loaded(store, msgs, lease_ttl=0.3)
    task = asyncio.create_task(compact(turn, Summaries(delay=1.0)))
    for _ in range(3):  # well past the 0.3s TTL, the lease is still held
        await asyncio.sleep(0.3)
        assert await store.acquire(KEY, 30) is None
    await task
    assert turn.compaction == "summary"
    assert await store.acquire(KEY, 30)  # released once the summary was saved


class NoLeases(MemoryStore):
    async def acquire(self, key: SessionKey, ttl_s: float) -> str | None:
        raise StoreError("lease store down")


async def test_a_failing_lease_means_no_compaction() -> None:
    store = NoLeases()
    msgs = history()
    await seed(store, msgs)
    summaries = Summaries()
    turn = await loaded(store, msgs)
    await compact(turn, summaries)
    assert (turn.compaction, turn.lease, turn.store_errors, summaries.calls) == (
        "none",
        "error",
        1,
        0,
    )


async def test_a_conflicting_save_merges_and_keeps_the_summary(store: Store) -> None:
    msgs = history()
    await seed(store, msgs)
    compacting = await loaded(store, msgs)
    plain = await loaded(store, msgs)  # read the same version, will not compact
    await compact(compacting, Summaries())
    assert compacting.compaction == "summary"
    assert compacting.rb is not None and plain.rb is not None
    now = time.time()
    record_turn(plain.rb, total_tokens=60_000, now=now + 2)
    await plain.save()  # conflicts with the compaction's write
    record_turn(compacting.rb, total_tokens=4_000, now=now + 1)
    await compacting.save()  # conflicts with the merge
    state = await stored(store)
    assert state.summary == "SUMMARY 1" and state.summary_rounds == 1
    assert [t["at"] for t in state.turns][-2:] == [now + 1, now + 2]  # both turns recorded
    assert plain.store_errors == compacting.store_errors == 0


async def test_an_oversize_state_is_saved_without_its_view() -> None:
    msgs = history(turns=2, size=10)
    msgs.append({"role": "user", "content": os.urandom(20_000).hex()})  # incompressible
    probe = record_turn(rebuild(msgs, None), total_tokens=100)
    with_view = len(probe.to_bytes())
    probe.view = None
    without = len(probe.to_bytes())
    assert without < 2_000 < with_view

    store = MemoryStore(max_session_bytes=2_000)
    turn = await loaded(store, msgs)
    assert turn.rb is not None
    record_turn(turn.rb, total_tokens=100)
    await turn.save()
    state = await stored(store)
    assert state.view is None and state.prefix_len == len(msgs)
    assert turn.store_errors == 0

    tiny = MemoryStore(max_session_bytes=100)  # not even the bare state fits
    turn = await loaded(tiny, msgs)
    assert turn.rb is not None
    record_turn(turn.rb, total_tokens=100)
    await turn.save()  # gives up quietly: the request is not failed
    assert await tiny.get(KEY) is None and turn.store_errors == 1


def test_an_oversize_session_through_the_proxy(make_proxy: Any, tmp_path: Any) -> None:
    """The same through HTTP: every request answered, the state kept small, then dropped."""
    url = f"sqlite:///{tmp_path / 'small.db'}"
    proxy = make_proxy(store_url=url, session_max_bytes=4_000)
    messages = [{"role": "user", "content": os.urandom(20_000).hex()}]
    headers = {"X-Session-Id": "big", "Authorization": "Bearer sk-big"}
    body = {"model": "gpt-4o", "messages": messages}
    with httpx.Client(base_url=proxy.base_url, headers=headers, timeout=30) as client:
        assert client.post("/chat/completions", json=body).status_code == 200
        proxy.settle()

        async def read() -> SessionState:
            small = open_store(url)
            try:
                found = await small.get(SessionKey(tenant_of("Bearer sk-big"), "big"))
                assert found is not None
                return SessionState.from_bytes(found.data)
            finally:
                await small.close()

        state = asyncio.run(read())
        assert state.view is None and state.prefix_len == 1 and state.total_tokens
        messages.append({"role": "assistant", "content": "ok"})
        messages.append({"role": "user", "content": "next"})
        assert client.post("/chat/completions", json=body).status_code == 200
