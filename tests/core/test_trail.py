"""The artifact trail: what it reads from a dropped span, how it merges, how it renders.

Property tests: the rendering never outgrows its budget, merging the same span twice
changes nothing, and every path in the trail is byte-identical to text of a tool call's
argument.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy import trail
from proxy.artifacts import call_paths, command_paths, constraints, error_line, exit_status
from proxy.code_names import call_names
from proxy.conversation import Conversation
from proxy.conversation_message import SystemPrompt, message_from_json
from proxy.rules import format_compacted_summary
from proxy.session.state import SessionState
from tests.support.core_helpers import tool_call


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [tool_call(call_id, name, json.dumps(arguments))],
    }


def result(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def files(t: dict[str, Any]) -> dict[str, list[str]]:
    return {e["path"]: e["ops"] for e in t["entries"] if e["kind"] == "file"}


# -- reading ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("Read", {"file_path": "/home/u/app/main.py"}, [("/home/u/app/main.py", "read")]),
        ("Write", {"file_path": "notes/todo.md", "content": "x"}, [("notes/todo.md", "write")]),
        ("Edit", {"file_path": "a b/c.py", "old_string": "x"}, [("a b/c.py", "edit")]),
        ("delete_file", {"target_file": "build/out.o"}, [("build/out.o", "delete")]),
        # The same tool name, told apart by its sub-command (OpenHands' editor).
        ("str_replace_editor", {"command": "view", "path": "/w/src/x.c"}, [("/w/src/x.c", "read")]),
        ("str_replace_editor", {"command": "create", "path": "/w/t.py"}, [("/w/t.py", "write")]),
        # Unknown tool, unknown key: a value that parses as a path still counts.
        ("frobnicate", {"thing": "src/lib/util.rs", "n": 3}, [("src/lib/util.rs", "unknown")]),
        ("frobnicate", {"thing": "setup.cfg"}, [("setup.cfg", "unknown")]),
        ("frobnicate", {"thing": "hello world", "url": "no"}, []),
        (
            "open",
            {"path": "src/marshmallow/fields.py", "line_number": 1474},
            [("src/marshmallow/fields.py", "read")],
        ),
        ("read_many", {"paths": ["a/x.py", "b/y.py"]}, [("a/x.py", "read"), ("b/y.py", "read")]),
    ],
)
def test_paths_come_from_arguments(name: str, arguments: Any, expected: Any) -> None:
    assert call_paths(name, json.dumps(arguments)) == expected


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            "sed -n '390,415p' django/db/models/constraints.py",
            [("django/db/models/constraints.py", "read")],
        ),
        ("sed -i 's/a\\/b/c/' src/x.py", [("src/x.py", "edit")]),
        (
            "cd /testbed && rm -f build/tmp.txt",
            [("/testbed", "unknown"), ("build/tmp.txt", "delete")],
        ),
        ("cat > /tmp/fix.py << 'EOF'", [("/tmp/fix.py", "write")]),
        ("python -m pytest tests/test_a.py -q 2>&1 | tail -5", [("tests/test_a.py", "read")]),
        ("grep -rn 'a/b' src/ 2>/dev/null", [("src/", "read"), ("/dev/null", "read")]),
        ("curl -s https://example.com/x/y.json", [("https://example.com/x/y.json", "unknown")]),
        ("ls", []),
    ],
)
def test_paths_a_shell_command_names(command: str, expected: Any) -> None:
    assert command_paths(command) == expected


def test_free_text_arguments_name_paths_a_file_body_does_not() -> None:
    prompt = "Review lib/app/tmux.ex and config.exs; call render/1, not </div> or /name."
    found = call_paths("Task", json.dumps({"prompt": prompt, "description": "see docs/x"}))
    assert found == [
        ("lib/app/tmux.ex", "unknown"),
        ("config.exs", "unknown"),
        ("docs/x", "unknown"),
    ]
    body = json.dumps({"file_path": "a/b.html", "content": "<p>see lib/other.ex</p>"})
    assert call_paths("Write", body) == [("a/b.html", "write")]
    patch = "*** Begin Patch\n*** Update File: src/main.rs\n@@\n-a\n+b\n*** End Patch"
    assert call_paths("apply_patch", patch) == [("src/main.rs", "unknown")]


def test_an_argv_command_names_its_paths() -> None:
    found = call_paths("shell", json.dumps({"command": ["cat", "src/a.py"]}))
    assert found == [("src/a.py", "read")]


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("<returncode>1</returncode>\n<output>\nboom</output>", "1"),
        ("Exit code: 2\nerr", "2"),
        ("Exit code 1\nsomething failed", "1"),
        ("make: *** [all] Error 2\nexit status 2", "2"),
        ("Process exited with code 0", "0"),
        ("all good", None),
    ],
)
def test_exit_status(text: str, status: str | None) -> None:
    assert exit_status(text) == status


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            'Traceback (most recent call last):\n  File "a.py", line 1\nValueError: bad x',
            "ValueError: bad x",
        ),
        (
            "<returncode>1</returncode>\n<output>\nFAILED tests/t.py::test_a - assert 1\n</output>",
            "FAILED tests/t.py::test_a - assert 1",
        ),
        ("cat: nope.txt: No such file or directory", "cat: nope.txt: No such file or directory"),
        ("src/a.c:3:1: error: expected ';'", "src/a.c:3:1: error: expected ';'"),
        # Source code that mentions an exception is not an error when the command succeeded.
        (
            "<returncode>0</returncode>\n<output>\n    except KeyError:\n        pass\n</output>",
            None,
        ),
        ("ok", None),
    ],
)
def test_error_line(text: str, line: str | None) -> None:
    assert error_line(text) == line


def test_constraints_are_quoted_verbatim() -> None:
    text = "Fix the bug. Do not touch the migrations! You must keep Python 3.8.\nThanks"
    assert constraints(text) == ["Do not touch the migrations!", "You must keep Python 3.8."]


def span() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Fix it. Never edit tests/ directly."},
        call("c1", "bash", command="pytest tests/test_x.py"),
        result("c1", "FAILED tests/test_x.py::test_y\n" + "log line\n" * 40 + "Exit code: 1"),
        call("c2", "Edit", file_path="src/x.py", old_string="a", new_string="b"),
        result("c2", "ok"),
        call("c3", "Read", file_path="src/x.py"),
        result("c3", "print(1)"),
    ]


def test_update_keeps_every_kind_and_the_exit_status() -> None:
    t = trail.update(None, span(), budget=500)
    assert files(t) == {"tests/test_x.py": ["read"], "src/x.py": ["read", "edit"]}
    commands = [e for e in t["entries"] if e["kind"] == "command"]
    assert commands == [{"kind": "command", "text": "pytest tests/test_x.py", "exit": "1"}]
    errors = [e["text"] for e in t["entries"] if e["kind"] == "error"]
    assert errors == ["FAILED tests/test_x.py::test_y"]
    rules = [e["text"] for e in t["entries"] if e["kind"] == "constraint"]
    assert rules == ["Never edit tests/ directly."]
    assert trail.counts(t) == {"file": 2, "command": 1, "error": 1, "constraint": 1}
    assert t["budget"] == 500


def test_newest_first_and_grouped_by_path() -> None:
    t = trail.update(None, span())
    t = trail.update(t, [call("c9", "Read", file_path="docs/a.md"), result("c9", "x")])
    text = trail.render(t)
    assert text.startswith(trail.TRAIL_HEADING)
    start = text.index("### files")
    file_lines = [ln for ln in text[start:].splitlines()[1:4]]
    # Only a changed file's line names its operations: a path alone was read (or named).
    assert file_lines == ["- docs/a.md", "- src/x.py: read, edit", "- tests/test_x.py"]
    assert text.count("src/x.py:") == 1


def test_over_budget_the_oldest_go_and_are_counted() -> None:
    messages: list[dict[str, Any]] = []
    for i in range(200):
        messages += [call(f"c{i}", "Read", file_path=f"pkg/module_{i:03}.py"), result(f"c{i}", "")]
    t = trail.update(None, messages, budget=300)
    text = trail.render(t)
    assert trail.estimate_tokens(text) <= 300
    assert "pkg/module_199.py" in text and "pkg/module_000.py" not in text
    shown = text.count("pkg/module_")
    assert f"({200 - shown} older entries not shown" in text


def test_default_budget() -> None:
    assert trail.default_budget(32_000) == 2400
    assert trail.default_budget(16_000) == 1200
    assert trail.default_budget(64_000) == 2400
    assert trail.default_budget(None) == 2400


# -- the hooks: conversation, saved forms, session state -------------------------------------


def test_summary_carries_the_trail_inside_the_fence() -> None:
    conv = Conversation()
    conv.set_persistent_section("client", "You are an agent.")
    for m in span():
        conv.append(message_from_json({"kind": "raw", "raw": m}))
    conv.add_user_message("next")
    conv.add_agent_message({"role": "assistant", "content": "ok"})
    conv.trail_budget = 400
    conv.compact_toolcall(keep_max=0)  # the error and exit code hide behind placeholders
    seen: list[list[dict[str, Any]]] = []
    result_ = conv.compact(lambda m: seen.append(m) or "the summary", keep_recent=2)
    assert result_.ok
    system = conv.messages[0]
    assert isinstance(system, SystemPrompt) and system.trail is not None
    text = system.text()
    assert text.index("src/x.py: read, edit") < text.index("</conversation_summary>")
    assert "`pytest tests/test_x.py` -> exit 1" in text  # read from the reclaimed original
    assert text.endswith("You are an agent.")
    # A new summary reads the earlier summary, not the trail: the trail is merged instead.
    assert "artifact_trail" not in system.text(with_sections=False)
    conv.add_user_message("more")
    conv.add_agent_message(call("c7", "Write", file_path="out/report.txt"))
    conv.add_tool_result("c7", "written")
    conv.add_user_message("again")
    conv.compact(lambda m: seen.append(m) or "second", keep_recent=1)
    assert all("artifact_trail" not in str(m) for m in seen[-1])
    assert files(conv.messages[0].trail)["out/report.txt"] == ["write"]  # type: ignore[union-attr]
    assert "src/x.py" in files(conv.messages[0].trail)  # type: ignore[union-attr]


def test_saved_forms_keep_the_trail_and_old_ones_still_load() -> None:
    t = trail.update(None, span())
    prompt = SystemPrompt("s", True, {}, t)
    again = message_from_json(json.loads(json.dumps(prompt.to_json())))
    assert again == prompt
    assert "trail" not in SystemPrompt("s", True).to_json()
    conv = Conversation([prompt])
    assert Conversation.loads(conv.dumps()).messages[0] == prompt

    state = SessionState(summary="s", trail=t)
    assert SessionState.from_bytes(state.to_bytes()).trail == t
    old = state.to_dict()
    del old["trail"]
    assert SessionState.from_dict(old).trail is None


# -- properties -------------------------------------------------------------------------------

segments = st.text(alphabet="abcxyz_-.0123456789", min_size=1, max_size=8)
paths = st.builds(
    lambda lead, parts, ext: lead + "/".join(parts) + ext,
    st.sampled_from(["", "/", "./", "~/"]),
    st.lists(segments, min_size=1, max_size=4),
    st.sampled_from(["", ".py", ".md", ".json", "/"]),
)
texts = st.text(max_size=60)


@st.composite
def messages(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["file", "bash", "user", "odd"]))
        cid = f"c{n}"
        if kind == "file":
            key = draw(st.sampled_from(["path", "file_path", "filename", "target", "other"]))
            name = draw(st.sampled_from(["Read", "Write", "Edit", "rm_file", "tool"]))
            out.append(call(cid, name, **{key: draw(paths)}))
        elif kind == "bash":
            words = draw(st.lists(st.one_of(paths, texts, st.sampled_from(["&&", "|", ">"]))))
            out.append(call(cid, "bash", command=" ".join(["cat", *words])))
        elif kind == "odd":
            out.append(call(cid, "x", **{"value": draw(texts), "nested": {"file": draw(paths)}}))
        else:
            out.append({"role": "user", "content": draw(texts) + " never " + draw(texts)})
            continue
        out.append(result(cid, draw(st.sampled_from(["", "Exit code: 1", "Error: x\nmore"]))))
    return out


@settings(max_examples=150, deadline=None)
@given(messages(), messages(), st.integers(0, 2000))
def test_rendering_never_outgrows_its_budget(
    a: list[dict[str, Any]], b: list[dict[str, Any]], budget: int
) -> None:
    t = trail.update(trail.update(None, a, budget=budget), b)
    assert trail.estimate_tokens(trail.render(t)) <= budget
    assert trail.estimate_tokens(trail.render(t, budget // 2)) <= budget // 2


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.none(), messages()), messages())
def test_merging_the_same_span_twice_changes_nothing(
    before: list[dict[str, Any]] | None, dropped: list[dict[str, Any]]
) -> None:
    start = None if before is None else trail.update(None, before)
    once = trail.update(start, dropped)
    assert trail.update(once, dropped) == once
    assert json.loads(json.dumps(once)) == once  # stored as JSON in the session state


def _argument_strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _argument_strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _argument_strings(v)]
    return [value] if isinstance(value, str) else []


@settings(max_examples=150, deadline=None)
@given(messages())
def test_a_path_in_the_trail_is_byte_identical_to_the_tool_call(
    dropped: list[dict[str, Any]],
) -> None:
    arguments = [
        s
        for m in dropped
        for c in m.get("tool_calls") or []
        for s in _argument_strings(json.loads(c["function"]["arguments"]))
    ]
    t = trail.update(None, dropped)
    for path in files(t):
        assert any(path in s for s in arguments), path
    for name in ("path", "file_path", "filename", "target"):
        for m in dropped:
            for c in m.get("tool_calls") or []:
                value = json.loads(c["function"]["arguments"]).get(name)
                if isinstance(value, str) and any(ch.isalnum() for ch in value):
                    assert value in files(t), value


def test_the_fenced_summary_of_any_wire_carries_the_trail() -> None:
    from proxy.compact import COMPACTED_SYSTEM_PROMPT, format_compacted_summary

    t = trail.update(None, span())
    fenced = format_compacted_summary("the summary", t)
    assert fenced == COMPACTED_SYSTEM_PROMPT.format(summary=f"the summary\n\n{trail.render(t)}")
    assert format_compacted_summary("the summary", None) == format_compacted_summary("the summary")
    assert SystemPrompt("the summary", True, {"c": "client"}, t).text() == f"{fenced}\n\nclient"


@settings(max_examples=60, deadline=None)
@given(messages(), messages(), st.integers(0, 2000))
def test_a_remembered_rendering_is_the_rendering(
    first: list[dict[str, Any]], second: list[dict[str, Any]], budget: int
) -> None:
    """`render` remembers by the trail object, never by an equal one or another budget."""
    older = trail.update(None, first, budget=budget)
    newer = trail.update(older, second)
    for t in (older, newer, older, json.loads(json.dumps(newer)), newer):
        assert trail.render(t) == trail._render(t, None)
        assert trail.render(t, budget // 2) == trail._render(t, budget // 2)


def test_a_trail_is_rendered_once_while_its_state_lasts() -> None:
    entries = [{"kind": "file", "path": f"src/m{i}.py", "ops": ["read"]} for i in range(1000)]
    kept = {"version": 1, "budget": 1500, "entries": entries}
    text = trail.render(kept)
    entries.append({"kind": "file", "path": "src/new.py", "ops": ["read"]})  # never done
    assert trail.render(kept) is text  # remembered: the same object is the same trail
    fresh = {**kept, "entries": list(entries)}
    assert trail.render(fresh) != text and "src/new.py" in trail.render(fresh)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("I read src/x.py before.", True),
        ("I read src/x.py.", True),
        ("see (src/x.py)", True),
        ("src/x.py", True),
        ("lib/src/x.py", False),  # inside a longer path
        ("src/x.pyc", False),
        ("src/x.py.orig", False),
        ("nothing here", False),
    ],
)
def test_a_path_is_named_whole(text: str, named: bool) -> None:
    assert trail._named_in("src/x.py", text) is named


def test_files_the_summary_names_are_not_listed_again() -> None:
    entries = [
        {"kind": "file", "path": "src/read.py", "ops": ["read"]},
        {"kind": "file", "path": "src/edited.py", "ops": ["read", "edit"]},
        {"kind": "file", "path": "src/other.py", "ops": ["read"]},
    ]
    t = {"version": 1, "budget": 500, "entries": entries}
    summary = "## overview\nRead src/read.py and changed src/edited.py."
    text = trail.render(t, shown=summary)
    assert "- src/read.py" not in text  # the summary has it verbatim
    assert "- src/edited.py: read, edit" in text  # a change keeps its operations
    assert "- src/other.py" in text
    assert trail.render(t) != text and "- src/read.py" in trail.render(t)
    fenced = format_compacted_summary(summary, t)
    assert fenced.count("src/read.py") == 1 and "src/other.py" in fenced


def test_long_tool_results_scanned_once_give_what_scanning_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A span read again (each request that applies a session's summary) finds the same
    entries; a long result's scans are remembered, within a bound in characters."""
    from proxy import artifacts

    monkeypatch.setattr(artifacts, "_remembered", artifacts.OrderedDict())
    monkeypatch.setattr(artifacts, "_remembered_chars", [0])
    monkeypatch.setattr(artifacts, "REMEMBERED_MAX_CHARS", 12_000)
    outputs = [
        "ok\n" * 600 + "Exit code: 0",
        "line\n" * 500 + "Traceback (most recent call last):\n  x\nValueError: bad",
        "short: Exit code: 2",
        "x" * 5000 + "\nexit status 3",
    ]
    span: list[dict[str, Any]] = []
    for n, output in enumerate(outputs):
        call = tool_call(f"c{n}", "bash", json.dumps({"command": f"make t{n}"}))
        span.append({"role": "assistant", "content": None, "tool_calls": [call]})
        span.append({"role": "tool", "tool_call_id": f"c{n}", "content": output})
    first = artifacts.entries_of(span)
    again = artifacts.entries_of(span)
    assert first == again
    statuses = [e.get("exit") for e in first if e["kind"] == "command"]
    assert statuses == [exit_status(o) for o in outputs]
    assert [e["text"] for e in first if e["kind"] == "error"] == [
        line for o in outputs if (line := error_line(o)) is not None
    ]
    assert artifacts._remembered_chars[0] <= 12_000
    assert "short: Exit code: 2" not in artifacts._remembered  # short: scanned each time
    # The idle reclaimer lets the remembered scans go; the next read scans again, the same.
    assert artifacts._remembered and artifacts._remembered_calls
    artifacts.forget()
    assert not artifacts._remembered and not artifacts._remembered_calls
    assert artifacts._remembered_chars[0] == 0
    assert artifacts.entries_of(span) == first


SCRIPT = """cat <<'END' > /tmp/repro.py
import django
from django.conf import settings
settings.configure(INSTALLED_APPS=["app"])
django.setup()
from django.core.management import call_command
END
python /tmp/repro.py"""


def test_a_call_names_the_code_names_it_used() -> None:
    assert call_names(json.dumps({"command": SCRIPT})) == [
        "django.conf",
        "settings.configure",
        "INSTALLED_APPS",
        "django.setup",
        "django.core.management",
        "call_command",
    ]
    edit = {
        "file_path": "src/Game/Deck.cs",
        "new_string": "deck.OwnerClientId = Attach(p); return result",
    }
    # Paths and file names are the files list's; plain words only when called.
    assert call_names(json.dumps(edit)) == ["deck.OwnerClientId", "Attach"]
    assert call_names(json.dumps({"code": "x = render(a) + render(b)"})) == ["render"]


def _names_session(n_calls: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in range(n_calls):
        out += [
            call(f"c{n}", "bash", command=f"python -c 'mod_{n}.run_{n}()'"),
            result(f"c{n}", ""),
        ]
    return out


def test_the_code_names_share_one_line_in_their_own_room() -> None:
    t = trail.update(None, _names_session(400), budget=600)
    names = [e["text"] for e in t["entries"] if e["kind"] == "name"]
    assert len(names) == trail.MAX_NAMES and names[-1] == "mod_399.run_399"
    text = trail.render(t)
    line = text.split("### code names the agent's calls used\n")[1].splitlines()[0]
    shown = line.removeprefix("- ").split(", ")
    assert shown[0] == "mod_399.run_399" and 10 < len(shown) < 300  # newest first, bounded
    assert len(line) <= 600 * 4 * trail.NAME_SHARE
    assert trail.estimate_tokens(text) <= 600
    # A name the summary already gives is not listed again.
    assert "mod_399.run_399," not in trail.render(t, shown="ran mod_399.run_399 twice")
    # The commands keep the room they had: the names take a room of their own.
    without = {**t, "entries": [e for e in t["entries"] if e["kind"] != "name"]}
    assert text.count("\n- `") == trail.render(without, 500).count("\n- `")
