"""One write in flight per session (`proxy.turn.persist`): saves that meet are folded into one
state, exactly what saving them one after another would have stored, and nothing is lost."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.session.rebuild import record_turn
from proxy.session.state import SessionState
from proxy.store.base import SessionKey, StoreError
from proxy.store.memory import MemoryStore
from proxy.turn.persist import SessionWriter, save_together, save_turn
from proxy.turn.session_turn import Turn

KEY = SessionKey(tenant="t", session="s")


class CountingStore(MemoryStore):
    """A memory store that counts writes, and can hold them until released."""

    def __init__(self) -> None:
        super().__init__()
        self.puts = 0
        self.gate: asyncio.Event | None = None
        self.fail_next = 0
        self.delay = 0.0  # seconds a write takes, as a real store's do

    async def put(self, key: SessionKey, data: bytes, meta: dict[str, Any], **kw: Any) -> int:
        if self.gate is not None:
            await self.gate.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail_next:
            self.fail_next -= 1
            raise StoreError("down")
        version = await super().put(key, data, meta, **kw)
        self.puts += 1  # writes that went through
        return version


def history(turns: int) -> list[dict[str, Any]]:
    """A session's history after `turns` answers; each one extends the one before."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You help."}]
    for n in range(turns):
        messages.append({"role": "user", "content": f"question {n}"})
        messages.append({"role": "assistant", "content": f"answer {n}"})
    messages.append({"role": "user", "content": f"question {turns}"})
    return messages


async def loaded(store: Any, messages: list[dict[str, Any]], writer: Any = None) -> Turn:
    turn = Turn(key=KEY, store=store, body={"messages": messages}, writer=writer)
    await turn.load()
    assert turn.rb is not None
    return turn


def answered(turn: Turn, tokens: int, at: float) -> Turn:
    assert turn.rb is not None
    record_turn(turn.rb, total_tokens=tokens, prompt_tokens=tokens - 5, now=at)
    return turn


async def stored(store: Any) -> SessionState:
    found = await store.get(KEY)
    assert found is not None
    return SessionState.from_bytes(found.data)


async def test_folded_saves_store_what_saving_in_turn_stores() -> None:
    """Turns that read different versions (and histories of different lengths), saved as one,
    leave the state saving them one by one leaves: every record, the longest prefix."""
    results = []
    for together in (False, True):
        store = CountingStore()
        await save_turn(answered(await loaded(store, history(2)), 100, 1.0))
        stale = [await loaded(store, history(k)) for k in (2, 3, 3, 4)]
        await save_turn(answered(await loaded(store, history(3)), 120, 2.0))
        turns = [answered(t, 130 + i, 3.0 + i) for i, t in enumerate(stale)]
        if together:
            await save_together(turns)
        else:
            for turn in turns:
                await save_turn(turn)
        state = await stored(store)
        results.append((state.turn_log.text, state.prefix_len, state.prefix_hash))
        assert [t["total_tokens"] for t in state.turns] == [100, 120, 130, 131, 132, 133]
    assert results[0] == results[1]


async def test_concurrent_saves_of_one_session_are_written_together() -> None:
    store = CountingStore()
    writer = SessionWriter()
    first = answered(await loaded(store, history(3), writer), 100, 1.0)
    await first.save()
    assert store.puts == 1
    turns = [await loaded(store, history(3), writer) for _ in range(16)]
    store.gate = asyncio.Event()
    for i, turn in enumerate(turns):
        answered(turn, 200 + i, 2.0 + i)
        await turn.save(wait=False)  # the answer would go out now
        if i == 0:
            await asyncio.sleep(0.01)  # the writer takes this one alone
    assert not await writer.settled(KEY.id, wait=0.05)  # held: still being written
    store.gate.set()
    assert await writer.settled(KEY.id)
    # The first save went alone, the other fifteen met it in flight and went as one.
    assert store.puts == 1 + 2
    state = await stored(store)
    assert len(state.turns) == 17
    assert sorted(t["total_tokens"] for t in state.turns) == [100, *range(200, 216)]


async def test_the_next_request_reads_the_save_before_it() -> None:
    store = CountingStore()
    writer = SessionWriter()
    store.gate = asyncio.Event()
    turn = answered(await loaded(store, history(2), writer), 100, 1.0)
    await turn.save(wait=False)
    asyncio.get_running_loop().call_later(0.05, store.gate.set)
    after = await loaded(store, history(3), writer)  # waits for the save before reading
    assert after.rb is not None and after.rb.state.total_tokens == 100
    assert after.rb.reset_reason is None and after.rb.new_from == len(history(2))


async def test_a_failed_save_does_not_stop_the_next() -> None:
    """...and a failure of a save nobody waited for still reaches the metrics (the request's
    own log line was written before it ran); an awaited one is its request's to count."""
    store = CountingStore()
    reported: list[int] = []
    writer = SessionWriter(on_store_error=reported.append)
    store.fail_next = 1
    first = answered(await loaded(store, history(2), writer), 100, 1.0)
    await first.save(wait=False)
    await writer.idle()
    assert first.store_errors == 1 and await store.get(KEY) is None
    assert reported == [1]
    store.fail_next = 1
    await first.save()
    assert first.store_errors == 2 and reported == [1]
    second = answered(await loaded(store, history(3), writer), 110, 2.0)
    await second.save(wait=False)
    await writer.idle()
    assert [t["total_tokens"] for t in (await stored(store)).turns] == [110]


async def test_idle_waits_for_the_saves_submitted_so_far_only() -> None:
    """The admin list and the shutdown wait for the saves made before them, not for those a
    busy session keeps adding meanwhile (its writer may never stop)."""
    store = CountingStore()
    store.delay = 0.002
    writer = SessionWriter()
    first = answered(await loaded(store, history(2), writer), 100, 1.0)
    turns = [answered(await loaded(store, history(3), writer), 200 + n, 2.0 + n) for n in range(8)]
    await first.save(wait=False)
    stop = asyncio.Event()

    async def busy() -> None:  # saves keep arriving, faster than they are written
        n = 0
        while not stop.is_set():
            await turns[n % len(turns)].save(wait=False)
            n += 1
            await asyncio.sleep(0)

    load = asyncio.create_task(busy())
    try:
        await asyncio.sleep(0.01)
        await asyncio.wait_for(writer.idle(), 5)
        assert not load.done()
        assert (await stored(store)).turns[0]["total_tokens"] == 100
    finally:
        stop.set()
        await load
    await writer.idle()


async def test_a_finished_turn_hands_its_state_object_to_the_next_request() -> None:
    """The last save of a turn leaves its state object in the cache: the session's next
    request takes it instead of decoding the bytes, once, and it is what they decode to."""
    from proxy.store.cache import CachedStore

    cache = CachedStore(CountingStore())
    writer = SessionWriter()
    first = answered(await loaded(cache, history(1), writer), 100, 1.0)
    await first.save(wait=False)
    await writer.idle()
    assert first.rb is not None and first.version is not None
    found = await cache.get(KEY)
    assert found is not None and found.version == first.version
    held = cache._decoded[KEY.id][1]
    assert held is first.rb.state
    assert SessionState.from_bytes(found.data).to_dict() == first.rb.state.to_dict()

    second = await loaded(cache, history(2), writer)  # takes it
    assert second.rb is not None and second.rb.state is first.rb.state
    assert cache.take_decoded(KEY, first.version) is None  # handed out once

    # A save somebody waits for (a compaction's, mid-turn) leaves nothing: its turn goes on
    # changing the state.
    await writer.save(answered(second, 120, 2.0))
    assert KEY.id not in cache._decoded
    third = await loaded(cache, history(3), writer)
    assert third.rb is not None and third.rb.state is not second.rb.state


async def test_a_decoded_state_is_not_handed_out_for_another_version() -> None:
    from proxy.store.cache import CachedStore

    inner = CountingStore()
    cache = CachedStore(inner)
    writer = SessionWriter()
    turn = answered(await loaded(cache, history(1), writer), 100, 1.0)
    await turn.save(wait=False)
    await writer.idle()
    assert turn.version is not None
    # Another replica writes the session behind this cache's back.
    await inner.put(KEY, b"{}", {}, expected_version=turn.version)
    later = await loaded(cache, history(2), writer)
    assert later.rb is not None and later.rb.state is not turn.rb.state  # type: ignore[union-attr]
    assert KEY.id not in cache._decoded
