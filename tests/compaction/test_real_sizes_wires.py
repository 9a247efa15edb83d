"""Responses and Messages sessions survive a model that counts 1.5x the proxy's estimate.

The same session as tests/compaction/test_real_sizes.py on the two other wires: a stateless tool
loop through the proxy (the openai SDK's `responses.create`; the anthropic SDK's streamed
`messages`, with thinking) against tests/support/fake_counting.py's `ScaledResponses` and
`ScaledMessages`, which refuse past their window in their API's shape ("Your input exceeds the
context window of this model..." with `context_length_exceeded`; Anthropic's 400
`invalid_request_error` "prompt is too long: N tokens > M maximum"). The session grows past
three times the window; every turn must be answered 200, and the output the model asks back
once it sees a placeholder comes back whole.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from tests.conftest import proxy_settings
from tests.support.agent import SYSTEM
from tests.support.claude_checks import (
    extract_rounds,
    is_placeholder,
    main_requests,
    messages_settings,
    tool_results,
)
from tests.support.claude_model import ReadFilesModel
from tests.support.fake_counting import ScaledMessages, ScaledResponses
from tests.support.fake_responses import (
    FILE_RE,
    PLACEHOLDER_RE,
    ReadFiles,
    ResponsesRequest,
    file_text,
    input_items,
    item_text,
)
from tests.support.real_sizes import (
    COMPACTORS,
    MODEL,
    Outcome,
    Sizes,
    failures,
    file_body,
    serve_proxy,
    stuck,
)

# --- the Responses API -----------------------------------------------------------------

RESPONSES_SIZES = Sizes(window=4096, output_chars=1200, text_chars=0, turns=28)
READ_TOOL: dict[str, Any] = {
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


@pytest.mark.parametrize("compactor", COMPACTORS)
def test_a_responses_session_outgrows_the_window(compactor: str) -> None:
    """A stateless Responses loop (the whole `input` each turn) against a 1.5x count."""
    sizes = RESPONSES_SIZES
    with ScaledResponses(scale=1.5) as fake:
        fake.context_window = sizes.window
        fake.policy = model = ReadFiles(sizes.turns, tool="read_file")
        settings = proxy_settings(fake, token_threshold=sizes.threshold, compactor=compactor)
        items: list[dict[str, Any]] = [
            {"role": "developer", "content": SYSTEM},
            {"role": "user", "content": "Read file_1.txt, file_2.txt, ... one by one."},
        ]
        outcomes: list[Outcome] = []
        with (
            serve_proxy(settings) as proxy,
            openai.OpenAI(
                base_url=proxy.url + "/v1",
                api_key="sk-test",
                max_retries=0,
                default_headers={"X-Session-Id": f"responses-{compactor}"},
            ) as client,
        ):
            while len(outcomes) <= sizes.turns and not stuck(outcomes):
                try:
                    raw = client.responses.with_raw_response.create(
                        model=MODEL,
                        input=items,  # type: ignore[arg-type]
                        tools=[READ_TOOL],  # type: ignore[list-item]
                        store=False,
                        include=["reasoning.encrypted_content"],
                    )
                except openai.APIStatusError as exc:
                    body = exc.body if isinstance(exc.body, dict) else {}
                    outcomes.append(Outcome(exc.status_code, str(body.get("code")), None))
                    continue
                outcomes.append(Outcome(200, None, raw.headers.get("x-xun-compaction")))
                response = raw.parse()
                for item in response.output:
                    items.append(item.model_dump(exclude_none=True))
                    if item.type == "function_call":
                        n = int(FILE_RE.search(item.arguments).group(1))  # type: ignore[union-attr]
                        output = file_text(n, sizes.output_chars)
                        items.append(
                            {
                                "type": "function_call_output",
                                "call_id": item.call_id,
                                "output": output,
                            }
                        )
                if response.output_text:
                    break
        grown = fake.input_tokens({"model": MODEL, "tools": [READ_TOOL]}, items)
        answers = [
            item_text(i)
            for r in fake.responses_requests
            for i in input_items(r.json)
            if i.get("call_id") in model.extract_call_ids and "output" in i
        ]
        seen = [  # what the model was shown: the turns it answered, not the summary requests
            input_items(r.json)
            for r in fake.responses_requests
            if fake.answer_to(r) is not None
            and not ResponsesRequest(r.json, input_items(r.json), r.headers).is_summary_request()
        ]
        placeholders = any(
            PLACEHOLDER_RE.fullmatch(item_text(i))
            for items in seen
            for i in items
            if str(i.get("type", "")).endswith("_output")
        )

    assert failures(outcomes) == []
    assert grown >= 3 * sizes.window, f"the session reached only {grown} tokens"
    assert placeholders or model.summaries, "nothing was ever compacted"
    if placeholders:
        # The model asked the first placeholder back; the proxy answered with the whole output.
        assert model.extracted and answers, "no placeholder was asked back and answered"
        assert answers[0].startswith("file ") and len(answers[0]) == sizes.output_chars


# --- the Messages API ------------------------------------------------------------------

MESSAGES_SIZES = Sizes(window=4096, output_chars=1200, text_chars=0, turns=30)
MESSAGES_MODEL = "claude-opus-4-8"
MESSAGES_TOOL = {
    "name": "read_file",
    "description": "Read a file of the project",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}


@pytest.mark.parametrize("compactor", COMPACTORS)
def test_a_messages_session_outgrows_the_window(compactor: str) -> None:
    """A streamed Anthropic tool loop with thinking against a 1.5x count."""
    sizes = MESSAGES_SIZES
    paths = [f"src/file_{n:02d}.py" for n in range(1, sizes.turns + 1)]
    with ScaledMessages(scale=1.5) as fake:
        fake.context_window = sizes.window
        fake.policy = model = ReadFilesModel(paths, tool="read_file", path_key="path")
        settings = messages_settings(fake, token_threshold=sizes.threshold, compactor=compactor)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the files in order."}]
        outcomes: list[Outcome] = []
        with (
            serve_proxy(settings) as proxy,
            anthropic.Anthropic(
                base_url=proxy.url,
                api_key="sk-ant-test",
                max_retries=0,
                default_headers={"X-Session-Id": f"messages-{compactor}"},
            ) as client,
        ):
            while len(outcomes) <= sizes.turns + 2 and not stuck(outcomes):
                try:
                    with client.messages.stream(
                        model=MESSAGES_MODEL,
                        max_tokens=1024,
                        system=SYSTEM,
                        tools=[MESSAGES_TOOL],  # type: ignore[list-item]
                        thinking={"type": "enabled", "budget_tokens": 512},
                        messages=messages,  # type: ignore[arg-type]
                    ) as events:
                        reply = events.get_final_message()
                        compaction = events.response.headers.get("x-xun-compaction")
                except anthropic.APIStatusError as exc:
                    body = exc.body if isinstance(exc.body, dict) else {}
                    error = body.get("error") if isinstance(body.get("error"), dict) else {}
                    outcomes.append(Outcome(exc.status_code, str(error.get("type")), None))
                    continue
                outcomes.append(Outcome(200, None, compaction))
                messages.append(
                    {"role": "assistant", "content": [b.model_dump() for b in reply.content]}
                )
                calls = [b for b in reply.content if b.type == "tool_use"]
                if not calls:
                    break
                results = [
                    {
                        "type": "tool_result",
                        "tool_use_id": c.id,
                        "content": file_body(str(c.input["path"]), sizes.output_chars),  # type: ignore[index]
                    }
                    for c in calls
                ]
                messages.append({"role": "user", "content": results})
        grown = fake.input_tokens(
            {
                "model": MESSAGES_MODEL,
                "system": SYSTEM,
                "tools": [MESSAGES_TOOL],
                "messages": messages,
            }
        )
        loop = main_requests(fake, tool="read_file")
        rounds = [pair for body in loop for pair in extract_rounds(body)]
        placeholders = any(is_placeholder(r) for body in loop for r in tool_results(body))

    assert failures(outcomes) == []
    assert grown >= 3 * sizes.window, f"the session reached only {grown} tokens"
    assert placeholders or model.proxy_summaries, "nothing was ever compacted"
    if placeholders:
        # The model asked the first placeholder back; the proxy answered with the whole output.
        answered = [result for _, result in rounds if result is not None]
        assert model.extracted and answered, "no placeholder was asked back and answered"
        text = answered[0]["content"]
        text = text if isinstance(text, str) else "".join(b.get("text", "") for b in text)
        assert text.startswith("src/file_") and len(text) == sizes.output_chars
