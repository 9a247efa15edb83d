"""The peers we compare with, installed from PyPI into their own virtual environments and run
as black boxes: LiteLLM's proxy (a plain OpenAI pass-through) and Headroom's proxy.

The venvs live under the bench cache (`~/.cache/xun-bench/venvs/<name>`), never in the repo.
When a peer cannot be installed or started, the exact error is returned for the report.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

from tests.bench.common import CACHE, LOOPBACK, Child, free_port

VENVS = CACHE / "venvs"
LITELLM_KEY = "sk-bench-master-0123456789abcdef"  # a local-only master key LiteLLM insists on
PACKAGES = {"litellm": "litellm[proxy]", "headroom": "headroom-ai[proxy]"}
# Where LiteLLM (a dependency of both venvs) ships tiktoken's BPE files, named by the sha1 of
# their download URL, which is the layout of tiktoken's own cache (it checks their hashes).
TOKENIZERS = "lib/python{v}/site-packages/litellm/litellm_core_utils/tokenizers"
OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of the remote price list
    "HF_HUB_OFFLINE": "1",  # no model downloads: fail fast and say so in the log
    "TRANSFORMERS_OFFLINE": "1",
    "HEADROOM_TELEMETRY": "off",
    "PYTHONUNBUFFERED": "1",
}


@dataclass
class PeerSetup:
    name: str
    ok: bool
    version: str | None = None
    error: str | None = None


def venv_dir(name: str) -> Path:
    return VENVS / name


def tiktoken_cache(name: str) -> Path | None:
    """A folder holding o200k_base.tiktoken in tiktoken's cache layout, if the venv has one."""
    v = f"{sys.version_info.major}.{sys.version_info.minor}"
    path = venv_dir(name) / TOKENIZERS.format(v=v)
    return path if (path / "fb374d419588a4632f3f557e76b4b70aebbca790").exists() else None


def _clean(text: str) -> str:
    """The error lines of pip output (it warns about unused local indexes on this machine)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and "is ignored: it is neither" not in ln]
    return "\n".join(lines[-12:])


def ensure(name: str, *, install: bool = True) -> PeerSetup:
    """Create the venv and install the peer if needed; report its version or the error."""
    path = venv_dir(name)
    pip = path / "bin" / "pip"
    dist = PACKAGES[name].split("[")[0]
    if not pip.exists():
        if not install:
            return PeerSetup(name, False, error=f"no venv at {path} (run without --no-install)")
        VENVS.mkdir(parents=True, exist_ok=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(path)
    show = subprocess.run([str(pip), "show", dist], capture_output=True, text=True)
    if show.returncode != 0:
        if not install:
            return PeerSetup(name, False, error=f"{dist} not installed in {path}")
        print(f"installing {PACKAGES[name]} into {path} ...", flush=True)
        done = subprocess.run(
            [str(pip), "install", "-q", PACKAGES[name]],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if done.returncode != 0:
            return PeerSetup(
                name,
                False,
                error=f"pip install {PACKAGES[name]} failed: " + _clean(done.stderr + done.stdout),
            )
        show = subprocess.run([str(pip), "show", dist], capture_output=True, text=True)
    version = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in show.stdout.splitlines()
            if ln.startswith("Version:")
        ),
        None,
    )
    return PeerSetup(name, True, version=version)


def litellm_child(upstream: str, scratch: Path, model: str = "gpt-4o") -> Child:
    """LiteLLM's proxy with one model routed to `upstream` as a plain OpenAI endpoint."""
    config = scratch / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {model}\n"
        "    litellm_params:\n"
        f"      model: openai/{model}\n"
        f"      api_base: {upstream}/v1\n"
        "      api_key: sk-bench\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "general_settings:\n"
        f"  master_key: {LITELLM_KEY}\n"
    )
    port = free_port()
    exe = venv_dir("litellm") / "bin" / "litellm"
    argv = [str(exe), "--config", str(config), "--host", LOOPBACK, "--port", str(port)]
    argv += ["--num_workers", "1"]
    env = dict(OFFLINE_ENV)
    cache = tiktoken_cache("litellm")
    if cache:
        env["TIKTOKEN_CACHE_DIR"] = str(cache)
    return Child("litellm", argv, port, scratch / "litellm.log", env=env)


HEADROOM_FLAGS = ["--no-rate-limit", "--no-cache"]


def headroom_child(upstream: str, scratch: Path, *extra: str) -> Child:
    """Headroom's proxy in front of `upstream` (OpenAI wire). Its default rate limit (60
    requests a minute) and its response cache are turned off, or a load test would measure
    those; everything else is its default optimisation."""
    port = free_port()
    exe = venv_dir("headroom") / "bin" / "headroom"
    argv = [str(exe), "proxy", "--host", LOOPBACK, "--port", str(port)]
    argv += ["--openai-api-url", upstream, *HEADROOM_FLAGS, *extra]
    env = dict(OFFLINE_ENV)
    cache = tiktoken_cache("headroom")
    if cache:
        env["TIKTOKEN_CACHE_DIR"] = str(cache)
    # Keep its savings history and logs out of the user's home.
    env["HOME"] = str(scratch / "headroom-home")
    (scratch / "headroom-home").mkdir(exist_ok=True)
    # It writes headroom.log and its savings history into the working directory and HOME.
    return Child("headroom", argv, port, scratch / "headroom.out", env=env, cwd=scratch)


def headroom_notes(scratch: Path) -> list[str]:
    """Warnings from Headroom's output that change what it does here (offline model, tokenizer)."""
    notes: list[str] = []
    text = ""
    for name in ("headroom.out", "headroom.log"):
        try:
            text += (scratch / name).read_text(errors="replace")
        except OSError:
            continue
    for line in text.splitlines():
        if ("WARNING" in line or "ERROR" in line) and (
            "Kompress" in line or "tokenizer" in line or "Optimization failed" in line
        ):
            message = line.split(" - ", 3)[-1].strip()
            if not any(message[:50] == n[:50] for n in notes):
                notes.append(message[:400])
    return notes[:6]
