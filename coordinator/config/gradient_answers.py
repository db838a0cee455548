"""What `linkgrad gradient --json` prints, read back as the input of `predict`, `place` and
`route`: one link's gradients from a log and an injection record the user made, with the
log's response times before the injection as the current means.

The link is the one the injection record names (`"app1->db"`, a run's label `"tcp app1:0 ->
db:5432"`, or `{"src_host": ..., "dst_host": ...}`), or the one the command line names
(`--link SRC->DST`, for a record that names none or names it otherwise). Several answers (one
per link measured) make one set of inputs: links between the same two hosts add up, as in a
run; the current means are the latest answer's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from coordinator.config import bounds
from coordinator.config.run_dir import read_run_file
from coordinator.config.run_records import GradientAnswerAsRead, Pair
from linkgrad.errors import InputError, Problem
from linkgrad.reading import problems_of

__all__ = ["is_gradient_answer", "parse_pair", "read_gradient_answers"]

_HOSTS = re.compile(r"^\s*(?:[a-z0-9]+\s+)?([^\s:>-][^\s:]*?)(?::\d+)?\s*->\s*"
                    r"([^\s:]+?)(?::\d+)?\s*$")


def is_gradient_answer(data: Any) -> bool:
    """Whether a file's JSON is what `linkgrad gradient --json` prints (not a run's
    gradients.json, which has a list of links)."""
    return isinstance(data, dict) and "injection" in data and "links" not in data


def parse_pair(text: str) -> Pair | None:
    """The two hosts of `SRC->DST` or of a run's link label (`tcp app1:0 -> db:5432`)."""
    found = _HOSTS.match(text)
    if found is None or found.group(1) == found.group(2):
        return None
    return found.group(1), found.group(2)


def _pair(answer: GradientAnswerAsRead, link: str | None, path: Path) -> Pair:
    if link is not None:
        pair = parse_pair(link)
        if pair is None:
            raise InputError(Problem(f"{link!r} is not a link between two hosts: give "
                                     "SRC->DST, as app1->db", field="--link"))
        return pair
    named = answer.injection.link
    if isinstance(named, dict) and isinstance(named.get("src_host"), str) \
            and isinstance(named.get("dst_host"), str):
        return named["src_host"], named["dst_host"]
    pair = parse_pair(named) if isinstance(named, str) else None
    if pair is None:
        raise InputError(Problem(
            "the injection record names no link between two hosts (its `link`: "
            f"{named!r}): name it with --link SRC->DST, or write it in the record as "
            '"app1->db"', str(path), field="injection.link"))
    return pair


def read_gradient_answers(paths: Sequence[Path], link: str | None = None
                          ) -> list[tuple[Pair, GradientAnswerAsRead]]:
    """Each answer at `paths` with the host pair its link goes between; InputError naming
    the file and field of each wrong one. `link` names the link of a single answer."""
    if link is not None and len(paths) > 1:
        raise InputError(Problem("names the link of one answer: with several, each injection "
                                 "record names its own link", field="--link"))
    out = []
    for path in paths:
        data = read_run_file(path, "the link gradients")
        if not is_gradient_answer(data):
            raise InputError(Problem("not what `linkgrad gradient --json` prints (no "
                                     "injection); a run's gradients.json is given alone",
                                     str(path)))
        try:
            answer = GradientAnswerAsRead.model_validate(data, context=bounds.READ_BACK)
        except ValidationError as e:
            raise InputError(problems_of(e, str(path))) from e
        if answer.baseline is None or not answer.baseline.transactions:
            raise InputError(Problem(
                "no response times before the injection to start from (printed by an older "
                "linkgrad, or the log has none before it): run `linkgrad gradient ... --json` "
                "again on a log that starts before the injection", str(path),
                field="baseline"))
        out.append((_pair(answer, link, path), answer))
    return out
