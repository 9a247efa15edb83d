"""Installing a pinned agent CLI from the npm registry for the tests (Codex CLI, Claude Code).

Into a scratch folder first, renamed when complete, so a broken install is never "there";
skipped when the pinned version already answers `--version`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path


def npm_install(
    package: str,
    version: str,
    prefix: Path,
    binary: Path,
    installed_version: Callable[[Path], str | None],
) -> Path:
    """`npm install package@version` into `prefix` unless `binary` reports `version`."""
    if installed_version(binary) == version:
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(f"npm is needed to install {package} (Debian: apt-get install npm)")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{prefix.name}-", dir=prefix.parent))
    command = [npm, "install", "--prefix", str(scratch), "--no-audit", "--no-fund"]
    command += ["--loglevel=error", f"{package}@{version}"]
    try:
        subprocess.run(command, check=True, timeout=600)
        shutil.rmtree(prefix, ignore_errors=True)
        scratch.rename(prefix)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    found = installed_version(binary)
    if found != version:
        raise RuntimeError(f"{binary} reports version {found!r}, expected {version}")
    return binary
