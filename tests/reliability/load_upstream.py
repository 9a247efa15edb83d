"""The fake upstream as its own process, for the load test (so it does not share the test
process's interpreter with the load driver): `python -m tests.reliability.load_upstream`
prints its base URL, answers like a tool-using model, and stops when stdin closes."""

from __future__ import annotations

import sys
from typing import Any

from tests.support.agent import is_summary_request
from tests.support.fake_upstream import FakeUpstream, Reply


def model(body: dict[str, Any]) -> Reply:
    if is_summary_request(body):
        return Reply.text("## overview\nLoad-test summary of the session so far.")
    turns = sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant")
    if turns % 3 == 2:
        return Reply.text("Done with this step; moving on.", chunk_chars=12)
    return Reply.tool("read_file", {"path": f"src/module_{turns}.py"}, chunk_chars=12)


def main() -> None:
    with FakeUpstream() as fake:
        fake.default = model
        print(fake.url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
