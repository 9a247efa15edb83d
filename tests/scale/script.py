"""A deterministic model for the scale tests, and helpers to read what a proxy stored.

`tests.support.agent.ModelScript` gives tool calls random ids; here every id and every summary is
numbered, so two runs of one script send byte-identical requests upstream.
"""

from __future__ import annotations

import threading
from typing import Any

from proxy.session.identity import tenant_of
from proxy.session.state import SessionState
from proxy.store import SessionKey, Store, open_store
from tests.support.agent import is_summary_request
from tests.support.fake_upstream import Reply

API_KEY = "sk-scale-test"


class NumberedModel:
    """Upstream responder: `read_file` with id call_0001, call_0002, ...; numbered summaries."""

    def __init__(self, *, summary_delay: float = 0.0) -> None:
        self.summary_delay = summary_delay
        self.turn = 0
        self.summaries = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if is_summary_request(body):
                self.summaries += 1
                text = f"## overview\nSummary number {self.summaries} of the work."
                return Reply.text(text, delay=self.summary_delay)
            self.turn += 1
            n = self.turn
        return Reply.tool("read_file", {"path": f"src/file_{n}.py"}, id=f"call_{n:04d}")


def session_key(session: str, api_key: str = API_KEY) -> SessionKey:
    return SessionKey(tenant_of(f"Bearer {api_key}"), session)


async def read_state(
    url: str, key: SessionKey, store: Store | None = None
) -> tuple[SessionState, int]:
    """The stored state and version of a session (`store`: the app's own, for memory://)."""
    own = store is None
    active = open_store(url) if store is None else store
    try:
        stored = await active.get(key)
    finally:
        if own:
            await active.close()
    assert stored is not None, "the session was not stored"
    return SessionState.from_bytes(stored.data), stored.version
