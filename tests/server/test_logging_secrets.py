"""No key and no message content in anything the proxy emits: its logs, /metrics, stored state.

The main test runs the real console script (its JSON logging as configured for production,
at debug level), drives a session through toolcall and summary compaction, uses the admin
API with right and wrong keys, then greps all of stderr, the metrics text and the SQLite
file. The access log must still say what happened: one JSON line per request with the
session and tenant hashes, model, status, upstream and proxy time and the compaction.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.server.logging import JsonFormatter, redact
from tests.support.agent import SYSTEM, Agent
from tests.support.compacted import COMPACTING, MarkdownScript, run_until
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import free_port

CLIENT_KEY = "sk-client-LEAKCHECK-1111"
UPSTREAM_KEY = "sk-upstream-LEAKCHECK-2222"
ADMIN_KEY = "adm-LEAKCHECK-3333"
WRONG_ADMIN_KEY = "adm-wrong-LEAKCHECK-4444"
USER_MARKER = "user-said-MARKER-5555"


class Proxy:
    """The `xun-proxy` console script in a subprocess."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-c", "import sys; from proxy.cli import main; sys.exit(main())"]
        self.process = subprocess.Popen(
            [*command, "serve", "--port", str(self.port), *args],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(self.url + "/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert self.process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)

    def stop(self) -> bytes:
        self.process.send_signal(signal.SIGTERM)
        _, stderr = self.process.communicate(timeout=30)
        return stderr

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


@pytest.fixture
def run_proxy() -> Iterator[Any]:
    started: list[Proxy] = []

    def start(args: list[str], env: dict[str, str]) -> Proxy:
        proxy = Proxy(args, env)
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.kill()


def test_logs_metrics_and_state_hold_no_keys_or_content(
    fake_upstream: FakeUpstream, run_proxy: Any, tmp_path: Path
) -> None:
    db = tmp_path / "sessions.db"
    env = {
        "XUN_TOOLCALL_KEEP_MAX": str(COMPACTING["toolcall_keep_max"]),
        "XUN_SUMMARY_KEEP_MAX": str(COMPACTING["summary_keep_max"]),
        "XUN_ADMIN_KEY": ADMIN_KEY,
        "XUN_SUMMARY_AHEAD": "off",  # the summary in a turn of its own, with its log line
    }
    proxy = run_proxy(
        [
            "--upstream", fake_upstream.url, "--upstream-api-key", UPSTREAM_KEY,
            "--store", f"sqlite:///{db}", "--token-threshold", str(COMPACTING["token_threshold"]),
            "--log-level", "debug",
        ],
        env,
    )  # fmt: skip
    fake_upstream.default = MarkdownScript()
    client = openai.OpenAI(
        base_url=proxy.url + "/v1",
        api_key=CLIENT_KEY,
        default_headers={"X-Session-Id": "leak-check"},
        max_retries=0,
    )
    agent = Agent(client)
    agent.messages[1]["content"] += " " + USER_MARKER
    levels = run_until(agent, "summary")
    requests = len(levels)
    client.close()

    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    session_id = agent.responses[-1].headers["x-xun-session"]
    detail = httpx.get(f"{proxy.url}/admin/sessions/{session_id}", headers=admin)
    assert detail.status_code == 200 and USER_MARKER in detail.text  # admin may show content
    wrong = httpx.get(proxy.url + "/admin/sessions", headers={"authorization": WRONG_ADMIN_KEY})
    assert wrong.status_code == 401
    listing = httpx.get(proxy.url + "/admin/sessions", headers=admin)
    metrics = httpx.get(proxy.url + "/metrics").text
    requests += 4  # detail, wrong key, listing, metrics
    stderr = proxy.stop()

    assert fake_upstream.chat_requests[-1].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    secrets = [CLIENT_KEY, UPSTREAM_KEY, ADMIN_KEY, WRONG_ADMIN_KEY]
    content = [USER_MARKER, SYSTEM, "x" * 30, "Summary number", "src/file_", "read_file"]
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith(db.name))
    assert stored, "the SQLite store wrote nothing"
    for secret in secrets:
        for where, text in (("logs", stderr), ("metrics", metrics.encode()), ("store", stored)):
            assert secret.encode() not in text, f"{secret} leaked into {where}"
    for text in content:
        assert text.encode() not in stderr, f"message content {text!r} is in the logs"
        assert text not in listing.text  # the list holds counts, not content
        if text == "read_file":  # a tool's name is a label of the look-back counters
            assert re.findall(r'tool="([^"]*)"', metrics) and text in metrics
            continue
        assert text not in metrics

    # Every line is JSON; one access line per request, saying what happened.
    lines = [orjson.loads(line) for line in stderr.splitlines() if line.strip()]
    access = [line for line in lines if line.get("logger") == "proxy.access"]
    health_checks = sum(1 for line in access if line["path"] == "/healthz")
    assert len(access) == requests + health_checks
    chat = [line for line in access if line["path"] == "/v1/chat/completions"]
    assert [line["compaction"] for line in chat] == levels
    for line in chat:
        assert line["status"] == 200 and line["model"] == "gpt-4o"
        assert line["session"] == session_id[:12] and len(line["tenant"]) == 8
        assert line["upstream_ms"] > 0 and line["proxy_ms"] >= 0
        assert line["duration_ms"] >= line["upstream_ms"]
        assert line["request_id"]
    summary_line = chat[levels.index("summary")]
    assert summary_line["summary_calls"] == 1
    assert summary_line["tokens_before"] > summary_line["tokens_after"] > 0
    assert [line["status"] for line in access if line["path"] == "/admin/sessions"] == [401, 200]


def test_formatter_drops_credential_fields_whatever_the_logger() -> None:
    import logging

    record = logging.LogRecord("xun.chat", logging.INFO, __file__, 1, "msg", None, None)
    record.fields = {  # type: ignore[attr-defined]
        "authorization": f"Bearer {CLIENT_KEY}",
        "admin_key": ADMIN_KEY,
        "upstream_api_key": UPSTREAM_KEY,
        "tokens_before": 10,
        "total_tokens": 20,
        "token_threshold": 30,
    }
    line = orjson.loads(JsonFormatter().format(record))
    assert line["tokens_before"] == 10 and line["total_tokens"] == 20
    assert line["token_threshold"] == 30
    for secret in (CLIENT_KEY, ADMIN_KEY, UPSTREAM_KEY):
        assert secret not in str(line)
    assert redact({"api-key": "k", "model": "m"}) == {"model": "m"}
