"""Throughput of many concurrent requests on one session over the threshold, against direct.

Issue 13, finding 12: a session over the threshold whose cost-aware strategy declines to
compact must not serialise its requests on the compaction lease. The fake upstream (in this
process) reports a 95 % cached prompt, the proxy runs as its own process with a strategy that
always waits (`PatientCompactor`), and a session is grown past the threshold first. Then
rounds of `--concurrency` identical requests go to the upstream directly and through the
proxy, and the proxy's CPU time comes from /proc. `--under` keeps the session under its
threshold instead, for the reference ratio of the ordinary compacting path.

    python -m tests.bench.one_session [--rounds 10] [--concurrency 16] [--under]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.reliability.test_findings_data import CachingModel
from tests.support.agent import TOOLS, Agent
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
COMPACTOR = "tests.reliability.test_findings_data:PatientCompactor"


async def throughput(
    base: str, messages: list[Any], headers: dict[str, str], rounds: int, concurrency: int
) -> float:
    """Requests a second over `rounds` rounds of `concurrency` requests (one warm-up round)."""
    body = {"model": "gpt-4o", "messages": messages, "tools": TOOLS}
    limits = httpx.Limits(max_connections=4 * concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:

        async def burst() -> None:
            calls = [
                client.post("/chat/completions", json=body, headers=headers)
                for _ in range(concurrency)
            ]
            for response in await asyncio.gather(*calls):
                response.raise_for_status()

        await burst()
        started = time.perf_counter()
        for _ in range(rounds):
            await burst()
        return rounds * concurrency / (time.perf_counter() - started)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--under", action="store_true", help="keep the session under threshold")
    args = parser.parse_args()
    with FakeUpstream() as fake:
        fake.default = CachingModel()
        port = free_port()
        env = {**os.environ, "XUN_COMPACTOR": COMPACTOR, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-m", "proxy", "serve", "--port", str(port)]
        command += ["--upstream", fake.url, "--store", "memory://", "--token-threshold", "8000"]
        proxy = subprocess.Popen([*command, "--log-level", "warning"], env=env, cwd=ROOT)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(200):
                try:
                    if httpx.get(url + "/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.05)
            grow = {"X-Session-Id": "bench", "x-xun-token-threshold": str(10**9)}
            with openai.OpenAI(
                base_url=url + "/v1", api_key="sk-bench", default_headers=grow, max_retries=0
            ) as client:
                agent = Agent(client, output_size=2000)
                agent.run(20)
            auth = {"authorization": "Bearer sk-bench"}
            session = {**auth, "x-session-id": "bench", **(grow if args.under else {})}
            run = (args.rounds, args.concurrency)
            direct = asyncio.run(throughput(fake.url, agent.messages, auth, *run))
            before = cpu_seconds(proxy.pid)
            proxied = asyncio.run(throughput(url + "/v1", agent.messages, session, *run))
            cpu = (cpu_seconds(proxy.pid) - before) / ((args.rounds + 1) * args.concurrency)
            direct = (direct + asyncio.run(throughput(fake.url, agent.messages, auth, *run))) / 2
        finally:
            proxy.terminate()
            proxy.wait(timeout=15)
    result = {
        "session": "under the threshold" if args.under else "over the threshold, not compacted",
        "concurrency": args.concurrency,
        "body_kb": len(json.dumps(agent.messages)) // 1024,
        "direct_rps": round(direct, 1),
        "proxy_rps": round(proxied, 1),
        "ratio": round(proxied / direct, 2),
        "proxy_cpu_ms_per_request": round(cpu * 1000, 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
