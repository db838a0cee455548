"""The README is an entry page, the reference lives in docs/, and both hold together: the two
commands are the ones CI runs, every relative link leads to a file, every command has its page,
and nothing points outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from coordinator.cli.catalog import CATALOG

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
MAIN_JOB = ("bash scripts/setup && .venv/bin/linkgrad testbed up && "
            ".venv/bin/linkgrad run experiments/testbed-quick.yaml")
TESTS = "bash scripts/setup && .venv/bin/python -m pytest"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_an_entry_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) < 200
    assert MAIN_JOB in text
    assert TESTS in text
    ci = (ROOT / ".ci" / "run").read_text()  # CI runs the README's test command (and ruff)
    assert all(part in ci for part in TESTS.split(" && ")), ci


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file(page: Path) -> None:
    missing = [target for target in LINK.findall(page.read_text())
               if "://" not in target and not (page.parent / target).exists()]
    assert not missing, missing


def test_every_command_has_its_reference() -> None:
    docs = "\n".join(p.read_text() for p in PAGES)
    missing = [c.name for c in CATALOG if f"linkgrad {c.name}" not in docs]
    assert not missing, missing


def test_nothing_points_outside_the_repository() -> None:
    shipped = [README, *PAGES, *(p for top in ("linkgrad", "coordinator", "injector",
                                                "sniffer", "testbed", "experiments")
                                 for p in (ROOT / top).rglob("*") if p.suffix in
                                 (".py", ".md", ".yaml"))]
    wrong = [str(p.relative_to(ROOT)) for p in shipped
             if re.search(r"DESIGN\.md|\.\./shared", p.read_text())]
    assert not wrong, wrong
