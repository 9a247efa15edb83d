"""Disk space the SQLite store keeps in reserve, so that sessions can be deleted on a full disk.

In WAL mode every change, a delete included, is first appended to the WAL, and the WAL is
copied back into the database file (which may have to grow) before it starts over. On a full
disk both need space that is not there, so without a reserve nothing can be deleted through
the proxy. The store holds `RESERVE_BYTES` in a file beside the database (`<file>-reserve`),
made when it opens the file and there is room; when a delete finds the disk full, the file is
removed and the delete tried again, in the space it held (a WAL grows by a few pages for a
delete, and by at most its 6 MB cap before it is copied back). The next start makes it again.
"""

from __future__ import annotations

import contextlib
import os

RESERVE_BYTES = 2**20


def reserve_path(db_path: str) -> str:
    return f"{db_path}-reserve"


def make_reserve(db_path: str, size: int = RESERVE_BYTES) -> bool:
    """Make the reserve file unless it exists; False when there is no room for it (nothing
    is left behind then)."""
    path = reserve_path(db_path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return True
    except OSError:
        return False
    try:
        try:
            os.posix_fallocate(fd, 0, size)  # real blocks, not a sparse file
        except AttributeError:  # no posix_fallocate (macOS): write the bytes
            block = b"\0" * 2**20
            for _ in range(-(-size // len(block))):
                os.write(fd, block)
        os.fsync(fd)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        return False
    os.close(fd)
    return True


def release_reserve(db_path: str) -> bool:
    """Free the reserve's space; True when there was one to free."""
    try:
        os.unlink(reserve_path(db_path))
    except OSError:
        return False
    return True


__all__ = ["RESERVE_BYTES", "make_reserve", "release_reserve", "reserve_path"]
