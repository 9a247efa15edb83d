"""The documents stay true to the code: every setting in the configuration reference, the
README's two commands real, and every relative link in README.md, BENCHMARKS.md and docs/
leading to a file (and a heading) that exists."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from proxy.setting_values import BUILTIN_COMPACTORS, OPTIONS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CONFIGURATION = ROOT / "docs" / "configuration.md"
DOCUMENTS = [
    *(ROOT / name for name in ("README.md", "BENCHMARKS.md", "SECURITY.md")),
    *sorted((ROOT / "docs").rglob("*.md")),
]

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.field)
def test_every_setting_is_in_the_configuration_table(option: object) -> None:
    text = CONFIGURATION.read_text()
    table = text[text.index("| flag | env | config key | default |") :]
    for name in (option.key, option.env, option.flag):  # type: ignore[attr-defined]
        if name:
            assert f"`{name}" in table, name


def test_the_readme_links_to_the_configuration_reference() -> None:
    assert "](docs/configuration.md)" in README


def test_the_first_commands_install_start_and_test() -> None:
    block = re.search(r"```sh\n(.*?)```", README, re.S)
    assert block is not None and README.index("```sh") < README.index("## ")
    lines = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert lines[0] == "python3 -m pip install -e . && xun-proxy"
    assert lines[1] == "./scripts/test"
    assert os.access(ROOT / "scripts" / "test", os.X_OK)
    assert "./scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_every_builtin_strategy_is_described() -> None:
    for name in BUILTIN_COMPACTORS:
        assert f"`{name}`" in README


def test_the_readme_and_benchmarks_stay_short() -> None:
    assert len(README.splitlines()) <= 350
    assert len((ROOT / "BENCHMARKS.md").read_text().splitlines()) <= 400


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: Path) -> list[str]:
    """The relative links of one document whose file, or heading, does not exist."""
    text = CODE.sub("", FENCE.sub("", path.read_text()))
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        where = (path.parent / file_part).resolve() if file_part else path
        if not where.exists():
            out.append(f"{target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            out.append(f"{target}: no such heading")
    return out


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(path: Path) -> None:
    assert broken_links(path) == []


def test_the_link_check_sees_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A heading: `here`\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](there.md) [ok](there.md#a-heading-here) [web](https://example.com/x)\n"
        "[gone](missing.md) [no heading](there.md#elsewhere) `[code](missing.md)`\n"
    )
    assert broken_links(doc) == ["missing.md: no such file", "there.md#elsewhere: no such heading"]
