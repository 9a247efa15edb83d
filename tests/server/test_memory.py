"""proxy.server.allocator: when the idle reclaim runs, and the glibc calls behind it."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from proxy.server import allocator as memory
from proxy.store.cache import _fit


class Traffic:
    """A fake clock and request counters, as the server's `Drain` would report them."""

    def __init__(self) -> None:
        self.now = 100.0
        self.in_flight = 0
        self.admitted = 0
        self.runs = 0
        self.durations: list[float] = []

    def reclaimer(self, **kwargs: float) -> memory.IdleReclaimer:
        def action() -> None:
            self.runs += 1

        return memory.IdleReclaimer(
            lambda: (self.in_flight, self.admitted),
            action=action,
            on_reclaim=self.durations.append,
            clock=lambda: self.now,
            **kwargs,
        )

    def request(self, seconds: float, reclaimer: memory.IdleReclaimer) -> None:
        self.in_flight += 1
        self.admitted += 1
        reclaimer.tick()
        self.now += seconds
        reclaimer.tick()
        self.in_flight -= 1


def test_a_quiet_process_never_reclaims() -> None:
    traffic = Traffic()
    reclaimer = traffic.reclaimer()
    for _ in range(100):
        traffic.now += 1
        assert not reclaimer.tick()
    assert traffic.runs == 0


def test_reclaims_once_after_traffic_goes_idle() -> None:
    traffic = Traffic()
    reclaimer = traffic.reclaimer(idle_seconds=1.0, min_interval=10.0)
    traffic.request(2.0, reclaimer)
    assert not reclaimer.tick()  # the request just ended: not idle long enough yet
    traffic.now += 0.5
    assert not reclaimer.tick()
    traffic.now += 0.6
    assert reclaimer.tick()
    assert traffic.runs == 1 and reclaimer.reclaims == 1 and len(traffic.durations) == 1
    traffic.now += 60
    assert not reclaimer.tick()  # nothing served since: nothing to give back


def test_never_while_a_request_is_in_flight() -> None:
    traffic = Traffic()
    reclaimer = traffic.reclaimer(idle_seconds=1.0, min_interval=0.0)
    traffic.in_flight, traffic.admitted = 1, 1  # a long stream
    for _ in range(50):
        traffic.now += 1
        assert not reclaimer.tick()
    traffic.in_flight = 0
    reclaimer.tick()
    traffic.now += 1
    assert reclaimer.tick()


def test_a_steady_trickle_reclaims_at_most_every_min_interval() -> None:
    traffic = Traffic()
    reclaimer = traffic.reclaimer(idle_seconds=1.0, min_interval=10.0)
    for _ in range(30):  # one short request every 2 s for a minute
        traffic.request(0.1, reclaimer)
        traffic.now += 1.9
        reclaimer.tick()
    assert 4 <= traffic.runs <= 6


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_reclaim_lets_caches_go_before_collecting(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    monkeypatch.setattr(memory.gc, "collect", lambda: order.append("collect"))
    monkeypatch.setattr(memory, "trim", lambda: order.append("trim") or True)
    monkeypatch.setattr(memory.gc, "get_freeze_count", lambda: 0)  # this is no serving process
    memory.reclaim(lambda: order.append("release"))
    assert order == ["release", "collect", "trim"]
    memory.reclaim()
    assert order[3:] == ["collect", "trim"]


def test_glibc_calls_answer_on_linux() -> None:
    if memory._glibc() is None:
        pytest.skip("not glibc")
    assert memory.tune_allocator() is True
    memory.trim()  # True or False, depending on what is free: it must not raise
    memory.reclaim()


def test_the_collector_is_tuned_for_the_serving_process() -> None:
    """In a process of its own (the settings are process-wide): what is alive at start-up is
    frozen out of the collector's passes, and the youngest generation grows larger."""
    script = (
        "import gc; from proxy.server import allocator as memory; memory.tune_collector(); "
        "print(gc.get_freeze_count(), *gc.get_threshold())"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True)
    frozen, young, middle, old = map(int, done.stdout.split())
    assert frozen > 1000 and young == memory.YOUNG_GENERATION
    assert middle == 10  # as Python sets it
    assert old == memory.OLD_GENERATION  # full passes ten times rarer than by default


def test_an_idle_reclaim_collects_frozen_cycles_and_freezes_the_survivors() -> None:
    """An idle pass reaches objects frozen earlier (a cycle among them is freed), and what
    survives it is frozen for the passes under load."""
    script = (
        "import gc, weakref; from proxy.server import allocator as memory\n"
        "class Node: pass\n"
        "a = Node(); a.me = a; gone = weakref.ref(a)\n"
        "kept = [Node() for _ in range(100)]\n"
        "memory.tune_collector(); del a; gc.collect()\n"
        "before = gone() is None\n"
        "after_startup = gc.get_freeze_count()\n"
        "late = [[i] for i in range(5000)]\n"
        "memory.reclaim()\n"
        "print(before, gone() is None, gc.get_freeze_count() - after_startup)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True)
    before, after, more = done.stdout.split()
    assert before == b"False"  # frozen: the automatic passes never reach it
    assert after == b"True"  # the full idle pass did
    assert int(more) >= 5000  # what lived on is out of the collector's way


def test_cached_state_bytes_cost_their_length() -> None:
    import tracemalloc

    state = orjson.dumps({"messages": list(range(3000)), "summary": "s" * 5000})
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fitted = _fit(state)
        cost = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert fitted == state
    assert cost < len(state) + 256


async def test_drain_counts_requests_but_not_probes() -> None:
    from starlette.types import Message, Receive, Scope, Send

    from proxy.server.lifecycle import Drain, DrainMiddleware

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        pass

    drain = Drain()
    middleware = DrainMiddleware(app, drain=drain)
    for path in ("/healthz", "/readyz", "/metrics", "/v1/chat/completions", "/v1/models"):
        await middleware({"type": "http", "path": path, "method": "GET"}, receive, send)
    assert drain.admitted == 2 and drain.in_flight == 0
