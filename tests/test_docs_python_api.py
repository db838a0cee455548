"""docs/python-api.md runs: its Python blocks, in order and in one namespace, from the
repository's root, each printing what the page says it prints."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "python-api.md"
# a Python block, then what the page says it prints: a fenced block or `inline` text
BLOCK = re.compile(r"```python\n(?P<code>.*?)```(?:\s*\nprints\s*(?:```\n(?P<fenced>.*?)```"
                   r"|`(?P<inline>[^`]+)`))?", re.S)


def test_the_page_has_examples() -> None:
    assert len(BLOCK.findall(PAGE.read_text())) >= 4


def test_every_example_runs_and_prints_what_the_page_says(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {}
    for number, match in enumerate(BLOCK.finditer(PAGE.read_text()), 1):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(match["code"], f"{PAGE.name} example {number}", "exec"), namespace)
        said = match["fenced"] if match["fenced"] is not None else match["inline"]
        if said is not None:
            assert out.getvalue().strip() == said.strip(), f"example {number}"
    assert os.getcwd() == str(ROOT)
