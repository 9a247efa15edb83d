"""Run the real Claude Code CLI (`claude -p`) offline against a local Messages API.

`python3 -m tests.support.claude_cli install` (run by scripts/test) installs the pinned
`@anthropic-ai/claude-code` from the npm registry once into `$XUN_TEST_CACHE` (default
`~/.cache/xun-tests`)/claude-code-<version>, beside the Codex CLI of tests/support/codex_cli.py;
`XUN_TEST_CLAUDE` names another binary instead. Only `ANTHROPIC_BASE_URL` points
Claude Code at the server under test; the rest of its environment keeps it offline and
unattended:

- `ANTHROPIC_API_KEY`: API-key auth (sent as `x-api-key`), so no login or keychain is read;
- a fresh `HOME` and `CLAUDE_CONFIG_DIR` per run: no user settings, and the session
  transcript lands in `<config>/projects/<cwd with / as ->/<session id>.jsonl`;
- `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`, `DISABLE_TELEMETRY`, `DISABLE_AUTOUPDATER`,
  `DISABLE_ERROR_REPORTING`: no call leaves the machine (with them unset, Claude Code also
  asks the model for a session title: a tool-less side request with the same session id);
- `CLAUDE_CODE_MAX_RETRIES=0`: an error answer ends the run with its message, at once;
- `--allowedTools Read`: the file reads run without a permission prompt;
  `--output-format json`: one JSON result object on stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.npm_cli import npm_install

CLAUDE_CODE_VERSION = "2.1.197"
OFFLINE_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    # A failed request fails the run at once, instead of minutes of backed-off retries.
    "CLAUDE_CODE_MAX_RETRIES": "0",
}


def claude_code_dir() -> Path:
    """The npm prefix of the pinned Claude Code."""
    cache = os.environ.get("XUN_TEST_CACHE") or Path.home() / ".cache" / "xun-tests"
    return Path(cache) / f"claude-code-{CLAUDE_CODE_VERSION}"


def installed_version(binary: Path) -> str | None:
    """What `claude --version` says (`2.1.197 (Claude Code)` -> `2.1.197`), None if nothing."""
    if not os.access(binary, os.X_OK):
        return None
    try:
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError:
        return None
    words = out.stdout.split()
    return words[0] if out.returncode == 0 and words else None


def install() -> Path:
    """Install the pinned Claude Code unless it is already there; return its binary.

    npm brings the native binary as the per-platform package of the same registry.
    """
    prefix = claude_code_dir()
    binary = prefix / "node_modules" / ".bin" / "claude"
    return npm_install(
        "@anthropic-ai/claude-code", CLAUDE_CODE_VERSION, prefix, binary, installed_version
    )


def claude_binary() -> Path:
    """The `claude` executable, or a test failure that says how to install it (never a skip)."""
    given = os.environ.get("XUN_TEST_CLAUDE")
    if given:
        if not os.access(given, os.X_OK):
            pytest.fail(f"XUN_TEST_CLAUDE={given} is not an executable", pytrace=False)
        return Path(given)
    binary = claude_code_dir() / "node_modules" / ".bin" / "claude"
    version = installed_version(binary)
    if version != CLAUDE_CODE_VERSION:
        pytest.fail(
            f"Claude Code {CLAUDE_CODE_VERSION} is not installed at {binary} (found "
            f"{version!r}): run ./scripts/test, or `python3 -m tests.support.claude_cli install`",
            pytrace=False,
        )
    return binary


@dataclass
class ClaudeRun:
    """One finished `claude -p` run."""

    returncode: int
    stdout: str
    stderr: str
    config_dir: Path
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def session_id(self) -> str:
        return str(self.result.get("session_id") or "")

    def transcript_path(self) -> Path:
        found = sorted(self.config_dir.glob(f"projects/*/{self.session_id}.jsonl"))
        assert found, f"no transcript for session {self.session_id!r} under {self.config_dir}"
        return found[0]

    def transcript(self) -> list[dict[str, Any]]:
        """The session's .jsonl records (user, assistant, attachment... one per line)."""
        lines = self.transcript_path().read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def describe(self) -> str:
        return (
            f"exit {self.returncode}\nstdout: {self.stdout[-2000:]}\nstderr: {self.stderr[-2000:]}"
        )


def run_claude(
    base_url: str,
    workdir: Path,
    prompt: str,
    *,
    home: Path,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> ClaudeRun:
    """`claude -p PROMPT` in `workdir` with its config under `home`; its JSON result parsed."""
    config_dir = home / ".claude"
    config_dir.mkdir(parents=True, exist_ok=True)
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(config_dir),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-test-xun",
        **OFFLINE_ENV,
        **(env or {}),
    }
    command = [
        str(claude_binary()),
        "-p",
        prompt,
        "--output-format",
        "json",
        "--allowedTools",
        "Read",
        *(args or []),
    ]
    try:
        done = subprocess.run(
            command,
            cwd=workdir,
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        output = [
            part.decode() if isinstance(part, bytes) else part or ""
            for part in (expired.stdout, expired.stderr)
        ]
        return ClaudeRun(-1, output[0], f"{output[1]}\n(killed after {timeout:g} s)", config_dir)
    run = ClaudeRun(done.returncode, done.stdout, done.stderr, config_dir)
    try:
        parsed = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}
    except ValueError:
        parsed = {}
    run.result = parsed if isinstance(parsed, dict) else {}
    return run


def write_files(workdir: Path, count: int, lines: int) -> list[str]:
    """`count` files of `lines` lines of 80 characters (about 20 tokens a line); their paths."""
    workdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for n in range(1, count + 1):
        path = workdir / f"file_{n:02d}.txt"
        body = "".join(f"file {n} line {i:03d}: " + "x" * 60 + "\n" for i in range(lines))
        path.write_text(body)
        paths.append(str(path))
    return paths


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python3 -m tests.support.claude_cli install")
    print(install())
