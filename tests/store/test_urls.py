"""`open_store` URL parsing and the default store location."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from proxy.store import SessionKey, default_store_url, open_store
from proxy.store.memory import MemoryStore
from proxy.store.sqlite import SQLiteStore


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


SQLITE_URLS = {
    "sqlite:///relative.db": ("relative.db", False),
    "sqlite:///dir/relative.db": ("dir/relative.db", False),
    "sqlite:////absolute/path.db": ("/absolute/path.db", False),
    "sqlite:////absolute/path.db?mode=ro": ("/absolute/path.db", True),
    "sqlite:///:memory:": (":memory:", False),
    "  sqlite:///padded.db  ": ("padded.db", False),
}


@pytest.mark.parametrize(("url", "expected"), SQLITE_URLS.items(), ids=SQLITE_URLS.keys())
async def test_sqlite_urls(url: str, expected: tuple[str, bool]) -> None:
    store = open_store(url)
    assert isinstance(store, SQLiteStore)
    assert (store.path, store.read_only) == expected
    await store.close()


async def test_memory_url() -> None:
    store = open_store("memory://", max_session_bytes=10)
    assert isinstance(store, MemoryStore) and store.max_session_bytes == 10


@pytest.mark.parametrize("url", ["", "sqlite://", "  "])
async def test_default_is_sqlite_in_the_state_dir(url: str, state_dir: Path) -> None:
    expected = state_dir / "xun-proxy" / "sessions.db"
    assert default_store_url() == f"sqlite:///{expected}"
    store = open_store(url)
    assert isinstance(store, SQLiteStore) and store.path == str(expected)
    assert await store.ping() is True  # creates the directories
    await store.close()
    assert expected.is_file()


def test_default_without_xdg_uses_local_state(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_store_url() == f"sqlite:///{tmp_path}/.local/state/xun-proxy/sessions.db"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/is/ignored")
    assert default_store_url() == f"sqlite:///{tmp_path}/.local/state/xun-proxy/sessions.db"


async def test_relative_sqlite_path_is_relative_to_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite:///here.db")
    await store.put(SessionKey("t", "s"), b"x", {}, expected_version=None)
    await store.close()
    assert (tmp_path / "here.db").is_file()


BAD_URLS = {
    "postgres://db/x": "unsupported store URL",
    "just-a-path.db": "unsupported store URL",
    "http://example.com": "unsupported store URL",
    "memory://somewhere": "memory store takes no path",
    "sqlite://host/x.db": "sqlite:///relative.db",
    "sqlite:///": "no file path",
    "sqlite:///x.db?cache=shared": "mode=ro",
    "sqlite:///x.db?mode=rwc": "mode=ro",
}


@pytest.mark.parametrize(("url", "message"), BAD_URLS.items(), ids=BAD_URLS.keys())
def test_bad_urls_raise_value_error(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("?", r"\?")):
        open_store(url)


REDIS_URLS = {
    "redis://127.0.0.1:6379/15": ("redis://127.0.0.1:6379/15", "xun:"),
    "redis://localhost": ("redis://localhost:6379", "xun:"),
    "rediss://cache.internal:6380/2": ("rediss://cache.internal:6380/2", "xun:"),
    "redis://:secret@h:7000/1?prefix=team-a:": ("redis://h:7000/1", "team-a:"),
    "redis://h/0?socket_timeout=3&prefix=p:": ("redis://h:6379/0", "p:"),
}


@pytest.mark.parametrize(("url", "expected"), REDIS_URLS.items(), ids=REDIS_URLS.keys())
async def test_redis_urls(url: str, expected: tuple[str, str]) -> None:
    from proxy.store.redis import RedisStore

    store = open_store(url, ttl_seconds=60)
    assert isinstance(store, RedisStore)
    assert (store.where, store.prefix, store.ttl_seconds) == (*expected, 60)
    await store.close()


BAD_REDIS_URLS = {
    "redis://h:port/1": "bad port",
    "redis://h/abc": "db number",
    "redis:///0": "no host",
    "redis://:hunter2@h/abc": "db number",
}


@pytest.mark.parametrize(("url", "message"), BAD_REDIS_URLS.items(), ids=BAD_REDIS_URLS.keys())
def test_bad_redis_urls(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        open_store(url)
    assert "hunter2" not in str(info.value)


def test_redis_url_without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "proxy.store.redis", None)  # import fails
    with pytest.raises(ValueError, match=r"xun-proxy\[redis\]"):
        open_store("redis://localhost:6379/0")


def test_importing_the_package_does_not_import_redis() -> None:
    code = "import sys, proxy.store; open_store = proxy.store.open_store; "
    code += "open_store('memory://'); print('redis' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
