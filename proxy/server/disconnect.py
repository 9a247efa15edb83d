"""Stop waiting for a client that has gone away.

A non-streaming chat request answers only once the whole completion is in, and the upstream
call runs (and is billed) all that time. Once the request's body has been read, the server's
next ASGI message for it is `http.disconnect`, sent only when the client closes its
connection, so waiting for it costs nothing while the client stays. A streamed answer is
watched the same way until the upstream's stream opens; from then on the streaming response
itself notices the client leaving.

The watcher is never cancelled: once the work is done it is only told so, and ends by itself
at the server's next message, `http.disconnect`, which comes when the answer has been sent
(or the client left). A cancelled watcher left a reference cycle per request (the
`CancelledError`'s traceback holds the frames that hold the task and the server's waiter),
which only the cycle collector could free: at a few collections a second each went over
those requests, and that was a visible share of the slowest requests at concurrency 1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.types import Receive

from proxy.errors import InvalidRequest

T = TypeVar("T")


class ClientGone(InvalidRequest):
    """The client closed its connection before the answer was ready (logged as 499)."""

    def __init__(self) -> None:
        super().__init__("The client closed the request.", code="client_disconnected", status=499)


class _Watch:
    __slots__ = ("done", "gone")

    def __init__(self) -> None:
        self.done = False  # the work finished: a disconnect from now on is not ours to act on
        self.gone = False  # the client left while the work ran, and the work was cancelled


async def _watch(receive: Receive, task: asyncio.Task[object], watch: _Watch) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    if not watch.done:
        watch.gone = True
        task.cancel()


async def unless_client_leaves(receive: Receive, work: Awaitable[T]) -> T:
    """Await `work` in the current task; if the client disconnects first, cancel it (its
    upstream call is closed on the way out) and raise `ClientGone`.

    Call it after the request's body has been read: the watcher takes the messages after it.
    """
    task = asyncio.current_task()
    assert task is not None
    watch = _Watch()
    watcher = asyncio.create_task(_watch(receive, task, watch))
    _watchers.add(watcher)  # a strong reference until it ends (the loop keeps weak ones)
    watcher.add_done_callback(_watchers.discard)
    try:
        result = await work
    except asyncio.CancelledError:
        if watch.gone and task.uncancel() == 0:  # our cancellation, and nobody else's
            raise ClientGone() from None
        raise
    finally:
        watch.done = True
    if watch.gone:  # `work` finished anyway: take our cancellation request back
        task.uncancel()
    return result


_watchers: set[asyncio.Task[None]] = set()


__all__ = ["ClientGone", "unless_client_leaves"]
