"""Property-based abuse: hypothesis generates chat bodies, raw bytes, session ids and admin
paths against one running proxy (real uvicorn, SQLite store) and checks the invariants.

Invariants: the proxy never fails itself (no generic 500, no logged unhandled exception, no
traceback in a body); its own errors are OpenAI-shaped; and every stored state still parses.
The upstream is the fake, which may itself refuse or fail on nonsense: that answer is relayed.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.server.app import create_app
from proxy.session.state import SessionState
from tests.conftest import proxy_settings
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import UvicornThread

PROXY_500 = b"The proxy failed to handle the request."
EXAMPLES = 150


class Unhandled(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Unhandled]]:
    db = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
    handler = Unhandled()
    logger = logging.getLogger("proxy.errors")
    logger.addHandler(handler)
    fake = FakeUpstream().start()
    server = None
    try:
        settings = proxy_settings(fake, store_url=f"sqlite:///{db}", token_threshold=300)
        server = UvicornThread(create_app(settings)).start()
        # A real session for the generated requests to collide with.
        seed = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}
        headers = {"authorization": "Bearer sk-a", "x-session-id": "s1"}
        response = httpx.post(server.url + "/v1/chat/completions", json=seed, headers=headers)
        assert response.status_code == 200
        yield server.url, db, handler
    finally:
        if server is not None:
            server.stop()
        fake.stop()
        logger.removeHandler(handler)


json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
tool_call = st.fixed_dictionaries(
    {
        "id": st.sampled_from(["a", "b", "dup", ""]) | json_leaf,
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {"name": st.sampled_from(["f", "extract_compacted_tool_result"]) | json_leaf},
            optional={"arguments": st.text(max_size=30) | json_value},
        )
        | json_leaf,
    }
)
message = (
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "wizard"])},
        optional={
            "content": json_value,
            "tool_calls": st.lists(tool_call, max_size=3) | json_leaf,
            "tool_call_id": st.sampled_from(["a", "b", "dup", "../x"]) | json_leaf,
            "name": json_leaf,
        },
    )
    | json_value
)
chat_body = st.fixed_dictionaries(
    {"messages": st.lists(message, max_size=8) | json_leaf},
    optional={
        "model": st.just("gpt-4o") | json_leaf,
        "stream": st.booleans() | json_leaf,
        "tools": st.lists(json_value, max_size=2) | json_leaf,
        "n": json_leaf,
        "tool_choice": json_value,
    },
)
header_text = (
    st.lists(
        st.characters(min_codepoint=0x20, max_codepoint=0x7E) | st.sampled_from(["é", "/", ".."]),
        min_size=1,
        max_size=40,
    )
    .map("".join)
    .map(str.strip)
    .filter(bool)
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, bytes, dict[str, str]]:
    kind = draw(st.sampled_from(["chat", "chat", "chat", "pass", "admin"]))
    headers = {"authorization": "Bearer " + draw(st.sampled_from(["sk-a", "sk-b"]))}
    if draw(st.booleans()):
        body = draw(chat_body)
        content = orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    else:
        content = draw(st.binary(max_size=200))
    if kind == "chat":
        if draw(st.integers(0, 3)):
            headers["x-session-id"] = draw(header_text | st.sampled_from(["s1", "s2"]))
        return "POST", "/v1/chat/completions", content, headers
    if kind == "pass":
        route = draw(st.sampled_from(["/v1/embeddings", "/v1/models", "/v1/x/y"]))
        return draw(st.sampled_from(["GET", "POST"])), route, content, headers
    ident = draw(header_text).replace("/", "%2F")
    route = draw(
        st.sampled_from(
            [
                "/admin/sessions/{i}",
                "/admin/sessions/{i}/export",
                "/admin/sessions/{i}/compact",
                "/admin/sessions/{i}/compacted/{i}",
                "/admin/sessions?limit={i}&cursor={i}",
            ]
        )
    ).format(i=ident)
    return draw(st.sampled_from(["GET", "POST", "DELETE"])), route, content, headers


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(request=requests())
def test_generated_requests_never_break_the_proxy(
    target: tuple[str, Path, Unhandled], request: tuple[str, str, bytes, dict[str, str]]
) -> None:
    url, _, unhandled = target
    method, route, content, headers = request
    with httpx.Client(timeout=30) as client:
        raw = {name: value.encode() for name, value in headers.items()}  # UTF-8 ids as bytes
        sent = client.build_request(method, url + route, content=content, headers=raw)
        response = client.send(sent)
    assert PROXY_500 not in response.content
    assert b"Traceback" not in response.content
    assert not unhandled.records, [r.getMessage() for r in unhandled.records]
    if response.status_code >= 400 and "openai-version" not in response.headers:
        # An answer of the proxy's own (the fake upstream's carry openai-version).
        if response.headers.get("content-type", "").startswith("application/json"):
            error = response.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}


def test_stored_state_parses_after_the_fuzzing(target: tuple[str, Path, Unhandled]) -> None:
    _, db, _ = target
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows: list[Any] = conn.execute("SELECT data FROM sessions").fetchall()
    assert rows  # the seeded session at least
    for (data,) in rows:
        SessionState.from_bytes(bytes(data))
