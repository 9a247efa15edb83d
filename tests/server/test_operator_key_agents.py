"""The real agents keep working when the proxy holds an operator key (issue 26, item 1).

A proxy started with `--upstream-api-key` answers only loopback `Host` names, no foreign
`Origin` and JSON model bodies: Codex CLI and Claude Code, pointed at `127.0.0.1`, must
pass all three. Codex's requests spend the operator's key; Claude Code's carry Anthropic's
headers, so they go to the Anthropic upstream with the client's own key (item 2), never the
operator's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.server.app import create_app
from tests.conftest import proxy_settings
from tests.support.claude_cli import run_claude, write_files
from tests.support.claude_model import FINISHED, ReadFilesModel
from tests.support.codex_cli import run_codex
from tests.support.fake_messages import FakeMessages
from tests.support.fake_responses import FakeResponses, ReadFiles, file_text
from tests.support.servers import UvicornThread

pytestmark = pytest.mark.timeout(180)

OPERATOR_KEY = "sk-operator-secret"


@pytest.fixture
def fake_messages() -> Iterator[FakeMessages]:
    with FakeMessages() as running:
        yield running


def test_codex_spends_the_operator_key(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    for n in range(1, 4):
        (work / f"file_{n}.txt").write_text(file_text(n, 2000))
    fake = FakeResponses().start()
    fake.policy = ReadFiles(3, tool="exec_command")
    try:
        app = create_app(proxy_settings(fake, upstream_api_key=OPERATOR_KEY))
        with UvicornThread(app) as proxy:
            codex = run_codex(
                proxy.url + "/v1", work, tmp_path / "home", "Read file_1.txt to file_3.txt."
            )
        requests = fake.responses_requests
    finally:
        fake.stop()
    assert codex.returncode == 0, codex.describe()
    assert len(requests) >= 4  # three reads and the answer
    assert {r.headers["authorization"] for r in requests} == {f"Bearer {OPERATOR_KEY}"}


def test_claude_code_keeps_its_own_key(tmp_path: Path, fake_messages: FakeMessages) -> None:
    paths = write_files(tmp_path / "work", 3, 40)
    fake_messages.policy = ReadFilesModel(paths)
    with FakeResponses() as openai_side:
        settings = proxy_settings(
            openai_side,
            upstream_api_key=OPERATOR_KEY,
            anthropic_base_url=fake_messages.base_url,
        )
        with UvicornThread(create_app(settings)) as proxy:
            run = run_claude(
                proxy.url,
                tmp_path / "work",
                "Read every file in this directory in order, one file per turn, then say FINISHED.",
                home=tmp_path / "home",
            )
        assert openai_side.requests == []
    assert run.returncode == 0 and run.result.get("result") == FINISHED, run.describe()
    requests = fake_messages.messages_requests
    assert len(requests) >= len(paths) + 1
    assert {r.headers.get("x-api-key") for r in requests} == {"sk-ant-test-xun"}
    assert all(OPERATOR_KEY not in str(r.headers) for r in fake_messages.requests)
