"""Logs a person can read (issue 29): `--log-format console`, the default on a terminal.

The formatter's columns and its choice of format are checked in-process; then `xun-proxy`
itself runs under a pseudo-terminal (python's `pty`), serves a compacted and an uncompacted
request against the fake upstream, and its terminal shows one console line for each, in
colour unless `NO_COLOR` is set.
"""

from __future__ import annotations

import io
import json
import logging
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy.server.console_log import ConsoleFormatter
from proxy.server.logging import ACCESS_LOGGER, configure_logging, redact
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# time, status, API, model, session, compaction, tokens sent and saved, milliseconds
LINE = re.compile(
    r"^(?P<time>\d\d:\d\d:\d\d\.\d{3}) (?P<status>\d{3}) (?P<api>\S+) +(?P<model>\S+) +"
    r"(?P<session>\S+) +(?P<compaction>\S+) +sent +(?P<sent>[\d,]+|-) "
    r"saved +(?P<saved>-?[\d,]+|-) +(?P<ms>\d+|-) ms$"
)


def access_record(**fields: object) -> logging.LogRecord:
    record = logging.LogRecord(ACCESS_LOGGER, logging.INFO, __file__, 1, "request", None, None)
    record.fields = {"method": "POST", "path": "/v1/chat/completions", **fields}
    return record


@pytest.fixture
def reset_logging() -> Iterator[None]:
    yield
    for name in ("proxy", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(logging.NOTSET)


def test_an_access_line_has_the_columns() -> None:
    formatter = ConsoleFormatter(redact=redact)
    compacted = access_record(
        status=200,
        wire="chat",
        model="gpt-4o",
        session="3f9a2c1b7d0e",
        compaction="toolcall",
        tokens_before=9000,
        tokens_after=2500,
        prompt_tokens=2612,
        duration_ms=41.7,
        authorization="Bearer sk-secret",
    )
    line = formatter.format(compacted)
    found = LINE.match(line)
    assert found, line
    assert found["status"] == "200" and found["api"] == "chat" and found["model"] == "gpt-4o"
    assert (found["compaction"], found["sent"], found["saved"], found["ms"]) == (
        "toolcall",
        "2,612",
        "6,500",
        "42",
    )
    assert "sk-secret" not in line and "\x1b[" not in line
    shadowed = formatter.format(access_record(status=200, wire="messages", shadow=True))
    assert LINE.match(shadowed)["compaction"] == "shadow:-"  # type: ignore[index]
    passed = LINE.match(formatter.format(access_record(status=404, duration_ms=3)))
    assert passed and passed["api"] == "/v1/chat/completions" and passed["saved"] == "-"
    coloured = ConsoleFormatter(colour=True, redact=redact).format(compacted)
    assert "\x1b[" in coloured and ANSI.sub("", coloured) == line


def test_other_records_read_as_sentences() -> None:
    record = logging.LogRecord(
        "proxy.turn", logging.WARNING, __file__, 1, "store %s", ("down",), None
    )
    record.fields = {"api_key": "sk-x", "tries": 2}
    line = ConsoleFormatter(redact=redact).format(record)
    assert re.match(r"^\d\d:\d\d:\d\d\.\d{3} WARNING proxy.turn: store down tries=2$", line), line


def test_json_unless_a_terminal_or_asked(reset_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("info", stream)
    logging.getLogger(ACCESS_LOGGER).info("request", extra={"fields": {"status": 200}})
    assert json.loads(stream.getvalue())["status"] == 200
    stream = io.StringIO()
    configure_logging("info", stream, "console")
    logging.getLogger(ACCESS_LOGGER).info("request", extra={"fields": {"status": 200}})
    assert LINE.match(stream.getvalue().strip()), stream.getvalue()


def test_with_workers_every_line_names_its_process(reset_logging: None) -> None:
    for fmt in ("json", "console"):
        stream = io.StringIO()
        configure_logging("info", stream, fmt, pid=True)
        logging.getLogger(ACCESS_LOGGER).info("request", extra={"fields": {"status": 200}})
        logging.getLogger("proxy.workers").info("workers started")
        lines = stream.getvalue().splitlines()
        if fmt == "json":
            assert [json.loads(line)["pid"] for line in lines] == [os.getpid()] * 2
        else:
            assert all(f" [{os.getpid()}] " in line for line in lines), lines


# -- the real command under a pseudo-terminal ----------------------------------------------


def command() -> list[str]:
    """`xun-proxy`, the console script (this checkout's code first on the path)."""
    script = shutil.which("xun-proxy")
    if script is not None:
        return [script]
    return [sys.executable, "-c", "import sys; from proxy.cli import main; sys.exit(main())"]


class Terminal:
    """A process whose stdin, stdout and stderr are a pseudo-terminal; what it wrote."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        self.process = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT, close_fds=True
        )
        os.close(slave)
        self.output = b""

    def read(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the process closed the terminal
                    return
                if not chunk:
                    return
                self.output += chunk

    def wait_for(self, predicate: object, seconds: float = 20) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.read(0.1)
            if predicate():  # type: ignore[operator]
                return True
        return False

    def lines(self) -> list[str]:
        text = self.output.decode("utf-8", "replace").replace("\r\n", "\n")
        return [line for line in text.split("\n") if line]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.read(0.2)
        os.close(self.master)


def reply(body: dict[str, object]) -> Reply:
    return Reply.text("Done.")


@pytest.mark.parametrize("no_color", [False, True], ids=["colour", "NO_COLOR"])
def test_xun_proxy_on_a_terminal_writes_console_lines(
    fake_upstream: FakeUpstream, no_color: bool
) -> None:
    fake_upstream.default = reply
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("XUN_") and k != "NO_COLOR"}
    env.update(
        PYTHONPATH=str(ROOT),
        TERM="xterm-256color",
        XUN_STORE="memory://",
        XUN_UPSTREAM=fake_upstream.url,
        XUN_COMPACTOR="seed",
        XUN_TOKEN_THRESHOLD="1024",
        XUN_TOOLCALL_KEEP_MAX="1",
    )
    if no_color:
        env["NO_COLOR"] = "1"
    terminal = Terminal([*command(), "--port", str(port)], env)
    try:
        url = f"http://127.0.0.1:{port}"
        assert terminal.wait_for(lambda: b"Uvicorn running" in terminal.output), terminal.output
        history: list[dict[str, object]] = [{"role": "user", "content": "Read the files."}]
        for n in range(4):  # past the threshold: the first request compacts
            call = {"id": f"call_{n}", "type": "function"}
            call["function"] = {"name": "read_file", "arguments": f'{{"path": "f{n}.py"}}'}
            history.append({"role": "assistant", "content": None, "tool_calls": [call]})
            history.append({"role": "tool", "tool_call_id": f"call_{n}", "content": "x\n" * 1500})
        for session, messages in (("tty-1", history), ("tty-2", history[:1])):
            answer = httpx.post(
                f"{url}/v1/chat/completions",
                headers={"Authorization": "Bearer sk-test", "X-Session-Id": session},
                json={"model": "gpt-4o", "messages": messages},
                timeout=20,
            )
            assert answer.status_code == 200, answer.text
        assert terminal.wait_for(
            lambda: sum(" chat " in ANSI.sub("", line) for line in terminal.lines()) >= 2
        ), terminal.output
    finally:
        terminal.stop()
    plain = [ANSI.sub("", line) for line in terminal.lines()]
    requests = [m for m in map(LINE.match, plain) if m and m["api"] == "chat"]
    assert len(requests) == 2, plain
    compacted, small = requests
    assert (compacted["status"], compacted["model"], compacted["compaction"]) == (
        "200",
        "gpt-4o",
        "toolcall",
    )
    assert int(compacted["saved"].replace(",", "")) > 0 and compacted["sent"] != "-"
    # Nothing compacted: sent as the client would have, a net saving of nothing.
    assert (small["compaction"], small["saved"]) == ("none", "0")
    assert compacted["session"] != small["session"]
    coloured = any("\x1b[" in line for line in terminal.lines())
    assert coloured is not no_color
    assert not any(line.lstrip().startswith("{") for line in plain)  # no JSON on a terminal
    assert "sk-test" not in "\n".join(plain)
