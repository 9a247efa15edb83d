"""The `xun-proxy` command: flag parsing into Settings, serving, and `sessions` on a store."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy import cli
from proxy.admin import sessions_cli
from proxy.server.logging import JsonFormatter, configure_logging
from proxy.settings import Settings
from proxy.store import SessionKey, open_store
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import free_port


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("XUN_"):
            monkeypatch.delenv(name)


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, dict[str, Any]]]:
    """Replace the server: record the app and options instead of serving."""
    calls: list[tuple[Any, dict[str, Any]]] = []

    def serve(app: Any, **kwargs: Any) -> int:
        calls.append((app, kwargs))
        return 0

    monkeypatch.setattr("proxy.server.lifecycle.serve", serve)
    monkeypatch.setattr("proxy.server.logging.configure_logging", lambda *a, **k: None)
    return calls


def settings_of(calls: list[tuple[Any, dict[str, Any]]]) -> Settings:
    app, _ = calls[-1]
    settings: Settings = app.state.settings
    return settings


@pytest.mark.parametrize("prefix", [[], ["serve"]])
def test_serve_flags(served: list[tuple[Any, dict[str, Any]]], prefix: list[str]) -> None:
    argv = [
        *prefix,
        "--upstream",
        "http://llm:8000/v1",
        "--upstream-api-key",
        "sk-up",
        "--host",
        "0.0.0.0",
        "--port",
        "9001",
        "--store",
        "memory://",
        "--token-threshold",
        "5000",
        "--no-auto-compact",
        "--admin-key",
        "adm",
        "--summary-model",
        "gpt-4o-mini",
        "--session-header",
        "X-A",
        "--session-header",
        "X-B",
        "--max-body-bytes",
        "1024",
        "--log-level",
        "debug",
        "--log-content",
    ]
    assert cli.main(argv) == 0
    s = settings_of(served)
    assert s.upstream_base_url == "http://llm:8000/v1" and s.upstream_api_key_value == "sk-up"
    assert (s.host, s.port, s.store_url) == ("0.0.0.0", 9001, "memory://")
    assert (s.token_threshold, s.auto_compact_enabled) == (5000, False)
    assert s.check_admin_key("adm") and s.summary_model == "gpt-4o-mini"
    assert s.session_headers == ["X-A", "X-B"]
    assert (s.max_body_bytes, s.log_level, s.log_content) == (1024, "debug", True)
    _, options = served[-1]
    assert options["host"] == "0.0.0.0" and options["port"] == 9001
    assert options["lifespan"] == "on"
    assert options["proxy_headers"] is False and options["access_log"] is False
    assert options["log_config"] is None
    assert "workers" not in options  # never uvicorn's workers: proxy.server.workers forks its own


def test_workers_flag_hands_the_settings_to_the_workers(
    served: list[tuple[Any, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runs: list[tuple[Settings, Any]] = []
    monkeypatch.setattr("proxy.server.workers.run", lambda s, serve: runs.append((s, serve)) or 0)
    store = f"sqlite:///{tmp_path / 'x.db'}"
    assert cli.main(["--workers", "3", "--store", store, "--admin-key", "adm"]) == 0
    ((settings, serve),) = runs
    assert settings.workers == 3 and settings.check_admin_key("adm") and served == []
    # What each worker runs: the one-process server, on the socket its main process bound.
    assert serve(sockets=["the socket"]) == 0
    app, options = served[-1]
    assert options["sockets"] == ["the socket"] and app.state.settings is settings


def test_no_flags_means_defaults_and_env(
    served: list[tuple[Any, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XUN_PORT", "9100")
    monkeypatch.setenv("XUN_STORE", "memory://")
    monkeypatch.setenv("XUN_SESSION_HEADER", "X-Claude-Session,X-Session-Id")
    assert cli.main([]) == 0
    s = settings_of(served)
    assert (s.port, s.store_url, s.host) == (9100, "memory://", "127.0.0.1")
    assert s.session_headers == ["X-Claude-Session", "X-Session-Id"]
    assert s.auto_compact_enabled is True
    assert cli.main(["--port", "9200"]) == 0
    assert settings_of(served).port == 9200  # the flag beats the env


def test_config_file_flag(served: list[tuple[Any, dict[str, Any]]], tmp_path: Path) -> None:
    config = tmp_path / "xun.yaml"
    config.write_text("server:\n  port: 7000\nstore:\n  url: memory://\n")
    assert cli.main(["--config", str(config)]) == 0
    assert settings_of(served).port == 7000
    assert settings_of(served).config_file == config


def test_bad_config_exits_2_naming_the_key(
    served: list[tuple[Any, dict[str, Any]]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["--token-threshold", "0", "--port", "x"]) == 2
    err = capsys.readouterr().err
    assert "auto_compact.token_threshold: Input should be greater than 0" in err
    assert "(from --token-threshold)" in err
    assert "server.port:" in err
    assert served == []


def test_bad_compactor_path_exits_2(
    served: list[tuple[Any, dict[str, Any]]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XUN_COMPACTOR", "no_such_module_xyz:Strategy")
    assert cli.main(["--store", "memory://"]) == 2
    assert "auto_compact.compactor: cannot import no_such_module_xyz:Strategy" in (
        capsys.readouterr().err
    )


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("xun-proxy ")
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "sessions" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    assert "--session-header" in capsys.readouterr().out


# -- sessions ------------------------------------------------------------------------------


SESSIONS = [
    (SessionKey("tenant-a", "s1"), {"messages": 4, "total_tokens": 900}, b'{"summary": "S1"}'),
    (SessionKey("tenant-a", "s2"), {"messages": 8, "total_tokens": 1800}, b'{"summary": null}'),
    (SessionKey("tenant-b", "s1"), {"messages": 2, "total_tokens": 100}, b"\xffnot json"),
]


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"

    async def fill() -> None:
        store = open_store(url)
        try:
            for key, meta, data in SESSIONS:
                await store.put(key, data, meta, expected_version=None)
                await asyncio.sleep(0.01)  # distinct updated_at: a stable newest-first order
        finally:
            await store.close()

    asyncio.run(fill())
    return url


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_sessions_ls(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["sessions", "ls", "--store", store_url], capsys)
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == [
        "id",
        "tenant",
        "session",
        "wire",
        "messages",
        "total_tokens",
        "updated_at",
        "size",
    ]
    # Sessions saved before the wire was noted were Chat Completions sessions.
    assert [row.split()[1:6] for row in rows] == [
        ["tenant-b", "s1", "chat", "2", "100"],
        ["tenant-a", "s2", "chat", "8", "1800"],
        ["tenant-a", "s1", "chat", "4", "900"],
    ]
    assert rows[0].split()[0] == SESSIONS[2][0].id


def test_sessions_ls_json_filter_and_pages(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        ["sessions", "ls", "--store", store_url, "--json", "--tenant", "tenant-a", "--limit", "1"],
        capsys,
    )
    assert code == 0
    (row,) = [json.loads(line) for line in out.splitlines()]
    assert (row["tenant"], row["session"], row["meta"]["messages"]) == ("tenant-a", "s2", 8)
    assert row["id"] == SESSIONS[1][0].id and row["version"] == 1
    cursor = err.split("--cursor ")[1].strip()
    argv = ["sessions", "ls", "--store", store_url, "--json", "--tenant", "tenant-a"]
    code, out, err = run([*argv, "--cursor", cursor], capsys)
    assert [json.loads(line)["session"] for line in out.splitlines()] == ["s1"]
    assert err == ""
    code, out, _ = run(["sessions", "ls", "--store", store_url, "--since", "2999-01-01"], capsys)
    assert out.splitlines()[1:] == []


def test_sessions_show(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    key, meta, _ = SESSIONS[0]
    code, out, _ = run(["sessions", "show", key.id, "--store", store_url], capsys)
    assert code == 0
    detail = json.loads(out)
    assert (detail["id"], detail["tenant"], detail["session"]) == (key.id, "tenant-a", "s1")
    assert detail["meta"] == meta and detail["state"] == {"summary": "S1"}
    binary_key = SESSIONS[2][0]
    code, out, _ = run(["sessions", "show", binary_key.id, "--store", store_url], capsys)
    assert json.loads(out)["state"] == "\ufffdnot json"


def test_sessions_export(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key, _, data = SESSIONS[1]
    code, out, _ = run(["sessions", "export", key.id, "--store", store_url], capsys)
    assert (code, out) == (0, data.decode() + "\n")
    target = tmp_path / "export.json"
    binary_key, _, binary = SESSIONS[2]
    argv = ["sessions", "export", binary_key.id, "--store", store_url, "-o", str(target)]
    assert run(argv, capsys)[0] == 0
    assert target.read_bytes() == binary


def test_sessions_rm(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = SESSIONS[0][0].id, SESSIONS[1][0].id
    code, out, err = run(
        ["sessions", "rm", first, "nosuchid", second, "--store", store_url], capsys
    )
    assert code == 1
    assert out.splitlines() == [f"deleted {first}", f"deleted {second}"]
    assert "no session nosuchid" in err
    code, out, _ = run(["sessions", "ls", "--store", store_url, "--json"], capsys)
    assert [json.loads(line)["session"] for line in out.splitlines()] == ["s1"]


def test_sessions_unknown_id_and_bad_store(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["sessions", "show", "x" * 22, "--store", store_url], capsys)[0] == 1
    code, _, err = run(["sessions", "ls", "--store", "memory://"], capsys)
    assert code == 0
    code, _, err = run(["sessions", "ls", "--store", "sqlite://relative"], capsys)
    assert code == 2 and "invalid SQLite URL" in err
    code, _, err = run(["sessions", "ls", "--store", "ftp://x"], capsys)
    assert code == 2 and "store.url:" in err


def test_sessions_store_from_env(
    store_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XUN_STORE", store_url)
    code, out, _ = run(["sessions", "ls", "--json"], capsys)
    assert code == 0 and len(out.splitlines()) == 3


# -- logging and the real process ----------------------------------------------------------


def test_configure_logging_writes_json_lines() -> None:
    import logging

    stream = io.StringIO()
    configure_logging("info", stream)
    try:
        logging.getLogger("proxy.access").info("request", extra={"fields": {"status": 200}})
        logging.getLogger("proxy.access").debug("hidden")
    finally:
        for name in ("proxy", "uvicorn", "uvicorn.error"):
            logger = logging.getLogger(name)
            logger.handlers.clear()
            logger.propagate = True
            logger.setLevel(logging.NOTSET)
    (line,) = stream.getvalue().splitlines()
    record = json.loads(line)
    assert (record["level"], record["logger"], record["msg"], record["status"]) == (
        "info",
        "proxy.access",
        "request",
        200,
    )
    assert isinstance(JsonFormatter(), logging.Formatter)


def test_console_script_serves_and_stops_on_sigterm(fake_upstream: FakeUpstream) -> None:
    port = free_port()
    env = {**os.environ, "XUN_STORE": "memory://", "XUN_UPSTREAM": fake_upstream.url}
    command = [sys.executable, "-c", "import sys; from proxy.cli import main; sys.exit(main())"]
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        response = httpx.get(
            f"http://127.0.0.1:{port}/v1/models", headers={"authorization": "Bearer sk-SECRET"}
        )
        assert response.status_code == 200
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    # uvicorn shuts down gracefully, then re-raises the signal it caught (the exit status
    # then says "terminated by SIGTERM", as process supervisors expect).
    assert process.returncode in (0, -signal.SIGTERM)
    assert b"Finished server process" in stderr
    lines = [orjson.loads(line) for line in stderr.splitlines() if line.startswith(b"{")]
    access = [line for line in lines if line.get("logger") == "proxy.access"]
    assert [(a["path"], a["status"]) for a in access] == [("/healthz", 200), ("/v1/models", 200)]
    assert b"SECRET" not in stderr
    assert fake_upstream.requests[-1].headers["authorization"] == "Bearer sk-SECRET"


def test_sessions_ls_caps_column_widths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One 10 KB session id (or one with an escape character) leaves the table readable: each
    cell is at most `CELL_CHARS` wide, cut with an ellipsis; `--json` keeps the whole id."""
    url = f"sqlite:///{tmp_path / 'wide.db'}"
    long_id = "x" * 10_000
    keys = [
        SessionKey("tenant-a", long_id),
        SessionKey("tenant-a", "two\x1blines"),
        SessionKey("t", "s"),
    ]

    async def fill() -> None:
        store = open_store(url)
        try:
            for key in keys:
                await store.put(key, b"{}", {"messages": 1}, expected_version=None)
        finally:
            await store.close()

    asyncio.run(fill())
    code, out, _ = run(["sessions", "ls", "--store", url], capsys)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 4  # the header and three rows: no id breaks a line
    assert max(len(line) for line in lines) < 200
    assert ("x" * (sessions_cli.CELL_CHARS - 1) + "…") in out
    assert "two?lines" in out
    code, out, _ = run(["sessions", "ls", "--store", url, "--json"], capsys)
    assert long_id in out
