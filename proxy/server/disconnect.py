"""Stop waiting for a client that has gone away.

A non-streaming chat request answers only once the whole completion is in, and the upstream
call runs (and is billed) all that time. Once the request's body has been read, the server's
next ASGI message for it is `http.disconnect`, sent only when the client closes its
connection, so waiting for it costs nothing while the client stays. A streamed answer is
watched the same way until the upstream's stream opens; from then on the streaming response
itself notices the client leaving.
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


async def _watch(receive: Receive, task: asyncio.Task[object], gone: list[bool]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    gone.append(True)
    task.cancel()


async def unless_client_leaves(receive: Receive, work: Awaitable[T]) -> T:
    """Await `work` in the current task; if the client disconnects first, cancel it (its
    upstream call is closed on the way out) and raise `ClientGone`.

    Call it after the request's body has been read: the watcher takes the messages after it.
    """
    task = asyncio.current_task()
    assert task is not None
    gone: list[bool] = []
    watcher = asyncio.create_task(_watch(receive, task, gone))
    try:
        result = await work
    except asyncio.CancelledError:
        if gone and task.uncancel() == 0:  # our cancellation, and nobody else's
            raise ClientGone() from None
        raise
    finally:
        watcher.cancel()
    if gone:  # `work` finished anyway: take our cancellation request back
        task.uncancel()
    return result


__all__ = ["ClientGone", "unless_client_leaves"]
