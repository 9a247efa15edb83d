"""A scripted tool-calling agent for end-to-end tests, driven by the official openai SDK.

The fake upstream plays the model (it calls `read_file` each turn, and answers the proxy's
summary requests with a recognisable summary); this module plays the agent: it keeps the
history, runs the "tool" (a deterministic large output) and sends the whole history each
turn, exactly as a stateless chat-completions client does.
"""

from __future__ import annotations

from typing import Any

import openai

from proxy.compact import SUMMARY_PROMPT
from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from tests.support.fake_upstream import Reply

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]
SYSTEM = "You are a careful coding agent. Follow the repository's conventions."


def is_summary_request(body: dict[str, Any]) -> bool:
    """The proxy's summary calls: the prompt leads (seed) or ends the request (cache-aware)."""
    messages = body.get("messages") or []
    if not messages:
        return False
    last = messages[-1].get("content")
    return messages[0].get("content") == SUMMARY_PROMPT or (
        isinstance(last, str) and last.startswith(SUMMARY_PROMPT)
    )


def summary_count(requests: list[Any]) -> int:
    return sum(1 for r in requests if is_summary_request(r.json))


def model_requests(requests: list[Any]) -> list[Any]:
    return [r for r in requests if not is_summary_request(r.json)]


def tool_output(n: int, size: int) -> str:
    line = f"file {n}: " + "x" * 60 + "\n"
    return (line * (size // len(line) + 1))[:size]


class ModelScript:
    """Upstream responder: a tool call per turn; summaries for summary requests."""

    def __init__(self) -> None:
        self.turn = 0
        self.summaries = 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            self.summaries += 1
            return Reply.text(f"## overview\nSummary number {self.summaries} of the work.")
        self.turn += 1
        return Reply.tool("read_file", {"path": f"src/file_{self.turn}.py"})


class Agent:
    """Keeps the history and runs tools, like a real stateless client."""

    def __init__(self, client: openai.OpenAI, *, output_size: int = 2000, model: str = "gpt-4o"):
        self.client = client
        self.model = model
        self.output_size = output_size
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Read the source files one by one."},
        ]
        self.responses: list[Any] = []

    def step(self, **extra: Any) -> Any:
        resp = self.client.chat.completions.with_raw_response.create(
            model=self.model, messages=self.messages, tools=TOOLS, **extra
        )
        completion = resp.parse()
        self.responses.append(resp)
        message = completion.choices[0].message
        # Echo back the SDK's model dump: it carries the extra null fields real clients send.
        self.messages.append(message.model_dump())
        for call in message.tool_calls or []:
            assert call.function.name != EXTRACT_TOOL_NAME, "the proxy leaked its own tool"
            content = self.run_tool(call)
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        return resp

    def run_tool(self, call: Any) -> str:
        """The output of one of the model's tool calls (an SDK tool call object)."""
        return tool_output(len(self.messages), self.output_size)

    def run(self, turns: int, **extra: Any) -> None:
        for _ in range(turns):
            self.step(**extra)
