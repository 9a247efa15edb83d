"""Responses and Messages sessions made through a real proxy, for the admin, viewer and CLI tests.

One proxy serves both wires: its OpenAI upstream is the scripted Responses fake
(tests/support/fake_responses.py), its Anthropic upstream the Messages fake
(tests/support/fake_messages.py).
`run_responses` and `run_messages` play stateless agents (the whole history every turn) that
read files with a `read_file` tool until the proxy has compacted: reasoning items with
`encrypted_content`, thinking blocks with signatures, a mid-conversation developer item /
system message, and the proxy's hidden extract call all end up in the session.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from proxy.server.app import create_app
from proxy.settings import Settings
from tests.conftest import proxy_settings
from tests.support.claude_model import ReadFilesModel
from tests.support.compacted import ADMIN_KEY, admin_headers
from tests.support.fake_messages import FakeMessages
from tests.support.fake_responses import FakeResponses, ReadFiles, file_text
from tests.support.servers import UvicornThread

RESPONSES_MODEL = "gpt-5-codex"
MESSAGES_MODEL = "claude-opus-4-8"
INSTRUCTIONS = "You are a careful coding agent. Read what you are asked to read."
REMINDER = "Reminder: answer briefly once every file is read."
FILE_CHARS = 2000
RESPONSES_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
    "strict": True,
}
MESSAGES_TOOL: dict[str, Any] = {
    "name": "read_file",
    "description": "Read a file of the project",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}
MESSAGES_SYSTEM = [
    {"type": "text", "text": "You are a careful coding agent. " * 20},
    {
        "type": "text",
        "text": "Read files before answering.",
        "cache_control": {"type": "ephemeral"},
    },
]
# Compacts within about ten turns of ~500-token files.
WIRE_COMPACTING: dict[str, Any] = {
    "token_threshold": 4000,
    "toolcall_keep_max": 2,
    "summary_keep_max": 6,
}


@dataclass
class WireProxy:
    """The two fakes and the proxy in front of them."""

    responses: FakeResponses
    messages: FakeMessages
    server: UvicornThread
    settings: Settings

    @property
    def url(self) -> str:
        return self.server.url

    def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(
            method, f"{self.url}/admin{path}", headers=admin_headers(), timeout=30, **kwargs
        )

    def detail(self, session_id: str, **params: str) -> dict[str, Any]:
        resp = self.admin("GET", f"/sessions/{session_id}", params=params)
        assert resp.status_code == 200, resp.text
        body: dict[str, Any] = resp.json()
        return body


@contextmanager
def wire_proxy(**overrides: Any) -> Iterator[WireProxy]:
    """A proxy (memory store, admin key, upstream keys for manual summaries) over both fakes."""
    with FakeResponses() as responses, FakeMessages() as messages:
        values: dict[str, Any] = {
            "anthropic_base_url": messages.base_url,
            "admin_key": ADMIN_KEY,
            "upstream_api_key": "sk-proxy-openai",
            "anthropic_api_key": "sk-ant-proxy",
            **WIRE_COMPACTING,
        }
        values.update(overrides)
        settings = proxy_settings(responses, **values)
        with UvicornThread(create_app(settings)) as server:
            yield WireProxy(responses, messages, server, settings)


@dataclass
class Run:
    """What an agent run saw: the proxy's session id and each turn's compaction header."""

    session_id: str = ""
    compactions: list[str] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)  # tool results by call id


def _turn(run: Run, resp: httpx.Response) -> dict[str, Any]:
    assert resp.status_code == 200, resp.text
    run.session_id = resp.headers["x-xun-session"]
    run.compactions.append(resp.headers["x-xun-compaction"])
    body: dict[str, Any] = resp.json()
    return body


def run_responses(proxy: WireProxy, session: str = "codex-1", files: int = 12) -> Run:
    """A stateless Responses agent through the proxy (Codex's `session-id` header)."""
    proxy.responses.policy = ReadFiles(files, tool="read_file")
    run = Run()
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "Read file_1.txt, file_2.txt, ... one by one."}
    ]
    headers = {"authorization": "Bearer sk-client-openai", "session-id": session}
    with httpx.Client(timeout=30) as client:
        for turn in range(files + 4):
            if turn == 3:
                items.append({"role": "developer", "content": REMINDER})
            body = {
                "model": RESPONSES_MODEL,
                "instructions": INSTRUCTIONS,
                "input": items,
                "tools": [RESPONSES_TOOL],
                "store": False,
                "include": ["reasoning.encrypted_content"],
            }
            reply = _turn(run, client.post(proxy.url + "/v1/responses", json=body, headers=headers))
            output = reply["output"]
            items.extend(output)
            calls = [i for i in output if i.get("type") == "function_call"]
            if not calls:
                break
            for call in calls:
                n = int(call["arguments"].split("file_")[1].split(".")[0])
                text = file_text(n, FILE_CHARS)
                run.outputs[call["call_id"]] = text
                items.append(
                    {"type": "function_call_output", "call_id": call["call_id"], "output": text}
                )
    run.history = items
    return run


def messages_file(path: str) -> str:
    return "".join(f"{path} line {i:03d}: " + "y" * 60 + "\n" for i in range(28))


def run_messages(proxy: WireProxy, session: str = "claude-1", files: int = 12) -> Run:
    """A stateless Messages agent through the proxy, as Claude Code sends it."""
    paths = [f"src/file_{n:02d}.py" for n in range(1, files + 1)]
    proxy.messages.policy = ReadFilesModel(paths, tool="read_file", path_key="path")
    run = Run()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the files in order."}]
    headers = {
        "x-api-key": "sk-ant-client",
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "mid-conversation-system",
        "x-claude-code-session-id": session,
    }
    with httpx.Client(timeout=30) as client:
        for turn in range(files + 4):
            body = {
                "model": MESSAGES_MODEL,
                "max_tokens": 4096,
                "system": MESSAGES_SYSTEM,
                "tools": [MESSAGES_TOOL],
                "thinking": {"type": "enabled", "budget_tokens": 2048},
                "messages": messages,
            }
            url = proxy.url + "/v1/messages?beta=true"
            reply = _turn(run, client.post(url, json=body, headers=headers))
            messages.append({"role": "assistant", "content": reply["content"]})
            calls = [b for b in reply["content"] if b.get("type") == "tool_use"]
            if not calls:
                break
            results = []
            for call in calls:
                text = messages_file(call["input"]["path"])
                run.outputs[call["id"]] = text
                results.append({"type": "tool_result", "tool_use_id": call["id"], "content": text})
            messages.append({"role": "user", "content": results})
            if turn == 2:
                messages.append({"role": "system", "content": REMINDER})
    run.history = messages
    return run
