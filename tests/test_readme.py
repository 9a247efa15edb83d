"""The README stays true to the code: every setting documented, the two commands real."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from proxy.setting_values import BUILTIN_COMPACTORS, OPTIONS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.field)
def test_every_setting_is_in_the_configuration_table(option: object) -> None:
    table = README[README.index("## Configuration") :]
    for name in (option.key, option.env, option.flag):  # type: ignore[attr-defined]
        if name:
            assert f"`{name}" in table, name


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
