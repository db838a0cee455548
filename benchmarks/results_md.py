"""Keeps benchmarks/RESULTS.md as sections, one per benchmark script, each rewritten by its own."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).with_name("RESULTS.md")
HEADER = """# Benchmark results

Each section is written by the script it names (run it to refresh it). Numbers are measured on
the machine named in the section, never estimated; papers' numbers are quoted beside ours.
"""


def update_section(name: str, markdown: str) -> None:
    """Replace (or append) the section `name` of RESULTS.md."""
    text = RESULTS.read_text() if RESULTS.exists() else HEADER
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    block = f"{begin}\n{markdown.strip()}\n{end}"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else f"{text}\n{block}\n"
    RESULTS.write_text(text)


def publish(name: str, result: dict[str, Any], markdown: str) -> None:
    """A benchmark's result as benchmarks/out/NAME.json and its section NAME, printed too."""
    out = RESULTS.with_name("out")
    out.mkdir(exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result, indent=2))
    update_section(name, markdown)
    print(markdown)
