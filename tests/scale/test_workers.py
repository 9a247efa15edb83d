"""`xun-proxy --workers 2`: two processes on one port, one store, exactly like replicas.

A real `python -m proxy serve --workers 2` against the fake upstream in this process, with
an SQLite file and with Redis. Every request goes on a connection of its own, so the kernel
hands requests to both workers and a session's turns land on either. While several sessions
run at once (one thread and SDK client each), one session is grown past its threshold; then
requests that all cross it at once, spread over both workers, must cause exactly one
summary, and every turn must be recorded. `/metrics` sums both workers; access lines name
the worker's pid. SIGTERM to the main process lets a stream in flight finish, then every
process exits 0. `memory://` with two workers is refused.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.server.workers import REPEAT_AFTER_S
from tests.scale.conftest import REPO, ProxyProcess, wait_until
from tests.scale.script import API_KEY, NumberedModel, read_state, session_key
from tests.support.agent import TOOLS, Agent, is_summary_request
from tests.support.fake_upstream import FakeUpstream, Reply

THRESHOLD = 8000
WARM_TURNS = 20  # the crossing session's turns before the burst: past THRESHOLD
BURST = 8
SHORT_SESSIONS = 4
SHORT_TURNS = 6
CLOSE = {"Connection": "close"}  # a connection per request: both workers get some


def client_for(proxy: ProxyProcess, session: str, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=proxy.url + "/v1",
        api_key=API_KEY,
        default_headers={"X-Session-Id": session, **CLOSE, **headers},
        max_retries=0,
        timeout=60,
    )


def run_session(proxy: ProxyProcess, session: str, turns: int, **headers: str) -> Agent:
    with client_for(proxy, session, **headers) as client:
        agent = Agent(client, output_size=2000)
        for _ in range(turns):
            assert agent.step().status_code == 200
    return agent


async def burst(proxy: ProxyProcess, session: str, messages: list[dict[str, Any]]) -> list[Any]:
    client = openai.AsyncOpenAI(
        base_url=proxy.url + "/v1",
        api_key=API_KEY,
        default_headers={"X-Session-Id": session, **CLOSE},
        max_retries=0,
        timeout=60,
    )
    async with client:
        calls = [
            client.chat.completions.with_raw_response.create(
                model="gpt-4o", messages=messages, tools=TOOLS
            )
            for _ in range(BURST)
        ]
        return await asyncio.gather(*calls)


def log_lines(proxy: ProxyProcess) -> list[dict[str, Any]]:
    lines = []
    for raw in proxy.log_path.read_bytes().splitlines():
        if raw.startswith(b"{"):
            lines.append(orjson.loads(raw))
    return lines


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the Prometheus text `text`."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        sample, _, value = line.rpartition(" ")
        found = dict(re.findall(r'(\w+)="([^"]*)"', sample))
        if sample.split("{")[0] == name and all(found.get(k) == v for k, v in labels.items()):
            return float(value)
    raise AssertionError(f"no sample {name} {labels}")


def start_workers(store: str, upstream: str, tmp_path: Path) -> ProxyProcess:
    proxy = ProxyProcess(
        store=store,
        upstream=upstream,
        threshold=THRESHOLD,
        log_path=tmp_path / "workers.log",
        env={"XUN_ESCALATION_ROUNDS": "0"},  # a crossing is summarised at once
        extra=["--workers", "2", "--log-level", "info"],
    )
    return proxy.start()


def readyz(proxy: ProxyProcess) -> int:
    try:  # a worker that has drained closes the connections it still had
        return proxy.readyz().status_code
    except httpx.HTTPError:
        return 0


def drain_with_a_stream_in_flight(proxy: ProxyProcess, fake: FakeUpstream) -> None:
    """SIGTERM to the main process while a stream runs: the stream ends whole, /readyz turns
    503 meanwhile, and every process exits 0."""
    text = "word " * 60
    fake.push(Reply.text(text, chunk_chars=10, chunk_delay=0.05))  # 30 chunks, 1.5 s
    got: list[str] = []
    first = threading.Event()
    with client_for(proxy, "draining") as client:
        stream = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        main = proxy.proc
        assert main is not None
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                got.append(chunk.choices[0].delta.content)
                if not first.is_set():
                    first.set()
                    main.send_signal(signal.SIGTERM)
                    wait_until(lambda: readyz(proxy) == 503, 5, "/readyz to answer 503")
    assert "".join(got) == text  # the stream in flight finished, whole
    assert main.wait(timeout=30) == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(proxy.url + "/healthz", timeout=2)


def check_workers(store: str, fake: FakeUpstream, tmp_path: Path) -> None:
    fake.default = model = NumberedModel(summary_delay=0.3)  # keeps the burst's race open
    proxy = start_workers(store, fake.url, tmp_path)
    try:
        crossing = "crossing"
        # Several sessions at once; the crossing one grows without compacting (header).
        threads: list[threading.Thread] = []
        errors: list[BaseException] = []
        agents: dict[str, Agent] = {}

        def play(session: str, turns: int, **headers: str) -> None:
            try:
                agents[session] = run_session(proxy, session, turns, **headers)
            except BaseException as exc:
                errors.append(exc)

        plays: list[tuple[str, int, dict[str, str]]] = [
            (crossing, WARM_TURNS, {"x-xun-token-threshold": str(10**9)})
        ]
        plays += [(f"short-{n}", SHORT_TURNS, {}) for n in range(SHORT_SESSIONS)]
        for session, turns, headers in plays:
            threads.append(threading.Thread(target=play, args=(session, turns), kwargs=headers))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert errors == [] and len(agents) == len(plays)
        assert model.summaries == 0

        # The crossing: BURST requests over both workers at once, one summary between them.
        seen = len(fake.chat_requests)
        responses = asyncio.run(burst(proxy, crossing, agents[crossing].messages))
        assert [r.status_code for r in responses] == [200] * BURST
        levels = sorted(r.headers["x-xun-compaction"] for r in responses)
        assert levels == ["none"] * (BURST - 1) + ["summary"]
        sent = fake.chat_requests[seen:]
        assert sum(is_summary_request(r.json) for r in sent) == 1 == model.summaries
        for request in sent:  # every one went up with that summary
            if not is_summary_request(request.json):
                assert "Summary number 1" in request.json["messages"][0]["content"]

        metrics = httpx.get(proxy.url + "/metrics", timeout=10).text
        assert metric(metrics, "xun_worker_processes") == 2
        chat_requests = WARM_TURNS + SHORT_SESSIONS * SHORT_TURNS + BURST
        total = metric(metrics, "xun_requests_total", route="/v1/chat/completions", status="200")
        assert total == chat_requests  # both workers' counts, summed
        assert metric(metrics, "xun_summary_calls_total") == 1

        drain_with_a_stream_in_flight(proxy, fake)
    finally:
        proxy.stop()

    # Every turn recorded, whichever worker served it; the crossing summarised once.
    state, _ = asyncio.run(read_state(store, session_key(crossing)))
    assert len(state.turns) == WARM_TURNS + BURST
    assert sum(t["compaction"] == "summary" for t in state.turns) == 1
    assert state.summary_rounds == 1 and state.summary is not None
    for n in range(SHORT_SESSIONS):
        short, _ = asyncio.run(read_state(store, session_key(f"short-{n}")))
        assert len(short.turns) == SHORT_TURNS
    drained, _ = asyncio.run(read_state(store, session_key("draining")))
    assert len(drained.turns) == 1  # the drained stream's turn was saved before the exit

    lines = log_lines(proxy)
    started = next(line for line in lines if line["msg"] == "workers started")
    workers = set(started["worker_pids"])
    assert len(workers) == 2 and proxy.pid not in workers
    served = {
        line["pid"]
        for line in lines
        if line["logger"] == "proxy.access" and line.get("path") == "/v1/chat/completions"
    }
    assert served == workers  # both workers served requests
    exited = [line for line in lines if line["msg"] == "worker exited"]
    assert sorted(line["worker_pid"] for line in exited) == sorted(workers)
    assert all(line["status"] == 0 for line in exited)


def test_two_workers_share_an_sqlite_file(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    check_workers(f"sqlite:///{tmp_path / 'sessions.db'}", fake_upstream, tmp_path)


def test_two_workers_share_redis(
    fake_upstream: FakeUpstream, redis_store_url: str, tmp_path: Path
) -> None:
    check_workers(redis_store_url, fake_upstream, tmp_path)


@pytest.mark.parametrize("store", ["memory://", "sqlite:///:memory:"])
def test_an_in_process_store_with_two_workers_is_refused(store: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "serve", "--workers", "2", "--store", store],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"server.workers: Value error, 2 workers cannot share {store}" in done.stderr
    assert "each worker would keep sessions of its own" in done.stderr
    assert "use sqlite:///path.db or redis://host:port/db, or one worker" in done.stderr


def worker_pids(proxy: ProxyProcess) -> list[int]:
    wait_until(
        lambda: any(line["msg"] == "workers started" for line in log_lines(proxy)),
        10,
        "the workers to start",
    )
    started = next(line for line in log_lines(proxy) if line["msg"] == "workers started")
    pids: list[int] = started["worker_pids"]
    return pids


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    status = Path(f"/proc/{pid}/status").read_text()
    return "State:\tZ" in status  # exited, not yet reaped by its new parent


def test_a_worker_that_dies_stops_the_proxy_with_status_1(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_workers(f"sqlite:///{tmp_path / 's.db'}", fake_upstream.url, tmp_path)
    try:
        dead, other = worker_pids(proxy)
        os.kill(dead, signal.SIGKILL)
        assert proxy.proc is not None and proxy.proc.wait(timeout=30) == 1
        assert gone(other)  # the other drained and exited: nothing was restarted
    finally:
        proxy.stop()
    lines = log_lines(proxy)
    crash = next(line for line in lines if line["msg"] == "worker exited; stopping the others")
    assert (crash["level"], crash["worker_pid"], crash["status"]) == ("error", dead, -9)
    assert any(line["msg"] == "worker exited" and line["worker_pid"] == other for line in lines)


def test_workers_drain_when_the_main_process_is_killed(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_workers(f"sqlite:///{tmp_path / 's.db'}", fake_upstream.url, tmp_path)
    try:
        pids = worker_pids(proxy)
        assert proxy.proc is not None
        proxy.proc.kill()
        proxy.proc.wait(timeout=10)
        wait_until(lambda: all(gone(pid) for pid in pids), 20, "the orphaned workers to exit")
    finally:
        for pid in worker_pids(proxy):
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
    orphaned = [
        line for line in log_lines(proxy) if line["msg"] == "the main process is gone: draining"
    ]
    assert sorted(line["pid"] for line in orphaned) == sorted(pids)


def test_a_second_signal_stops_the_workers_at_once(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    hold = threading.Event()
    fake_upstream.push(Reply.text("never finished", hold=hold))
    proxy = start_workers(f"sqlite:///{tmp_path / 's.db'}", fake_upstream.url, tmp_path)
    try:
        with client_for(proxy, "held") as client:
            stream = client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            next(iter(stream))  # the stream is in flight, held upstream
            assert proxy.proc is not None
            proxy.proc.send_signal(signal.SIGTERM)
            wait_until(lambda: readyz(proxy) == 503, 5, "/readyz to answer 503")
            time.sleep(REPEAT_AFTER_S)  # sooner, it counts as the first delivered twice
            proxy.proc.send_signal(signal.SIGINT)
            assert proxy.proc.wait(timeout=10) == 0  # long before the 30 s drain timeout
    finally:
        hold.set()
        proxy.stop()
    assert any(line["msg"] == "stopping at once" for line in log_lines(proxy))


def test_a_signal_while_the_workers_start_stops_them_cleanly(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = ProxyProcess(
        store=f"sqlite:///{tmp_path / 's.db'}",
        upstream=fake_upstream.url,
        threshold=THRESHOLD,
        log_path=tmp_path / "workers.log",
        extra=["--workers", "2", "--log-level", "info"],
    )
    with proxy.log_path.open("ab") as log:
        proxy.proc = subprocess.Popen(
            proxy.argv, cwd=REPO, env=proxy.env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        pids = worker_pids(proxy)  # forked, most likely not serving yet
        proxy.proc.send_signal(signal.SIGTERM)
        assert proxy.proc.wait(timeout=30) == 0
    finally:
        proxy.stop()
    exited = [line for line in log_lines(proxy) if line["msg"] == "worker exited"]
    assert sorted((line["worker_pid"], line["status"]) for line in exited) == [
        (pid, 0) for pid in sorted(pids)
    ]


def test_a_signal_to_the_whole_process_group_still_lets_a_stream_finish(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A terminal's Ctrl-C, or a control-group kill, reaches the workers and the main
    process, which forwards it: a worker drains once, never takes it as a second signal;
    nor does the main process take the same signal delivered twice at once."""
    proxy = ProxyProcess(
        store=f"sqlite:///{tmp_path / 's.db'}",
        upstream=fake_upstream.url,
        threshold=THRESHOLD,
        log_path=tmp_path / "workers.log",
        extra=["--workers", "2", "--log-level", "info"],
    )
    with proxy.log_path.open("ab") as log:
        proxy.proc = subprocess.Popen(
            proxy.argv,
            cwd=REPO,
            env=proxy.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a process group of its own, for this test to signal
        )
    try:
        wait_until(lambda: readyz(proxy) == 200, 20, "the workers to serve")
        text = "word " * 40
        fake_upstream.push(Reply.text(text, chunk_chars=10, chunk_delay=0.05))  # 1 s
        got: list[str] = []
        with client_for(proxy, "group") as client:
            stream = client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    if not got:
                        # As `timeout` does: to the process, then to its whole group.
                        os.kill(proxy.proc.pid, signal.SIGINT)
                        os.killpg(proxy.proc.pid, signal.SIGINT)
                    got.append(chunk.choices[0].delta.content)
        assert "".join(got) == text
        assert proxy.proc.wait(timeout=30) == 0
    finally:
        proxy.stop()
    assert not any(line["msg"] == "stopping at once" for line in log_lines(proxy))
