"""The suite's guard against HTTP clients left open (`tests.support.open_clients`), run on a
small suite of its own in a fresh pytest process."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LEAKY = """
import anthropic
import httpx
import openai
import pytest


@pytest.fixture(scope="module")
def shared():
    with httpx.Client() as client:  # a module's client: closed when the module ends
        yield client


def test_closes_its_clients(shared):
    with httpx.Client(), openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k"):
        pass
    client = anthropic.Anthropic(base_url="http://127.0.0.1:9", api_key="k")
    client.close()


def test_drops_an_sdk_client():
    openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k")


def test_leaves_an_httpx_client_open():
    client = httpx.Client()
    assert not client.is_closed
"""


def test_a_client_left_open_fails_its_test_and_names_where_it_was_made(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_leaky=LEAKY)
    result = pytester.runpytest_subprocess(
        "-p", "tests.support.open_clients", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_drops_an_sdk_client*",
            "*1 HTTP client(s) left open by this test, made at:*",
            '*test_leaky.py", line *, in test_drops_an_sdk_client',
            '*openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k")',
            "*ERROR at teardown of test_leaves_an_httpx_client_open*",
            '*test_leaky.py", line *, in test_leaves_an_httpx_client_open',
            "*client = httpx.Client()",
        ]
    )
