"""Shadow mode's work beside the pass-through: the shadow turn never holds the request up.

The shadow turn (load the session, rebuild, compact: `ShadowPipeline.prepare`) runs as a task
of its own (`ShadowWork`) while the request goes upstream as the client sent it. It has a time
budget (`auto_compact.shadow_budget`): past it, the work is cancelled, logged and counted
(`xun_shadow_abandoned_total`), and the request is only passed through. A shadow turn ready
when the answer ends is recorded then, as before; one still running records itself when it is
done, in the background (its answer's headers say `x-xun-shadow: pending`). A session's next
shadow turn starts after the one before (within its own budget), so turns are recorded in
order. `ShadowTasks` owns those tasks, so none outlives the app.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

log = logging.getLogger("proxy.shadow")

# Turns of the event loop the answer's headers give a shadow turn that is nearly done.
SETTLE_TURNS = 16


class ShadowTasks:
    """The app's shadow work in flight; cancelled at shutdown."""

    def __init__(self, abandoned: Callable[[], None] | None = None) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()
        self.abandoned = abandoned or (lambda: None)
        # Each session's latest shadow work: the next turn of the session starts after it
        # (in its own budget), so the turns are recorded in order.
        self.last: dict[str, asyncio.Task[Any]] = {}

    def follow(self, key: str, task: asyncio.Task[Any]) -> None:
        """`task` is the session's latest work."""
        self.last[key] = task

        def done(finished: asyncio.Task[Any]) -> None:
            if self.last.get(key) is finished:
                del self.last[key]

        task.add_done_callback(done)

    def start(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def idle(self) -> None:
        """Wait for the work in flight (tests)."""
        while self.tasks:
            await asyncio.wait(list(self.tasks))

    async def close(self) -> None:
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self.tasks.clear()


class ShadowWork:
    """One request's shadow turn, prepared within `budget` seconds beside the pass-through.
    `prepare()` answers whether it left a turn to record."""

    def __init__(
        self,
        tasks: ShadowTasks,
        key: str,
        prepare: Callable[[], Awaitable[bool]],
        budget: float,
    ) -> None:
        self.tasks = tasks
        self.key = key
        self.budget = budget
        before = tasks.last.get(key)
        self.task: asyncio.Task[bool] = tasks.start(self._run(prepare, before))
        tasks.follow(key, self.task)

    async def _run(
        self, prepare: Callable[[], Awaitable[bool]], before: asyncio.Task[Any] | None
    ) -> bool:
        scope = asyncio.timeout(self.budget)
        try:
            async with scope:
                if before is not None:  # the session's turn before this one is recorded first
                    await asyncio.wait([before])
                return await prepare()
        except TimeoutError:
            if not scope.expired():
                log.info("not shadowing this request: TimeoutError")
                return False
            log.warning("shadow turn abandoned: over its budget of %.1f s", self.budget)
            self.tasks.abandoned()
            return False
        except Exception as exc:  # bad input, a history the wire cannot read, the store
            log.info("not shadowing this request: %s", type(exc).__name__)
            return False

    @property
    def done(self) -> bool:
        return self.task.done()

    @property
    def ok(self) -> bool:
        """Prepared, with a turn to record (False until `done`)."""
        return self.task.done() and not self.task.cancelled() and self.task.result()

    async def settle(self) -> bool:
        """Whether the preparation is over, given a few turns of the event loop (no waiting on
        anything slow: a preparation that only has its lease to give back is done)."""
        for _ in range(SETTLE_TURNS):
            if self.task.done():
                break
            await asyncio.sleep(0)
        return self.task.done()

    def then(self, finish: Callable[[bool], Awaitable[None]]) -> None:
        """`finish(ok)` in the background, once the preparation is over."""

        async def later() -> None:
            await asyncio.wait([self.task])
            await finish(self.ok)

        self.tasks.follow(self.key, self.tasks.start(later()))


__all__ = ["ShadowTasks", "ShadowWork"]
