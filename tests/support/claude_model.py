"""The scripted model behind the fake Messages API: it reads files one by one, then stops.

`ReadFilesModel(paths)` is a `policy(body) -> Turn` for `FakeMessages.policy`. It answers a
request as a model would, from the request alone (plus one memory: which placeholders it
already asked back):

- the proxy's summary request (its `SUMMARY_PROMPT`) gets a summary naming the last file read;
- Claude Code's own compaction request (its summary prompt, `CLAUDE_CODE_COMPACT_PROMPT`) gets
  the `<summary>` it asks for, and is counted in `own_compactions`;
- a request without tools (a side call: a title, a quota probe) gets a short text;
- a main-loop request: when a tool_result in it is the proxy's level-1 placeholder and the
  extract tool is offered, the model calls `extract_compacted_tool_result` with the
  placeholder's id (once per id, at most `extracts` times); otherwise it reads the next
  file with the client's own tool (`Read`, input `file_path`), each turn led by a thinking
  block, and after the last file it answers `FINISHED`.

`ThinkingModel` is the same model thinking at length (what only a summary reclaims), and
noting the thinking it writes right after a round that called the extract tool.

The next file is one past the highest file the request shows read: in a `Read` call, or in a
summary's "Last file read: N" (so a summarised history goes on where it stopped).
"""

from __future__ import annotations

import re
from typing import Any

from proxy.compact import SUMMARY_PROMPT
from proxy.session.extract_tool import EXTRACT_TOOL_NAME
from tests.support.fake_messages import Turn, block_text

PLACEHOLDER = re.compile(r"\[Compacted, ID: (.+?)\. If this content is still needed")
LAST_READ = re.compile(r"Last file read: (\d+)")
# The opening of Claude Code's own compaction request (its /compact and auto-compact prompt).
CLAUDE_CODE_COMPACT_PROMPT = (
    "Your task is to create a detailed summary of the conversation so far, paying close "
    "attention to the user's explicit requests and your previous actions."
)
FINISHED = "FINISHED: every file was read."


def request_texts(body: dict[str, Any]) -> list[str]:
    """Every text of a request: system blocks, message texts, tool_result contents."""
    texts = [block_text(body.get("system"))]
    for message in body.get("messages") or []:
        content = message.get("content")
        texts.append(block_text(content))
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result":
                texts.append(block_text(block.get("content")))
    return texts


def is_proxy_summary_request(body: dict[str, Any]) -> bool:
    opening = SUMMARY_PROMPT.splitlines()[0]
    messages = body.get("messages") or []
    last = block_text(messages[-1].get("content")) if messages else ""
    return opening in last or opening in block_text(body.get("system"))


def is_own_compaction_request(body: dict[str, Any]) -> bool:
    """Claude Code's own compaction: its summary prompt in the last user message."""
    messages = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    return bool(messages) and CLAUDE_CODE_COMPACT_PROMPT in block_text(messages[-1]["content"])


def placeholders(body: dict[str, Any]) -> list[str]:
    """The ids named by level-1 placeholders in the request's tool results, in order."""
    found = []
    for message in body.get("messages") or []:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result":
                match = PLACEHOLDER.search(block_text(block.get("content")))
                if match:
                    found.append(match.group(1))
    return found


def offers_tool(body: dict[str, Any], name: str) -> bool:
    return any(t.get("name") == name for t in body.get("tools") or [])


class ReadFilesModel:
    """The policy; see the module docstring. `paths` are absolute file paths, read in order."""

    def __init__(
        self,
        paths: list[str],
        *,
        tool: str = "Read",
        path_key: str = "file_path",
        thinking: bool = True,
        extracts: int = 1,
    ) -> None:
        self.paths = paths
        self.tool = tool
        self.path_key = path_key
        self.thinking = thinking
        self.extracts = extracts
        self.extracted: list[str] = []
        self.proxy_summaries = 0
        self.own_compactions = 0
        self.side_calls = 0

    def last_read(self, body: dict[str, Any]) -> int:
        """The highest file number (1-based) the request shows as read, 0 for none."""
        last = 0
        for text in request_texts(body):
            for match in LAST_READ.finditer(text):
                last = max(last, int(match.group(1)))
        for message in body.get("messages") or []:
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_use" and block.get("name") == self.tool:
                    path = (block.get("input") or {}).get(self.path_key)
                    if path in self.paths:
                        last = max(last, self.paths.index(path) + 1)
        return last

    def summary(self, body: dict[str, Any]) -> str:
        last = self.last_read(body)
        return (
            "## Task\nRead the project's files in order, one per turn.\n"
            f"## Progress\nLast file read: {last}. Files 1 to {last} were read; "
            f"{len(self.paths) - last} remain."
        )

    def _thought(self, text: str) -> str | None:
        return text if self.thinking else None

    def __call__(self, body: dict[str, Any]) -> Turn:
        if is_proxy_summary_request(body):
            self.proxy_summaries += 1
            return Turn.text(self.summary(body))
        if is_own_compaction_request(body):
            self.own_compactions += 1
            return Turn.text(f"<summary>\n{self.summary(body)}\n</summary>")
        if not offers_tool(body, self.tool):
            self.side_calls += 1
            return Turn.text("Reading files")
        if offers_tool(body, EXTRACT_TOOL_NAME) and len(self.extracted) < self.extracts:
            waiting = [i for i in placeholders(body) if i not in self.extracted]
            if waiting:
                self.extracted.append(waiting[0])
                thought = self._thought(f"The result of {waiting[0]} was compacted; I need it.")
                return Turn.tool(EXTRACT_TOOL_NAME, {"toolcall_id": waiting[0]}, thinking=thought)
        n = self.last_read(body) + 1
        if n > len(self.paths):
            return Turn.text(FINISHED, thinking=self._thought("All files are read."))
        thought = self._thought(f"Next I read file {n} of {len(self.paths)}.")
        return Turn.tool(self.tool, {self.path_key: self.paths[n - 1]}, thinking=thought)


class ThinkingModel(ReadFilesModel):
    """`ReadFilesModel` with `thought` more sentences of thinking a turn; `after` lists the
    thinking it wrote right after an extract round (a request ending in the answer to its
    extract call), in a turn that goes on with the client's own tool."""

    def __init__(self, *args: Any, thought: int = 30, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.thought = thought
        self.after: list[str] = []

    def __call__(self, body: dict[str, Any]) -> Turn:
        turn = super().__call__(body)
        for block in turn.content:
            if block["type"] == "thinking":
                block["thinking"] += " I weigh what the files so far show." * self.thought
        messages = body.get("messages") or []
        before = messages[-2] if len(messages) >= 2 else {}
        content = before.get("content") if isinstance(before, dict) else None
        blocks = content if isinstance(content, list) else []
        called = [b.get("name") for b in blocks if b.get("type") == "tool_use"]
        now = [b["name"] for b in turn.content if b["type"] == "tool_use"]
        if called and set(called) == {EXTRACT_TOOL_NAME} and EXTRACT_TOOL_NAME not in now:
            self.after += [b["thinking"] for b in turn.content if b["type"] == "thinking"]
        return turn
