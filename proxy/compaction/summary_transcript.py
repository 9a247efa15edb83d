"""A summary request for a summary upstream of its own (`--summary-upstream`), whatever the
session's API: plain Chat Completions, the conversation as one transcript.

A summary upstream is any OpenAI-compatible server (OpenAI, OpenRouter, a local llama.cpp,
vLLM or Ollama server, Anthropic's OpenAI-compatible endpoint), often with a small, cheap
model. It cannot read the session's cached prefix anyway (another model, another host), so the
request need not repeat the session's messages as they were sent: the span to summarise goes
as text in one user message, which every chat template reads, with or without tool support.
The proxy's own summary instructions stay the system message and the last user message.

Pure: neutral (Chat Completions-shaped) messages in, a request body out.
"""

from __future__ import annotations

from typing import Any

from proxy.session.extract_tool import content_text

TRANSCRIPT_OPEN = "<transcript>"
TRANSCRIPT_CLOSE = "</transcript>"


def _line(message: dict[str, Any]) -> str:
    """One message of the transcript: its role, what it said, the calls it made."""
    role = str(message.get("role") or "user")
    text = content_text(message.get("content")).strip()
    if role == "tool":
        head = f"[tool result {message.get('tool_call_id') or ''}]".replace(" ]", "]")
        return f"{head}\n{text}"
    parts = [f"[{role}]"] + ([text] if text else [])
    for call in message.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            args = fn.get("arguments")
            shown = args if isinstance(args, str) else content_text(args)
            parts.append(f"[calls {fn.get('name')} {call.get('id') or ''}] {shown}".strip())
    return "\n".join(parts)


def transcript_body(chat_body: dict[str, Any]) -> dict[str, Any]:
    """The summary request `proxy.compaction.summarizer.Summarizer` built (neutral messages:
    system instructions, the span, the closing request) as plain Chat Completions."""
    messages = [m for m in chat_body.get("messages") or [] if isinstance(m, dict)]
    system: list[str] = []
    while messages and messages[0].get("role") in ("system", "developer"):
        system.append(content_text(messages.pop(0).get("content")))
    request = ""
    if messages and messages[-1].get("role") == "user":
        request = content_text(messages.pop().get("content"))
    transcript = "\n\n".join(_line(m) for m in messages)
    user = f"{TRANSCRIPT_OPEN}\n{transcript}\n{TRANSCRIPT_CLOSE}\n\n{request}".strip()
    sent: list[dict[str, Any]] = []
    if system:
        sent.append({"role": "system", "content": "\n\n".join(system)})
    sent.append({"role": "user", "content": user})
    return {"model": chat_body.get("model"), "messages": sent, "stream": False}
