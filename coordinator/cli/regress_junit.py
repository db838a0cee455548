"""JUnit XML of a night, for CI systems (Jenkins, GitLab, GitHub's test reporters): a test
suite per kind of check, a test case per check; a regression is a `failure`, a check not
judged `skipped`, and a night that could not run one `error` case (so it never reads as
green)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from coordinator.regress.check import Check
from coordinator.regress.files import write_whole

KINDS = ("experiment", "gradient", "prediction", "link", "path", "snap")


def junit_xml(suite: str, checks: Sequence[Check], failure: str | None, elapsed_s: float,
              accepted: bool = False) -> str:
    """`failure`: why the night did not run (or its suite was bad); `accepted`: the night was
    accepted as the new baseline, so its changes are no failures."""
    root = ET.Element("testsuites", name=f"linkgrad regress {suite}")
    if failure is not None:
        run = _suite(root, f"{suite}.night", 1, 0, 0, elapsed_s)
        run.set("errors", "1")
        case = ET.SubElement(run, "testcase", classname=f"{suite}.night", name="the night ran")
        ET.SubElement(case, "error", message=failure, type="NightFailed").text = failure
    for kind in KINDS:
        mine = [c for c in checks if c.kind == kind]
        if not mine:
            continue
        failed = 0 if accepted else sum(c.verdict == "regression" for c in mine)
        skipped = sum(c.verdict == "skipped" for c in mine)
        group = _suite(root, f"{suite}.{kind}", len(mine), failed, skipped, 0.0)
        for c in mine:
            case = ET.SubElement(group, "testcase", classname=f"{suite}.{kind}", name=c.name)
            if c.verdict == "regression" and not accepted:
                ET.SubElement(case, "failure", message=c.reason, type="Regression").text = (
                    f"baseline {json.dumps(c.baseline.model_dump(mode='json'))}\n"
                    f"current {json.dumps(c.current.model_dump(mode='json'))}")
            elif c.verdict == "skipped":
                ET.SubElement(case, "skipped", message=c.reason)
            else:
                said = "accepted" if c.verdict == "regression" else c.verdict
                ET.SubElement(case, "system-out").text = f"{said}: {c.reason}"
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _suite(root: ET.Element, name: str, tests: int, failures: int, skipped: int,
           elapsed_s: float) -> ET.Element:
    return ET.SubElement(root, "testsuite", name=name, tests=str(tests), failures=str(failures),
                         errors="0", skipped=str(skipped), time=f"{elapsed_s:.1f}")


def write_junit(path: Path, text: str) -> None:
    write_whole(path, text)
