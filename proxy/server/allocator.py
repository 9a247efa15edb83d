"""Giving memory back to the system after a burst of load.

Nothing leaks under load, but the allocators keep what a burst made them take. Two measures,
both for glibc (elsewhere they do nothing):

- `tune_allocator` fixes malloc's mmap threshold (at 4 MiB). By default glibc raises it to
  the size of every large block that is freed (up to 32 MiB), so after a few huge buffers
  blocks of many MiB come from the heap instead of mmap and stay there as free fragments
  once the burst is over.
- `IdleReclaimer` waits until no request has been in flight for a moment after some were
  served, then runs a full garbage collection (request objects caught in reference cycles
  otherwise wait for the rare oldest-generation pass) and `malloc_trim(0)`, which hands the
  free pages inside the heap back to the kernel.

And one for the cycle collector, which costs time rather than memory:

- `tune_collector` moves every object alive at start-up (modules, the app) out of the
  collector's reach (`gc.freeze`) and lets the youngest generation grow to 7,000 objects
  before it is collected instead of 700. Parsing one 50 KB request makes about 1,500
  containers; at 700 a collection ran every half request, each going over the objects of the
  request still in use, and the full passes went over all the modules' objects too. Objects
  freed by their reference count, nearly all of a request's, never cost the collector
  anything, so collecting less often collects no less. A request leaves no reference cycle
  behind (`proxy.server.disconnect`), so the collector has little to find while requests
  run: the full pass, which goes over every long-lived object (the modules imported on the
  first requests, the sessions' kept histories: 50,000 objects and 15-50 ms after a few
  thousand requests at 50 KB), runs after 100 passes of the middle generation instead of
  10, and once the proxy is idle the reclaimer runs it and freezes what survives
  (`reclaim`), so that later passes under load go over what changed since. That idle pass
  goes over everything, what was frozen before too (50-110 ms at idle): garbage frozen at
  an earlier reclaim is freed there, not kept until some later pass.

All are process-wide, so the serving process owns them: `proxy.cli` calls `tune_allocator`
and `tune_collector` and hands an `IdleReclaimer` to the server, whose loop ticks it
(`proxy.server.lifecycle`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
import time
from collections.abc import Callable
from functools import cache

M_MMAP_THRESHOLD = -3  # mallopt parameter, <malloc.h>
# Fixed, so it never climbs with the largest block freed (glibc lets it reach 32 MiB), and high
# enough that a big request's buffers (an 800 KB body, its serialised copies, the session
# state) are reused from the heap: at glibc's initial 128 KiB each of them was mapped and
# faulted in afresh, 2 ms of kernel time per 800 KB request (tests/bench/cpu.py).
MMAP_THRESHOLD = 4 * 2**20
# Allocations between two collections of the youngest generation (Python's default: 700).
YOUNG_GENERATION = 7000
# Passes of the middle generation between two full passes (Python's default: 10).
OLD_GENERATION = 100
IDLE_SECONDS = 1.0
# A steady trickle of requests must not turn into a full collection after every one.
MIN_INTERVAL_SECONDS = 10.0


@cache
def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    # musl and others have no malloc_trim: then neither measure applies.
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


def tune_allocator(mmap_threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold (which also stops its dynamic growth); False elsewhere."""
    libc = _glibc()
    return bool(libc is not None and libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold) == 1)


def tune_collector(young: int = YOUNG_GENERATION, old: int = OLD_GENERATION) -> None:
    """Freeze what is alive now out of the cycle collector's passes, collect the youngest
    generation every `young` allocations and run a full pass every `old` passes of the
    middle one."""
    gc.collect()
    gc.freeze()
    _, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, old)


def trim() -> bool:
    """`malloc_trim(0)`: return free heap pages to the kernel. True if any were returned."""
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0))


def reclaim(release: Callable[[], None] | None = None) -> None:
    """What the reclaimer runs once the proxy is idle: `release` (caches that hold memory
    only for speed let it go: the store's, see `Store.release_memory`), a full collection
    over everything, frozen objects included (a cycle among objects frozen at an earlier
    reclaim, a closed connection's protocol and transport, is freed), the survivors frozen
    again (in a process that froze its start-up: later passes under load skip them), then
    the trim."""
    if release is not None:
        release()
    frozen = gc.get_freeze_count() > 0  # a serving process (`tune_collector`)
    if frozen:
        gc.unfreeze()
    gc.collect()
    if frozen:
        gc.freeze()
    trim()


class IdleReclaimer:
    """Run `reclaim` once per lull: after requests were served and none has been in flight
    for `idle_seconds`, at most once every `min_interval` seconds.

    `activity()` returns (requests in flight, requests admitted so far): the serving process
    passes its `Drain`'s counters, which leave probes out, so probes never cause a reclaim.
    The server calls `tick` from its loop; `on_reclaim` gets each reclaim's duration.
    """

    def __init__(
        self,
        activity: Callable[[], tuple[int, int]],
        *,
        idle_seconds: float = IDLE_SECONDS,
        min_interval: float = MIN_INTERVAL_SECONDS,
        action: Callable[[], None] = reclaim,
        on_reclaim: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.activity = activity
        self.idle_seconds = idle_seconds
        self.min_interval = min_interval
        self.action = action
        self.on_reclaim = on_reclaim
        self.clock = clock
        self.reclaims = 0
        now = clock()
        self._admitted = self._reclaimed_admitted = activity()[1]
        self._busy_at = now  # when requests were last seen in flight or arriving
        self._reclaimed_at = now - min_interval

    def due(self) -> bool:
        """Note the current activity; True when a reclaim should run now."""
        now = self.clock()
        in_flight, admitted = self.activity()
        if in_flight or admitted != self._admitted:
            self._busy_at = now
            self._admitted = admitted
            return False
        return (
            admitted != self._reclaimed_admitted
            and now - self._busy_at >= self.idle_seconds
            and now - self._reclaimed_at >= self.min_interval
        )

    def tick(self) -> bool:
        """Reclaim if it is due; True if it ran. Blocks the loop for the collection (tens
        of ms for the proxy's heap), which is why it only runs with nothing in flight."""
        if not self.due():
            return False
        started = time.perf_counter()
        self.action()
        seconds = time.perf_counter() - started
        self.reclaims += 1
        self._reclaimed_admitted = self._admitted
        self._reclaimed_at = self.clock()
        if self.on_reclaim is not None:
            self.on_reclaim(seconds)
        return True


__all__ = ["IdleReclaimer", "reclaim", "trim", "tune_allocator"]
