"""The session viewer in a real headless Chromium (Debian's package, driven by Playwright).

No browser is downloaded: Playwright launches /usr/bin/chromium (`.ci/run` installs it).
The screenshot lands in tests/artifacts/ (git-ignored) for a person to look at.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.agent import SYSTEM, Agent
from tests.support.compacted import ADMIN_KEY, Compacted, admin_headers, compacted_session
from tests.support.fake_upstream import FakeUpstream
from tests.support.wire_sessions import REMINDER, run_messages, run_responses, wire_proxy

sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = Path(os.environ.get("XUN_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).parents[1] / "artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@pytest.fixture
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium package")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def session(fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any) -> Compacted:
    c = compacted_session(fake_upstream, make_proxy, openai_client)
    # Two quiet turns after the summary: their results are beyond the keep window, so a
    # manual toolcall compaction has something to reclaim.
    c.agent.run(2)
    assert [r.headers["x-xun-compaction"] for r in c.agent.responses[-2:]] == ["none", "none"]
    return c


def chart_state(page: Any) -> dict[str, int]:
    svg = page.locator("#chart svg")
    return {
        name: int(svg.get_attribute(f"data-{name}") or 0) for name in ("turns", "points", "marks")
    }


def test_viewer_shows_a_compacted_session(browser: Any, session: Compacted) -> None:
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1440, "height": 1100})
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(session.proxy.url + "/admin/")

    # Without the key the API refuses and the page asks for it.
    page.wait_for_selector("#status.error")
    assert "admin key" in page.text_content("#status")
    page.fill("#key-input", ADMIN_KEY)
    page.click("#key-save")
    row = page.locator(f'.session-row[data-id="{session.id}"]')
    row.wait_for()
    assert "agent-1" in row.inner_text()

    row.click()
    page.wait_for_selector("#chart svg")
    detail = session.detail()
    before = chart_state(page)
    assert before["turns"] == len(detail["turns"]) == len(session.agent.responses)
    assert before["points"] == before["turns"]
    assert before["marks"] == 3  # toolcall, toolcall, summary
    assert page.locator("#chart .compaction-mark.mark-summary").count() == 1

    # The summary is rendered markdown; HTML inside it stays text.
    summary = page.locator("#summary")
    assert summary.locator("h4", has_text="overview").count() == 1  # "## " sits below h3
    assert summary.locator("li").count() == 3 and summary.locator("strong").count() == 1
    assert "code block" in summary.locator("pre code").inner_text()
    assert summary.locator("img, b").count() == 0
    assert '<img src=x onerror="window.__xss=1"><b>not bold</b>' in summary.inner_text()
    assert page.evaluate("window.__xss") is None
    # The client's system prompt is a kept section.
    assert SYSTEM in page.locator("#sections").inner_text()

    # A placeholder expands to the original tool result.
    placeholder = page.locator(".msg.placeholder").first
    call_id = placeholder.get_attribute("data-compacted-id")
    assert call_id and placeholder.locator(".call-id").inner_text() == call_id
    assert "Compacted, ID: " + call_id in placeholder.locator(".msg-body").inner_text()
    placeholder.locator("button.expand").click()
    original = placeholder.locator("pre.original")
    original.wait_for()
    assert original.inner_text() == session.tool_output(call_id)
    placeholders_before = page.locator(".msg.placeholder").count()

    # A manual toolcall compaction reclaims the two newer results and the chart gains a point.
    page.click("#compact-toolcall")
    page.wait_for_function(
        "n => Number(document.querySelector('#chart svg').dataset.turns) === n",
        arg=before["turns"] + 1,
    )
    after = chart_state(page)
    assert after["marks"] == before["marks"] + 1
    assert page.locator("#chart .compaction-mark.mark-manual").count() == 1
    assert page.locator(".msg.placeholder").count() == placeholders_before + 2
    # The outcome is reported once the list has been refreshed too.
    page.wait_for_selector("#status:has-text('Reclaimed 2 tool result(s)')")
    page.hover("#chart .point-manual")

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "admin-viewer.png"))
    newest = page.locator(".msg.placeholder").last
    newest.locator("button.expand").click()
    newest.locator("pre.original").wait_for()
    newest.scroll_into_view_if_needed()
    newest.screenshot(path=str(ARTIFACTS / "admin-viewer-original.png"))
    page.screenshot(path=str(ARTIFACTS / "admin-viewer-full.png"), full_page=True)

    # The key is kept for the browser session: a reload needs no second entry.
    page.reload()
    page.wait_for_selector(f'.session-row[data-id="{session.id}"]')
    page.wait_for_selector("#chart svg")
    assert chart_state(page)["turns"] == after["turns"]
    assert errors == []


def test_viewer_shows_responses_and_messages_sessions(browser: Any) -> None:
    """A Codex-like Responses session and a Claude Code-like Messages session, made through the
    real proxy: items rendered readably, opaque payloads never on the page."""
    with wire_proxy() as proxy:
        codex = run_responses(proxy)
        claude = run_messages(proxy, files=11)  # no summary: see test_admin_wires.py
        assert "toolcall" in codex.compactions and "toolcall" in claude.compactions
        blobs = [i["encrypted_content"] for i in codex.history if i.get("type") == "reasoning"]
        blobs += [
            b["signature"]
            for m in claude.history
            if m["role"] == "assistant"
            for b in m["content"]
            if b.get("type") == "thinking"
        ]
        assert len(blobs) > 10

        errors: list[str] = []
        page = browser.new_page(viewport={"width": 1440, "height": 1100})
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(proxy.url + "/admin/")
        page.fill("#key-input", ADMIN_KEY)
        page.click("#key-save")
        for run, wire in ((codex, "responses"), (claude, "messages")):
            row = page.locator(f'.session-row[data-id="{run.session_id}"]')
            row.wait_for()
            assert row.locator("td.wire").inner_text() == wire
        assert "previous_response_id" in page.inner_text("#unsupported-note")
        assert "x-xun-compaction: unsupported" in page.inner_text("#unsupported-note")

        # Responses: reasoning collapsed and shown as encrypted, calls like tool calls.
        page.click(f'.session-row[data-id="{codex.session_id}"]')
        page.wait_for_selector("#conversation .item.reasoning")
        assert "Responses" in page.inner_text("#facts")
        reasoning = page.locator(".item.reasoning").first
        assert reasoning.get_attribute("open") is None  # collapsed
        assert "encrypted reasoning" in reasoning.locator("summary").inner_text()
        reasoning.locator("summary").click()
        assert "Next, read file 1." in reasoning.locator(".item-body").inner_text()
        call = page.locator(".item.call").first
        assert call.locator(".call-name").inner_text() == "read_file"
        assert "file_1.txt" in call.locator(".item-body").inner_text()
        mid = page.locator(".msg.mid-system")
        assert mid.count() == 1 and REMINDER in mid.inner_text()
        assert "mid-conversation" in mid.locator(".role").text_content()
        _expand_first_placeholder(page, codex.outputs, "function_call_output")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "admin-viewer-responses.png"), full_page=True)
        html = page.content()
        assert not [b for b in blobs if b in html]

        # Messages: thinking collapsed, tool_use / tool_result like calls and results.
        page.click(f'.session-row[data-id="{claude.session_id}"]')
        page.wait_for_selector("#conversation .item.thinking")
        assert "Anthropic Messages" in page.inner_text("#facts")
        thinking = page.locator(".item.thinking").first
        assert thinking.get_attribute("open") is None
        assert "thinking · signed" in thinking.locator("summary").inner_text()
        thinking.locator("summary").click()
        assert "Next I read file 1 of 11." in thinking.locator(".item-body").inner_text()
        assert page.locator(".item.call .call-name", has_text="read_file").count() >= 10
        mid = page.locator(".msg.mid-system")
        assert mid.count() == 1 and REMINDER in mid.inner_text()
        assert "You are a careful coding agent." in page.locator("#sections").inner_text()
        _expand_first_placeholder(page, claude.outputs, "tool result")
        page.screenshot(path=str(ARTIFACTS / "admin-viewer-messages.png"), full_page=True)
        html = page.content()
        assert not [b for b in blobs if b in html]
        assert errors == []


def _expand_first_placeholder(page: Any, outputs: dict[str, str], wire_type: str) -> None:
    placeholder = page.locator(".msg.placeholder").first
    call_id = placeholder.get_attribute("data-compacted-id")
    assert call_id in outputs
    assert wire_type in placeholder.locator(".role").text_content()
    assert "Compacted, ID: " + call_id in placeholder.locator(".msg-body").inner_text()
    placeholder.locator("button.expand").click()
    original = placeholder.locator("pre.original")
    original.wait_for()
    assert original.inner_text() == outputs[call_id]


def test_viewer_shows_the_savings(browser: Any, session: Compacted, tmp_path: Path) -> None:
    """The fleet's savings with an hourly chart, and the session's net saving beside its token
    chart, as /admin/savings and the detail report them; a screenshot for a person."""
    report = httpx.get(
        session.proxy.url + "/admin/savings", headers=admin_headers(), params={"since": "24h"}
    ).json()
    saved = report["totals"]["tokens_saved"]
    assert saved > 0 and report["totals"]["requests"] == len(session.agent.responses)
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(session.proxy.url + "/admin/")
    page.fill("#key-input", ADMIN_KEY)
    page.click("#key-save")
    fleet = page.locator("#fleet-figures .figure.gain")
    fleet.wait_for()
    assert fleet.get_attribute("data-tokens-saved") == str(saved)
    assert page.locator("#fleet-chart svg").get_attribute("data-bars") == str(len(report["series"]))
    assert "$" in page.inner_text("#fleet-figures")  # gpt-4o is priced
    assert page.locator("#fleet-projected").is_hidden()  # no shadow turns here
    # What the models asked back, by tool: here only what level 1 reclaimed.
    (asked,) = report["lookback"]["tools"]
    fleet_row = page.locator(f'#fleet-lookback tr[data-tool="{asked["tool"]}"]')
    assert fleet_row.locator("td").nth(1).inner_text() == str(asked["reclaimed"]) != "0"

    page.click(f'.session-row[data-id="{session.id}"]')
    box = page.locator("#session-savings")
    box.wait_for()
    detail = session.detail()
    figure = box.locator(".figure").first
    assert figure.get_attribute("data-tokens-saved") == str(detail["savings"]["tokens_saved"])
    bars = page.locator("#session-chart svg")
    assert bars.get_attribute("data-bars") == str(len(detail["turns"]))
    (tool,) = detail["lookback"]["tools"]
    row = page.locator(f'#lookback-block tr[data-tool="{tool["tool"]}"]')
    assert row.get_attribute("data-policy") == tool["policy"] == "reclaim"
    assert row.locator("td").nth(1).inner_text() == str(tool["reclaimed"])
    assert "reclaimed as usual" in row.inner_text()
    assert page.locator("#session-chart .bar.gain").count() > 0
    # Beside the token chart, not under it.
    chart, panel = page.locator("#chart svg").bounding_box(), box.bounding_box()
    assert chart is not None and panel is not None and panel["x"] > chart["x"] + chart["width"]

    shot = tmp_path / "admin-savings.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"savings screenshot: {shot}")
    assert shot.stat().st_size > 10_000


def test_viewer_rings_the_turn_whose_prompt_cache_had_gone_cold(
    browser: Any, fake_upstream: FakeUpstream, make_proxy: Any, openai_client: Any
) -> None:
    proxy = make_proxy(admin_key=ADMIN_KEY)
    now = [1_800_000_000.0]
    proxy.app.state.clock = lambda: now[0]
    agent = Agent(openai_client(proxy, session="cold-viewer"), output_size=400)
    for pause in (5.0, 5.0, 3600.0, 5.0):  # the third request comes an hour later
        now[0] += pause
        agent.step()
    session = agent.responses[-1].headers["x-xun-session"]
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(proxy.url + "/admin/")
    page.fill("#key-input", ADMIN_KEY)
    page.click("#key-save")
    page.locator(f'.session-row[data-id="{session}"]').click()
    page.wait_for_selector("#chart svg")
    assert page.locator("#chart svg").get_attribute("data-cold") == "1"
    cold = page.locator("#chart circle.point-cold")
    assert cold.count() == 1
    assert "turn 3:" in cold.locator("title").text_content()
    assert "cache cold" in page.locator("#chart .legend").inner_text()
    assert errors == []
