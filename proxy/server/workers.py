"""`--workers N`: N processes serving one port, sharing the configured store.

    main process: settings validated, compactor loaded, store opened and pinged, socket bound
      -> fork N workers: each builds its own app (store, upstream pools, caches) from the
         settings it inherited, secrets included, and serves the one listening socket
      -> waits; SIGTERM or SIGINT: every worker drains (as one process does, see
         proxy.server.lifecycle), then the main process exits 0
      -> a second signal (half a second or more after the first): the workers stop at once
         (SIGQUIT to each)
      -> a worker that exits on its own: logged with its status, the others drain, and the
         main process exits 1. Nothing is restarted: the supervisor that started the proxy
         (systemd, Kubernetes, Docker) decides, and sees the failure.

Why fork from a main process that bound the socket, and not uvicorn's `workers=`: uvicorn
spawns fresh interpreters that re-read an import string, so the settings (flags, secrets
from the environment or flags) would have to be rebuilt or pickled into each; a fork carries
the validated `Settings` as they are, the checks run once, and the drain on SIGTERM is the
one the single process has. Workers share what replicas share: the store (one summary per
crossing through its lease, compare-and-set saves that merge, no lost turn record); each
keeps its own hot-state cache, which asks the store whether its entry is still current.

A worker treats every SIGTERM and SIGINT as "drain" (a terminal's Ctrl-C, or systemd's
control-group kill, reaches the workers as well as the main process), and drains by itself
should the main process go away. `/metrics` on any worker reports every worker's sum
(proxy.server.metrics); log lines carry the writing process's `pid`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, NoReturn

from prometheus_client.multiprocess import mark_process_dead

from proxy.server.app import load_compactor
from proxy.server.lifecycle import DrainingServer
from proxy.server.metrics import Metrics, share_values
from proxy.settings import Settings
from proxy.store import StoreError, open_store

log = logging.getLogger("proxy.workers")

BACKLOG = 2048  # uvicorn's default
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# A stop signal this soon after the first is the same one delivered twice (to the process and
# to its group), not an operator asking a second time to stop at once.
REPEAT_AFTER_S = 0.5
# After the store check, the main process waits this long for its threads to end: a fork
# copies only the thread that calls it, and locks other threads held stay held in the child.
_THREADS_WAIT_S = 2.0

Serve = Callable[..., int]  # `_run(settings, metrics=..., sockets=..., server_class=...)`


class WorkerServer(DrainingServer):
    """A worker's server: every SIGTERM/SIGINT drains (never a forced stop: a signal the
    main process forwards may meet the same signal sent to the whole process group), SIGQUIT
    stops at once, and the worker drains by itself when the main process is gone."""

    def __init__(self, *args: Any, parent: int, asked: threading.Event, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.parent = parent  # the main process's pid, taken before the fork
        self.asked = asked  # a stop signal came before this server's handlers were in place
        signal.signal(signal.SIGQUIT, self.stop_now)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.drain.begin()

    def stop_now(self, sig: int, frame: FrameType | None) -> None:
        self.drain.begin()
        self.should_exit = True
        self.force_exit = True

    async def on_tick(self, counter: int) -> bool:
        if self.asked.is_set():
            self.drain.begin()
        if os.getppid() != self.parent and self.drain.begin():
            log.warning("the main process is gone: draining")
        return await super().on_tick(counter)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket every worker accepts on (inherited through the fork)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(BACKLOG)  # connections queue from now on, before any worker is up
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


async def _check_store(settings: Settings) -> bool:
    store = open_store(
        settings.store_url,
        max_session_bytes=settings.session_max_bytes,
        ttl_seconds=settings.session_ttl_seconds,
    )
    try:
        return await store.ping()
    finally:
        with contextlib.suppress(StoreError):
            await store.close()


def preflight(settings: Settings) -> None:
    """What one process checks at its start, checked once for all workers: the strategy
    loads (a ConfigError otherwise), and the store is opened once (an SQLite file gets its
    schema here, not in N racing workers) and pinged; unreachable, the workers start anyway
    and `/readyz` reports it, as one process does."""
    load_compactor(settings)
    if not asyncio.run(_check_store(settings)):
        log.warning("the session store does not answer; /readyz reports it until it does")
    deadline = time.monotonic() + _THREADS_WAIT_S
    while threading.active_count() > 1 and time.monotonic() < deadline:
        time.sleep(0.01)  # the store's worker thread, shut down without waiting


class Supervisor:
    """The main process: starts the workers, forwards stop signals, and reaps them."""

    def __init__(self, settings: Settings, serve: Serve, metrics_dir: str) -> None:
        self.settings = settings
        self.serve = serve
        self.metrics_dir = metrics_dir
        self.workers: dict[int, int] = {}  # pid -> worker number
        self.stopping = False
        self.signalled_at: float | None = None  # the first stop signal, monotonic
        self.failed = False
        self.pid = os.getpid()

    def start(self, sock: socket.socket) -> None:
        # Blocked while forking: a signal between a fork and the worker's own handlers would
        # run the main process's handler in the worker.
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            for sig in _STOP_SIGNALS:
                signal.signal(sig, self.on_signal)
            for number in range(self.settings.workers):
                pid = os.fork()
                if pid == 0:
                    self._worker(sock)
                self.workers[pid] = number
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)

    def _worker(self, sock: socket.socket) -> NoReturn:
        code = 1
        asked = threading.Event()
        try:
            for sig in _STOP_SIGNALS:  # until uvicorn's are in place: kept for the first tick
                signal.signal(sig, lambda sig, frame: asked.set())
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
            share_values(self.metrics_dir)
            metrics = Metrics(shared_dir=self.metrics_dir)
            server_class = functools.partial(WorkerServer, parent=self.pid, asked=asked)
            code = self.serve(metrics=metrics, sockets=[sock], server_class=server_class)
        except SystemExit as exc:  # uvicorn's answer to a failed start
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            log.exception("worker failed")
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)  # never back into the main process's code

    def on_signal(self, sig: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.signalled_at is None:
            self.signalled_at = now
            self.stopping = True
            log.info("stopping: the workers drain", extra={"fields": {"signal": sig}})
            self.send(signal.SIGTERM)
        elif now - self.signalled_at >= REPEAT_AFTER_S:
            log.info("stopping at once", extra={"fields": {"signal": sig}})
            self.send(signal.SIGQUIT)
        # else the same stop, delivered twice (`timeout` signals the process and its group)

    def send(self, sig: int) -> None:
        for pid in list(self.workers):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass  # exited; reaped next

    def wait(self) -> int:
        """Reap the workers; 0 when they stopped because the main process was asked to and
        each exited 0, else 1."""
        while self.workers:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            number = self.workers.pop(pid, None)
            if number is None:
                continue
            code = os.waitstatus_to_exitcode(status)  # negative: the signal that ended it
            mark_process_dead(pid, self.metrics_dir)  # type: ignore[no-untyped-call]
            fields = {"worker": number, "worker_pid": pid, "status": code}
            if self.stopping:
                log.info("worker exited", extra={"fields": fields})
                self.failed = self.failed or code != 0
                continue
            log.error("worker exited; stopping the others", extra={"fields": fields})
            self.failed = True
            self.stopping = True
            self.send(signal.SIGTERM)
        return 1 if self.failed else 0


def run(settings: Settings, serve: Serve) -> int:
    """Serve with `settings.workers` processes; returns the main process's exit status."""
    preflight(settings)
    try:
        sock = bind(settings.host, settings.port)
    except OSError as exc:
        log.error("cannot listen on %s:%s: %s", settings.host, settings.port, exc)
        return 1
    port = int(sock.getsockname()[1])  # the one the system chose, for --port 0
    try:  # the workers' metric files (proxy.server.metrics), removed when they stop
        metrics_dir = tempfile.mkdtemp(prefix="xun-proxy-metrics-")
    except OSError as exc:
        sock.close()
        log.error("cannot create the workers' metrics directory: %s (set TMPDIR)", exc)
        return 1
    supervisor = Supervisor(settings, serve, metrics_dir)
    try:
        try:
            supervisor.start(sock)
        except OSError as exc:  # a fork refused: stop those that started
            log.error("cannot start the workers: %s", exc)
            supervisor.failed = supervisor.stopping = True
            supervisor.send(signal.SIGTERM)
        finally:
            sock.close()  # the workers hold it: once they all stop, connections are refused
        pids = sorted(supervisor.workers)
        fields = {"host": settings.host, "port": port, "worker_pids": pids}
        log.info("workers started", extra={"fields": fields})
        return supervisor.wait()
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
