"""Codex CLI for the tests: a pinned `@openai/codex` from the npm registry, run offline.

`python3 -m tests.support.codex_cli install` (run by scripts/test) installs it once into
`$XUN_TEST_CACHE` (default `~/.cache/xun-tests`)/codex-<version>; later runs find it there.
`run_codex()` runs `codex exec` against a custom model provider whose only setting is the
base URL (`wire_api = "responses"`), in a fresh CODEX_HOME and HOME, with no login, no
network besides that URL, no approvals and no sandbox (the scripted model only reads files
in a temp dir, and the sandbox needs kernel features CI machines may not grant).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.npm_cli import npm_install

CODEX_VERSION = "0.171.0"
API_KEY_ENV = "XUN_TEST_CODEX_API_KEY"
# A model name Codex has no metadata for would do as well; this one is what Codex users run.
MODEL = "gpt-5.1-codex"


def cache_dir() -> Path:
    return Path(os.environ.get("XUN_TEST_CACHE") or Path.home() / ".cache" / "xun-tests")


def codex_prefix() -> Path:
    return cache_dir() / f"codex-{CODEX_VERSION}"


def codex_binary() -> Path:
    return codex_prefix() / "node_modules" / ".bin" / "codex"


def installed_version(binary: Path) -> str | None:
    if not binary.exists():
        return None
    try:
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError:
        return None
    words = out.stdout.split()
    return words[-1] if out.returncode == 0 and words else None


def install() -> Path:
    """Install the pinned Codex CLI unless it is already there; return its binary."""
    return npm_install(
        "@openai/codex", CODEX_VERSION, codex_prefix(), codex_binary(), installed_version
    )


def require_codex() -> Path:
    """The installed binary, or an error that says how to install it (never a skip)."""
    binary = codex_binary()
    version = installed_version(binary)
    if version != CODEX_VERSION:
        raise AssertionError(
            f"Codex CLI {CODEX_VERSION} is not installed at {binary} (found {version!r}): "
            "run ./scripts/test, or `python3 -m tests.support.codex_cli install`"
        )
    return binary


def config_toml(
    base_url: str, *, auto_compact: int = 100_000_000, builtin_openai: bool = False
) -> str:
    """A CODEX_HOME config: one custom provider given only by its URL; Codex never compacts
    on its own during a test run (its own trigger would blur the direct/proxy comparison).

    `auto_compact` lowers Codex's own compaction limit; `builtin_openai` runs the built-in
    `openai` provider at `base_url` instead (`openai_base_url`, the key in CODEX_API_KEY),
    the one Codex compacts remotely for: a `compaction_trigger` item on `/v1/responses`."""
    provider = f'"openai"\nopenai_base_url = "{base_url}"' if builtin_openai else '"xun"'
    return f"""\
model = "{MODEL}"
model_provider = {provider}
model_context_window = 400000
model_auto_compact_token_limit = {auto_compact}
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[model_providers.xun]
name = "xun-test"
base_url = "{base_url}"
wire_api = "responses"
env_key = "{API_KEY_ENV}"
request_max_retries = 0
stream_max_retries = 0
"""


@dataclass
class CodexRun:
    returncode: int
    stdout: str
    stderr: str
    last_message: str
    home: Path

    def session_files(self) -> list[Path]:
        return sorted((self.home / "sessions").rglob("*.jsonl"))

    def session_items(self) -> list[dict[str, Any]]:
        """Every `response_item` payload Codex recorded in its own session files."""
        items = []
        for path in self.session_files():
            for line in path.read_text().splitlines():
                record = json.loads(line)
                if record.get("type") == "response_item":
                    items.append(record["payload"])
        return items

    def describe(self) -> str:
        return (
            f"codex exited {self.returncode}\n--- stdout\n{self.stdout[-3000:]}\n"
            f"--- stderr\n{self.stderr[-6000:]}"
        )


def run_codex(
    base_url: str,
    workdir: Path,
    home: Path,
    prompt: str,
    *,
    timeout: float = 60,
    auto_compact: int = 100_000_000,
    builtin_openai: bool = False,
) -> CodexRun:
    """`codex exec` in `workdir` with CODEX_HOME=`home`, talking only to `base_url`
    (`auto_compact`, `builtin_openai`: see `config_toml`)."""
    binary = require_codex()
    home.mkdir(parents=True, exist_ok=True)
    config = config_toml(base_url, auto_compact=auto_compact, builtin_openai=builtin_openai)
    (home / "config.toml").write_text(config)
    last = home / "last-message.txt"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CODEX_HOME": str(home),
        "CODEX_API_KEY" if builtin_openai else API_KEY_ENV: "sk-test-codex",
        "LANG": "C.UTF-8",
        "NO_COLOR": "1",
    }
    command = [str(binary), "exec", "--strict-config", "--skip-git-repo-check", "--color=never"]
    command += ["-C", str(workdir), "-o", str(last), prompt]
    try:
        done = subprocess.run(
            command,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or b""
        err = exc.stderr or b""
        raise AssertionError(
            f"codex exec did not finish in {timeout} s\n--- stdout\n"
            f"{out[-3000:]!r}\n--- stderr\n{err[-6000:]!r}"
        ) from None
    message = last.read_text() if last.exists() else ""
    return CodexRun(done.returncode, done.stdout, done.stderr, message, home)


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python3 -m tests.support.codex_cli install")
    print(install())
