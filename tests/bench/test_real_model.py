"""Opt-in: a real model's tool session through the proxy, every turn answered 200 (issue 16).

llama.cpp's server with Gemma 3 270M and a 768-token window, a threshold of 470 (what a user
sets for that window), 25 turns, once per compactor. Not part of the default run (tests/bench
is ignored there): building llama.cpp takes about 20 minutes. Install once, then name the file:

    ./scripts/real-model && python3 -m pytest tests/bench/test_real_model.py
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.bench.common import Child
from tests.bench.real_model import model_server, report, run_session

N_CTX = 768
THRESHOLD = 470
TURNS = 25


@pytest.fixture(scope="module")
def server() -> Iterator[Child]:
    with model_server(N_CTX) as running:
        yield running


@pytest.mark.timeout(900)
@pytest.mark.parametrize("compactor", ["cache-aware", "seed"])
def test_every_turn_of_a_real_session_is_answered(server: Child, compactor: str) -> None:
    session = run_session(
        server.url, compactor=compactor, n_ctx=N_CTX, threshold=THRESHOLD, turns=TURNS
    )
    shown = report(session)
    print(shown)
    assert session.history_tokens is not None and session.history_tokens > N_CTX, shown
    assert [t.number for t in session.turns if t.status != 200] == [], shown
