"""A session the proxy has compacted, for the admin, viewer, metrics and secrets tests.

`compacted_session(...)` runs the scripted agent through a real proxy until a summary has
happened; with the keep windows used here the kept tail still holds reclaimed tool results,
so the session shows every kind of compaction at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from tests.conftest import RunningProxy
from tests.support.agent import Agent, ModelScript
from tests.support.fake_upstream import FakeUpstream, Reply

ADMIN_KEY = "adm-test-key-0123456789"
CLIENT_KEY = "sk-client-secret-abcdef123456"
# Settings under which the agent reaches toolcall, toolcall, summary within ~35 turns.
COMPACTING = {"token_threshold": 8000, "toolcall_keep_max": 6, "summary_keep_max": 24}
SUMMARY_MARKDOWN = """\
## overview
Summary number {n} of the work: reading **every** source file.

## key_facts
- files are read with `read_file`
- 1. ordered items stay text
- tags stay text: <img src=x onerror="window.__xss=1"><b>not bold</b>

```
def kept(): return "code block"
```
"""


class MarkdownScript(ModelScript):
    """The agent's model, answering summary requests with markdown (and an HTML trap)."""

    def __call__(self, body: dict[str, Any]) -> Reply:
        reply = super().__call__(body)
        if reply.content and reply.content.startswith("## overview"):
            return Reply.text(SUMMARY_MARKDOWN.format(n=self.summaries))
        return reply


def admin_headers(key: str = ADMIN_KEY) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@dataclass
class Compacted:
    proxy: RunningProxy
    agent: Agent
    id: str
    levels: list[str]

    def get(self, path: str = "", **kwargs: Any) -> httpx.Response:
        url = f"{self.proxy.url}/admin/sessions/{self.id}{path}"
        return httpx.get(url, headers=admin_headers(), **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        url = f"{self.proxy.url}/admin/sessions/{self.id}{path}"
        return httpx.post(url, headers=admin_headers(), **kwargs)

    def detail(self) -> dict[str, Any]:
        resp = self.get()
        assert resp.status_code == 200, resp.text
        body: dict[str, Any] = resp.json()
        return body

    def tool_output(self, call_id: str) -> str:
        for message in self.agent.messages:
            if message.get("role") == "tool" and message.get("tool_call_id") == call_id:
                return str(message["content"])
        raise KeyError(call_id)


def run_until(agent: Agent, level: str, limit: int = 80) -> list[str]:
    levels: list[str] = []
    while level not in levels:
        agent.step()
        levels.append(agent.responses[-1].headers["x-xun-compaction"])
        assert len(levels) < limit, levels
    return levels


def compacted_session(
    fake: FakeUpstream,
    make_proxy: Any,
    openai_client: Any,
    *,
    session: str = "agent-1",
    **settings: Any,
) -> Compacted:
    """A proxy (admin key set) and one session that went through toolcall and summary."""
    fake.default = MarkdownScript()
    proxy = make_proxy(**{"admin_key": ADMIN_KEY, **COMPACTING, **settings})
    agent = Agent(openai_client(proxy, session=session, api_key=CLIENT_KEY))
    levels = run_until(agent, "summary")
    session_id = agent.responses[-1].headers["x-xun-session"]
    return Compacted(proxy, agent, session_id, levels)
